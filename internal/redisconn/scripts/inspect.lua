-- What a lock key holds, whoever owns it: an operator's inspection.
-- KEYS[1] lock key; KEYS[2], if given, its fence counter (same hash slot)
-- Returns {token or nil, PTTL of the lock key in ms, fence counter or nil}.
-- PTTL is -2 when the key does not exist.
local fence = false
if #KEYS > 1 then
	fence = redis.call('GET', KEYS[2])
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), fence}
