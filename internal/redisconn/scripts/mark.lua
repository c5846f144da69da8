-- Mark a writer waiting for a read/write lock's key, or take its mark
-- back (after holds.lua): while a live mark is on the key, no new shared
-- hold is granted, so that readers that keep arriving do not starve the
-- writer (see holds.lua, w:<token>).
-- KEYS[1] lock key; ARGV[1] the writer's token, ARGV[2] the mark's TTL in
-- ms, or 0 to take the mark back, ARGV[3] the key's release channel
-- Returns 1 when the mark was set (or taken back), 0 when there was
-- nothing to do: only a hash of a read/write lock's holders is marked (a
-- mutex's string key keeps readers out by itself), and a mark taken back
-- must be there.
--
-- Taking a mark back publishes a release notice, so that readers it kept
-- out try again.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
	return 0
end
local token = ARGV[1]
local lib = library()
local ms = lib.clock()
local st = lib.holds(KEYS[1], ms, true)
if ARGV[2] == '0' then
	if not st.marks[token] then
		return 0
	end
	st.marks[token] = nil
	redis.call('HDEL', KEYS[1], 'w:' .. token)
	lib.settle(KEYS[1], st, ms)
	redis.call('PUBLISH', ARGV[3], '')
	return 1
end
if #st.list == 0 or (st.family ~= 'shared' and st.family ~= 'exclusive') then
	return 0
end
st.marks[token] = ms + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'w:' .. token, st.marks[token])
lib.settle(KEYS[1], st, ms)
return 1
