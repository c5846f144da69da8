-- The library of the scripts on a lock key kept as a hash of holders,
-- put into each script that uses it (see WithHolds in holds.go).
--
-- Such a key is a hash, where a mutex's hold without a value is a string
-- (SET NX PX, holding the token), so that the type of the key tells the
-- two apart:
--   kind        the key's family, as every client of the key declares it:
--               'shared' (the shared holds of a read/write lock),
--               'permit <limit>' (the permits of a semaphore) or
--               'exclusive' (one exclusive hold that has a value)
--   t:<token>   one holder: '<expiry> <weight> <fence>', its expiry in ms
--               of the server clock (TIME), the permits it takes (1 for a
--               shared or exclusive hold) and its fence (0 where none is
--               minted: Redlock's nodes, or a mutex's hold that SetValue
--               moved here before its fence was asked for)
--   v:<token>   the holder's value (Request.Value, SetValue) and its
--               version: '<version> <value>', the value's bytes as they
--               are (an empty value, removed by SetValue, keeps its
--               version). The value a hold is taken with is version 1, and
--               each SetValue of the holder's a higher one, so that a
--               Redlock node that has a newer one never takes an older
--               one, and Inspect picks the newest among the nodes.
--   w:<token>   a writer waiting for a read/write lock's key: '<expiry>',
--               in ms of the server clock. While one is live, no new
--               shared hold is granted (those held keep theirs), so that
--               readers that keep arriving do not starve the writer; it
--               lasts the writer's TTL unless the writer's next attempt
--               renews it, and goes when the writer's wait ends (see
--               mark.lua).
-- A holder whose expiry has passed holds nothing; the scripts that change
-- the key delete it, and its value, and a lapsed mark. The key's own TTL
-- is kept at the latest expiry of its holders and marks, so Redis deletes
-- the key when the last of them lapses, and a hash is never left without
-- a live holder or mark by a script. A hash with live marks and no holder
-- is free for a writer, which replaces it. An 'exclusive' hash admits one holder at a time (a limit of 1):
-- its live holder is its only one.
--
-- The library is one function that returns its functions, called only by
-- the paths that need them: a script's whole body runs at every call, and
-- creating the closures costs a script that never needs them (the
-- exclusive paths of take.lua and acquire.lua) about a microsecond. A
-- script whose fast path needs no library has it put where the line
-- "--@holds" stands, after that path has returned, so that the fast path
-- does not even create the one closure of library itself.

