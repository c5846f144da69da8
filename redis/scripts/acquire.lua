-- Acquire a lock and mint its fencing token, atomically.
-- KEYS[1] lock key, KEYS[2] fence counter (same hash slot)
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] fence counter lifetime in ms
-- Returns {1, fence} when acquired, {0, remaining ms of the holder} when not.
-- A retry of a call whose reply was lost finds the lock already ours and
-- returns {1, fence} again: the counter cannot have moved while we hold it.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	-- The fence is the larger of counter+1 and the server clock in
	-- microseconds, so it keeps increasing even when the counter is lost
	-- (restart without persistence, failover, expiry of an idle counter).
	local t = redis.call('TIME')
	local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
	local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
	if now > fence then
		fence = now
	end
	redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
	return {1, fence}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return {1, tonumber(redis.call('GET', KEYS[2]))}
end
return {0, redis.call('PTTL', KEYS[1])}
