-- Remaining lifetime of a lock, only if it is still ours.
-- KEYS[1] lock key; ARGV[1] token
-- Returns the remaining ms, or -1 when the key does not hold our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PTTL', KEYS[1])
end
return -1
