-- Take a lock for a token, after a plain SET NX PX was refused (Take;
-- after holds.lua).
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] TTL in ms
-- Returns 1 when the key now holds our token with the TTL: it was free,
-- or it held our token already. 0 or less when another token holds it:
-- minus the holder's remaining ms (at least 1), or 0 when the key has no
-- TTL (not a lock of ours). A string when the key is a semaphore's: its
-- family, 'permit <limit>', which an exclusive hold disagrees with. A key
-- of an exclusive hold with a value (a hash: see holds.lua) is busy as a
-- mutex's string key is.
--
-- Our token already there is a SET of this acquisition: sent again by the
-- client library after its connection broke (redis), or one that arrived
-- late, after a Redlock round that timed out on this node was undone and
-- the undo overtook it on another connection. Counting it as ours (and
-- setting the TTL afresh, so that the acquisition's validity holds) keeps
-- it from refusing its own acquisition for a whole TTL.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	return 1
end
if redis.call('TYPE', KEYS[1]).ok == 'hash' then
	-- Shared or permit holds, or an exclusive hold that has a value: busy
	-- until the soonest of them expires, a semaphore's key a mismatch, and
	-- free when every holder lapsed. An exclusive hold of our token there
	-- is this acquisition's (moved there by SetValue), and counts as ours
	-- as a string key of our token does below.
	local lib = library()
	local ms = lib.clock()
	local st = lib.holds(KEYS[1], ms, true)
	if #st.list == 0 then
		redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
		return 1
	end
	if st.family == 'exclusive' then
		local h = st.by[ARGV[1]]
		if h then
			h.exp = ms + tonumber(ARGV[2])
			lib.put(KEYS[1], st.family, h)
			lib.settle(KEYS[1], st, ms)
			return 1
		end
	elseif st.family ~= 'shared' then
		return st.family
	end
	return -math.max(st.soonest - ms, 1)
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
	return 0
end
return -math.max(left, 1)
