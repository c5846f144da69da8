-- Extend many locks at once, each only if it is still ours.
-- KEYS: the lock keys (all in one hash slot on a Redis Cluster).
-- ARGV: for each key in order, its token, then its new TTL in ms.
-- Returns one integer per key: 1 when extended, 0 when not ours.
local out = {}
for i = 1, #KEYS do
	if redis.call('GET', KEYS[i]) == ARGV[2 * i - 1] then
		out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
	else
		out[i] = 0
	end
end
return out
