-- Release a lock on one Redlock node only if it holds our token, and
-- publish a release notice for the waiters.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- Returns 1 when deleted, 0 when the key did not hold our token.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
