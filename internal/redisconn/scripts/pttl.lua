-- Remaining lifetime of a lock, only if it is still ours.
-- KEYS[1] lock key; ARGV[1] token
-- Returns the remaining ms, or -1 when the key does not hold our token. A
-- key that is a hash of holders (GET fails) is asked for our hold there:
-- see release.lua.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
	return redis.call('PTTL', KEYS[1])
end
if type(v) ~= 'table' then
	return -1
end
--@holds
return library().pttl(KEYS[1], ARGV[1], 'exclusive')
