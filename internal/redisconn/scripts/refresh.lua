-- Extend a lock only if it is still ours.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new TTL in ms
-- Returns 1 when extended, 0 when the key does not hold our token (a
-- hash of shared or permit holds, whose GET fails, included: see
-- release.lua).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
