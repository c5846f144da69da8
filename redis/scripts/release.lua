-- Release a lock only if it is still ours, and wake its waiters.
-- KEYS[1] lock key, KEYS[2] wake-up list (same hash slot)
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] wake-up list lifetime in
-- ms, 0 for no list (waiters listen on the channel only)
-- Returns 1 when released, 0 when the lock was not ours (expired, taken).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
if ARGV[3] ~= '0' then
	redis.call('DEL', KEYS[2])
	redis.call('RPUSH', KEYS[2], '1')
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
