-- Take a hold of a lock key kept as a hash of holders: a shared hold, a
-- permit hold, or an exclusive hold that has a value; mint its fence with
-- it, store its value, and publish a change notice, atomically (after
-- holds.lua).
-- KEYS[1] lock key; KEYS[2], if given, its fence counter (same hash slot)
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] the key's family as the
-- request declares it ('shared', 'permit <limit>' or 'exclusive'), ARGV[4]
-- the limit (0 for shared holds: no limit; 1 for an exclusive hold),
-- ARGV[5] the permits the hold takes, ARGV[6] the fence counter's lifetime
-- in ms, ARGV[7] the hold's value ('' for none), ARGV[8] the key's change
-- channel ('' to publish nothing)
-- Returns {1, fence} when the hold is ours (fence 0 without a counter);
-- {0, ms} when the key has no room for it: the ms until the soonest
-- holder expires, -1 when unknown (a key without a TTL), or, for a shared
-- hold kept out by waiting writers' marks, until the last of them lapses;
-- {-1, family}
-- when the key's holders declare another family that the request cannot
-- wait for: 'exclusive', 'shared' or 'permit <limit>'.
--
-- Our token already there is this acquisition's request sent again (its
-- first reply lost): it keeps its hold and fence, with its TTL set afresh,
-- as take.lua does for an exclusive hold.
local token, family = ARGV[1], ARGV[3]
if redis.call('TYPE', KEYS[1]).ok == 'string' then
	-- A mutex's holder without a value (SET NX PX): it keeps shared and
	-- other exclusive holds out, and a semaphore's permits are not of its
	-- family.
	if family == 'shared' or family == 'exclusive' then
		return {0, redis.call('PTTL', KEYS[1])}
	end
	return {-1, 'exclusive'}
end
local lib = library()
local ms, us = lib.clock()
local st = lib.holds(KEYS[1], ms, true)
if #st.list > 0 and st.family ~= family then
	if lib.compatible(family, st.family) then
		-- A writer and readers: busy until the soonest of them expires.
		return {0, math.max(st.soonest - ms, 1)}
	end
	return {-1, st.family}
end
local h = st.by[token]
if h then
	h.exp = ms + tonumber(ARGV[2])
else
	local limit, w = tonumber(ARGV[4]), tonumber(ARGV[5])
	if family == 'shared' and st.marked then
		-- A writer waits: no new reader gets in ahead of it.
		return {0, math.max(st.marked - ms, 1)}
	end
	if limit > 0 and st.units + w > limit then
		if not st.soonest then
			return {0, -1}
		end
		return {0, math.max(st.soonest - ms, 1)}
	end
	-- The fence: as acquire.lua mints a mutex's, the larger of the
	-- counter + 1 and the server clock in µs, stored back with the token
	-- it was minted for.
	local fence = 0
	if #KEYS > 1 then
		local counter = redis.call('GET', KEYS[2])
		fence = tonumber(string.match(counter or '0', '^%d+')) + 1
		if us > fence then
			fence = us
		end
		redis.call('SET', KEYS[2], string.format('%d %s', fence, token), 'PX', ARGV[6])
	end
	h = {token = token, exp = ms + tonumber(ARGV[2]), weight = w, fence = fence, new = true}
	st.list[#st.list + 1] = h
end
lib.put(KEYS[1], family, h)
if st.marks[token] then
	-- The writer that waited got in: its mark goes.
	st.marks[token] = nil
	redis.call('HDEL', KEYS[1], 'w:' .. token)
end
if ARGV[7] ~= '' then
	redis.call('HSET', KEYS[1], 'v:' .. token, '1 ' .. ARGV[7])
end
lib.settle(KEYS[1], st, ms)
if h.new and ARGV[8] ~= '' then
	redis.call('PUBLISH', ARGV[8], '')
end
return {1, h.fence}