local function library()
	local lib = {}

	-- clock returns the server's clock in ms, and in µs.
	function lib.clock()
		local t = redis.call('TIME')
		local s, us = tonumber(t[1]), tonumber(t[2])
		return s * 1000 + math.floor(us / 1000), s * 1000000 + us
	end

	-- holds reads the hash at key at time ms: its family, its live holders,
	-- in a list and by token (each {token, exp, weight, fence, value,
	-- version}; value '' and version 0 when none was set), the permits
	-- they take, and the soonest of their expiries; and its live marks of
	-- waiting writers, by token (their expiries), and the latest of those.
	-- With purge it deletes the expired holders and their values, the
	-- lapsed marks, and the key when nothing is left alive.
	function lib.holds(key, ms, purge)
		local raw = redis.call('HGETALL', key)
		local st = {family = false, list = {}, by = {}, units = 0, soonest = false, marks = {}, marked = false}
		local values = false
		for i = 1, #raw, 2 do
			local f = raw[i]
			local prefix = string.sub(f, 1, 2)
			if f == 'kind' then
				st.family = raw[i + 1]
			elseif prefix == 't:' then
				local exp, w, fence = string.match(raw[i + 1], '^(%d+) (%d+) (%d+)$')
				exp = tonumber(exp)
				if exp > ms then
					local h = {token = string.sub(f, 3), exp = exp, weight = tonumber(w), fence = tonumber(fence), value = '', version = 0}
					st.list[#st.list + 1] = h
					st.by[h.token] = h
					st.units = st.units + h.weight
					if not st.soonest or exp < st.soonest then
						st.soonest = exp
					end
				elseif purge then
					redis.call('HDEL', key, f)
				end
			elseif prefix == 'v:' then
				values = values or {}
				values[string.sub(f, 3)] = raw[i + 1]
			elseif prefix == 'w:' then
				local exp = tonumber(raw[i + 1])
				if exp > ms then
					st.marks[string.sub(f, 3)] = exp
					if not st.marked or exp > st.marked then
						st.marked = exp
					end
				elseif purge then
					redis.call('HDEL', key, f)
				end
			end
		end
		if #raw > 0 and not st.family then
			error('locker: ' .. key .. ' is a hash without a kind field, not a lock key')
		end
		if values then
			for token, v in pairs(values) do
				local h = st.by[token]
				if h then
					local sp = string.find(v, ' ', 1, true)
					h.version, h.value = tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1)
				elseif purge then
					redis.call('HDEL', key, 'v:' .. token)
				end
			end
		end
		if purge and #raw > 0 and #st.list == 0 and not st.marked then
			redis.call('DEL', key)
		end
		return st
	end

	-- put writes holder h of key, of family.
	function lib.put(key, family, h)
		redis.call('HSET', key, 'kind', family, 't:' .. h.token, string.format('%d %d %d', h.exp, h.weight, h.fence))
	end

	-- settle sets key's TTL to the latest expiry of st's holders (those not
	-- marked gone) and marks at time ms, or deletes the key when none is
	-- left.
	function lib.settle(key, st, ms)
		local latest = false
		for _, h in ipairs(st.list) do
			if not h.gone and (not latest or h.exp > latest) then
				latest = h.exp
			end
		end
		for _, exp in pairs(st.marks or {}) do
			if not latest or exp > latest then
				latest = exp
			end
		end
		if latest then
			redis.call('PEXPIRE', key, latest - ms)
		else
			redis.call('DEL', key)
		end
	end

	-- refresh sets the expiry of token's hold of key to ms + ttl, if it
	-- holds the key (a hash) at ms: 1 when it does, 0 when not (expired,
	-- released, never there, or the key holds another kind of lock). With
	-- family, only a hold in a hash of that family counts (the exclusive
	-- scripts pass 'exclusive').
	function lib.refresh(key, token, ttl, ms, family)
		if redis.call('TYPE', key).ok ~= 'hash' then
			return 0
		end
		local st = lib.holds(key, ms, true)
		local h = st.by[token]
		if not h or (family and st.family ~= family) then
			return 0
		end
		h.exp = ms + tonumber(ttl)
		lib.put(key, st.family, h)
		lib.settle(key, st, ms)
		return 1
	end

	-- release removes token's hold of key, and its value, and publishes
	-- a release notice on channel, if it holds the key (a hash) now: 1
	-- when it did, 0 when not (expired, released by force, never there,
	-- or the key holds another kind of lock). The other holders keep
	-- theirs; the key goes with the last of them. With family, as in
	-- refresh.
	function lib.release(key, token, channel, family)
		if redis.call('TYPE', key).ok ~= 'hash' then
			return 0
		end
		local ms = lib.clock()
		local st = lib.holds(key, ms, true)
		local h = st.by[token]
		if not h or (family and st.family ~= family) then
			return 0
		end
		h.gone = true
		redis.call('HDEL', key, 't:' .. token, 'v:' .. token)
		lib.settle(key, st, ms)
		redis.call('PUBLISH', channel, '')
		return 1
	end

	-- pttl returns the remaining ms of token's hold of key, or -1 when
	-- it does not hold the key (a hash) now. With family, as in refresh.
	function lib.pttl(key, token, family)
		if redis.call('TYPE', key).ok ~= 'hash' then
			return -1
		end
		local v = redis.call('HGET', key, 't:' .. token)
		if not v or (family and redis.call('HGET', key, 'kind') ~= family) then
			return -1
		end
		local left = tonumber(string.match(v, '^%d+')) - lib.clock()
		if left <= 0 then
			return -1
		end
		return left
	end

	-- compatible reports whether a request of family want may wait for
	-- the holders of family held (true: busy until they go) rather than
	-- disagree with them (false: a mismatch). Exclusive and shared holds
	-- are the two sides of a read/write lock; a semaphore's permits agree
	-- only with permits of the same limit, which are of its family.
	function lib.compatible(want, held)
		return (want == 'shared' or want == 'exclusive') and (held == 'shared' or held == 'exclusive')
	end

	return lib
end

