-- Take a lock and mint its fencing token, atomically; or, with an empty
-- TTL, mint the token of a lock already ours (after redisconn's
-- holds.lua).
-- KEYS[1] lock key, KEYS[2] fence counter (same hash slot)
-- ARGV[1] token, ARGV[2] TTL in ms or "" to mint only, ARGV[3] fence
-- counter lifetime in ms
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
local counter = redis.call('GET', KEYS[2])
if ARGV[2] == '' or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
	local holder = false
	if ARGV[2] ~= '' and redis.call('TYPE', KEYS[1]).ok == 'hash' then
		-- Shared or permit holds, never ours: busy until the soonest of
		-- them expires, a semaphore's key a mismatch, and free when every
		-- holder lapsed.
		local lib = library()
		local ms = lib.clock()
		local st = lib.holds(KEYS[1], ms, true)
		if #st.list > 0 then
			if st.family ~= 'shared' then
				return {-1, st.family}
			end
			return {0, math.max(st.soonest - ms, 1)}
		end
		redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
		holder = ARGV[1]
	else
		-- A hash (minting only) is not ours: its GET fails, in protected
		-- mode, and the error is no token.
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
	if counter then
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
return {1, fence}
