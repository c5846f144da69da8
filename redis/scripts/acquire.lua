-- Take a lock and mint its fencing token, atomically, and publish a change
-- notice; or, with an empty TTL, mint the token of a lock already ours
-- (with redisconn's holds.lua).
-- KEYS[1] lock key, KEYS[2] fence counter (same hash slot)
-- ARGV[1] token, ARGV[2] TTL in ms or "" to mint only, ARGV[3] fence
-- counter lifetime in ms, ARGV[4] the key's change channel (unused when
-- minting only)
-- Returns {1, fence} when acquired (or minted); {0, remaining ms of the
-- holder} when the key is taken (the soonest expiry of a read lock's
-- shared holders); {0, -2} when minting finds the key not ours (expired,
-- released, taken by another); {-1, family} when the key is a
-- semaphore's, 'permit <limit>', which an exclusive hold disagrees with.
-- The counter holds "<fence> <token>": the last fence minted, and the
-- token of the lock it was minted for. A lock already ours whose token is
-- there has its fence (a retry whose first reply was lost, a second mint);
-- otherwise a fence is minted now. (A counter written before it held the
-- token holds the fence alone.)
--
-- Our lock may also be a hash of family 'exclusive' (see holds.lua): a
-- lock taken without a value, to which SetValue gave one. Its fence is
-- then kept in its entry too, where Inspect reads it.
local counter = redis.call('GET', KEYS[2])
local lib, entry = false, false
if ARGV[2] == '' or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	local holder = false
	if redis.call('TYPE', KEYS[1]).ok == 'hash' then
		--@holds
		lib = library()
		local ms = lib.clock()
		local st = lib.holds(KEYS[1], ms, true)
		if st.family == 'exclusive' and st.by[ARGV[1]] then
			entry = st.by[ARGV[1]]
			if entry.fence > 0 then
				return {1, entry.fence}
			end
			holder = ARGV[1]
		elseif ARGV[2] == '' then
			-- Shared or permit holds, or another's exclusive one: none
			-- of them ours to mint for.
			return {0, -2}
		elseif #st.list > 0 then
			-- Busy until the soonest of them expires (an exclusive holder
			-- with a value, a read lock's shared holders), or a
			-- semaphore's key, a mismatch.
			if lib.compatible('exclusive', st.family) then
				return {0, math.max(st.soonest - ms, 1)}
			end
			return {-1, st.family}
		else
			-- Every holder lapsed: the key is free.
			redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
			holder = ARGV[1]
		end
	else
		holder = redis.pcall('GET', KEYS[1])
	end
	if holder ~= ARGV[1] then
		-- Minted only while the lock is ours: a holder whose lock expired
		-- before it asked gets no fence, rather than one above its
		-- successor's.
		if ARGV[2] == '' then
			return {0, -2}
		end
		return {0, redis.call('PTTL', KEYS[1])}
	end
	if counter and not entry then
		local f, owner = string.match(counter, '^(%d+) (.*)$')
		if owner == ARGV[1] then
			return {1, tonumber(f)}
		end
	end
end
-- The fence is the larger of counter+1 and the server clock in
-- microseconds, so it keeps increasing even when the counter is lost
-- (restart without persistence, failover, expiry of an idle counter).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = tonumber(string.match(counter or '0', '^%d+')) + 1
if now > fence then
	fence = now
end
redis.call('SET', KEYS[2], string.format('%d %s', fence, ARGV[1]), 'PX', ARGV[3])
if entry then
	entry.fence = fence
	lib.put(KEYS[1], 'exclusive', entry)
end
if ARGV[2] ~= '' then
	redis.call('PUBLISH', ARGV[4], '')
end
return {1, fence}
