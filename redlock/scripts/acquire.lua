-- Take a lock on one Redlock node.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] TTL in ms
-- Returns 1 when taken (or already ours: a retried request, whose TTL is
-- reset so that every node counts from this attempt), or -1 - (the
-- holder's remaining ms) when another token holds it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return -1 - redis.call('PTTL', KEYS[1])
