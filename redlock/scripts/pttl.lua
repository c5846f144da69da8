-- The remaining TTL in ms of our lock on one Redlock node, or -1 when the
-- key does not hold our token.
-- KEYS[1] lock key; ARGV[1] token
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PTTL', KEYS[1])
end
return -1
