-- Extend many locks at once, each only if it is still ours (after
-- holds.lua).
-- KEYS: the lock keys (all in one hash slot on a Redis Cluster).
-- ARGV[1]: one letter per key, in order: 'x' for an exclusive hold (a
-- string key, or a hash of holders when the hold has a value: see
-- release.lua), 'h' for a shared or permit hold (a hash). Then for each
-- key in order, its token and its new TTL in ms.
-- Returns one integer per key: 1 when extended, 0 when not ours.
local out = {}
local lib, ms = false, false
for i = 1, #KEYS do
	local token, ttl = ARGV[2 * i], ARGV[2 * i + 1]
	local v = false -- an exclusive hold's key's value, or GET's error
	local x = string.sub(ARGV[1], i, i) == 'x'
	if x then
		v = redis.pcall('GET', KEYS[i])
	end
	if x and v == token then
		out[i] = redis.call('PEXPIRE', KEYS[i], ttl)
	elseif x and type(v) ~= 'table' then
		out[i] = 0
	else
		-- A shared or permit hold, or an exclusive one in a hash (GET
		-- failed on it).
		lib = lib or library()
		ms = ms or lib.clock()
		out[i] = lib.refresh(KEYS[i], token, ttl, ms, x and 'exclusive')
	end
end
return out
