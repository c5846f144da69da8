-- Remaining lifetime of a lock, only if it is still ours.
-- KEYS[1] lock key; ARGV[1] token
-- Returns the remaining ms, or -1 when the key does not hold our token (a
-- hash of shared or permit holds, whose GET fails, included: see
-- release.lua).
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PTTL', KEYS[1])
end
return -1
