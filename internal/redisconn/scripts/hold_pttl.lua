-- Remaining lifetime of a shared or permit hold, only if it is still ours
-- (after holds.lua).
-- KEYS[1] lock key; ARGV[1] token
-- Returns the remaining ms, or -1 when the key does not hold our hold.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
	return -1
end
local v = redis.call('HGET', KEYS[1], 't:' .. ARGV[1])
if not v then
	return -1
end
local left = tonumber(string.match(v, '^%d+')) - library().clock()
if left <= 0 then
	return -1
end
return left
