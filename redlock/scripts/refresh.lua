-- Extend a lock on one Redlock node only if it holds our token.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] TTL in ms
-- Returns 1 when extended, 0 when the key did not hold our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
