-- Extend a lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new TTL in ms
-- Returns 1 when extended, 0 when the key does not hold our token. A key
-- that is a hash of holders (GET fails) is extended there: see
-- release.lua.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if type(v) ~= 'table' then
	return 0
end
--@holds
local lib = library()
return lib.refresh(KEYS[1], ARGV[1], ARGV[2], (lib.clock()), 'exclusive')
