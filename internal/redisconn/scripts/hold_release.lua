-- Release a shared or permit hold only if it is still ours, and publish a
-- release notice for the waiters (after holds.lua). The other holders keep
-- theirs; the key goes with the last of them.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key does not hold our hold
-- (expired, released by force, never taken).
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
	return 0
end
local lib = library()
local ms = lib.clock()
local st = lib.holds(KEYS[1], ms, true)
local h = st.by[ARGV[1]]
if not h then
	return 0
end
h.gone = true
redis.call('HDEL', KEYS[1], 't:' .. ARGV[1])
lib.settle(KEYS[1], st, ms)
redis.call('PUBLISH', ARGV[2], '')
return 1
