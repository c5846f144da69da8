-- Extend many locks at once, each only if it is still ours (after
-- holds.lua).
-- KEYS: the lock keys (all in one hash slot on a Redis Cluster).
-- ARGV[1]: one letter per key, in order: 'x' for an exclusive hold (a
-- string key), 'h' for a shared or permit hold (a hash). Then for each key
-- in order, its token and its new TTL in ms.
-- Returns one integer per key: 1 when extended, 0 when not ours.
local out = {}
local lib, ms = false, false
for i = 1, #KEYS do
	local token, ttl = ARGV[2 * i], ARGV[2 * i + 1]
	if string.sub(ARGV[1], i, i) == 'h' then
		lib = lib or library()
		ms = ms or lib.clock()
		out[i] = lib.refresh(KEYS[i], token, ttl, ms)
	elseif redis.pcall('GET', KEYS[i]) == token then
		out[i] = redis.call('PEXPIRE', KEYS[i], ttl)
	else
		out[i] = 0
	end
end
return out
