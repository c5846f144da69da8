-- The library of the scripts on a lock key of shared or permit holds,
-- put before each script that uses it (see WithHolds in holds.go).
--
-- Such a key is a hash, where an exclusive hold's key is a string (SET NX
-- PX, holding the token), so that the type of the key tells the two apart:
--   kind        the key's family, as every client of the key declares it:
--               'shared' (the shared holds of a read/write lock) or
--               'permit <limit>' (the permits of a semaphore)
--   t:<token>   one holder: '<expiry> <weight> <fence>', its expiry in ms
--               of the server clock (TIME), the permits it takes (1 for a
--               shared hold) and its fence (0 where none is minted:
--               Redlock's nodes)
-- A holder whose expiry has passed holds nothing; the scripts that change
-- the key delete it. The key's own TTL is kept at the latest expiry of its
-- holders, so Redis deletes the key when the last of them lapses, and a
-- hash is never left without a live holder by a script.
--
-- The library is one function that returns its functions, called only by
-- the paths that need them: a script's whole body runs at every call, and
-- creating the closures costs a script that never needs them (the
-- exclusive paths of take.lua and acquire.lua) about a microsecond.

local function library()
	local lib = {}

	-- clock returns the server's clock in ms, and in µs.
	function lib.clock()
		local t = redis.call('TIME')
		local s, us = tonumber(t[1]), tonumber(t[2])
		return s * 1000 + math.floor(us / 1000), s * 1000000 + us
	end

	-- holds reads the hash at key at time ms: its family, its live holders,
	-- in a list and by token (each {token, exp, weight, fence}), the permits
	-- they take, and the soonest of their expiries. With purge it deletes
	-- the expired holders, and the key when none is left alive.
	function lib.holds(key, ms, purge)
		local raw = redis.call('HGETALL', key)
		local st = {family = false, list = {}, by = {}, units = 0, soonest = false}
		for i = 1, #raw, 2 do
			local f = raw[i]
			if f == 'kind' then
				st.family = raw[i + 1]
			elseif string.sub(f, 1, 2) == 't:' then
				local exp, w, fence = string.match(raw[i + 1], '^(%d+) (%d+) (%d+)$')
				exp = tonumber(exp)
				if exp > ms then
					local h = {token = string.sub(f, 3), exp = exp, weight = tonumber(w), fence = tonumber(fence)}
					st.list[#st.list + 1] = h
					st.by[h.token] = h
					st.units = st.units + h.weight
					if not st.soonest or exp < st.soonest then
						st.soonest = exp
					end
				elseif purge then
					redis.call('HDEL', key, f)
				end
			end
		end
		if #raw > 0 and not st.family then
			error('locker: ' .. key .. ' is a hash without a kind field, not a lock key')
		end
		if purge and #raw > 0 and #st.list == 0 then
			redis.call('DEL', key)
		end
		return st
	end

	-- put writes holder h of key, of family.
	function lib.put(key, family, h)
		redis.call('HSET', key, 'kind', family, 't:' .. h.token, string.format('%d %d %d', h.exp, h.weight, h.fence))
	end

	-- settle sets key's TTL to the latest expiry of st's holders (those not
	-- marked gone) at time ms, or deletes the key when none is left.
	function lib.settle(key, st, ms)
		local latest = false
		for _, h in ipairs(st.list) do
			if not h.gone and (not latest or h.exp > latest) then
				latest = h.exp
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
	-- released, never there, or the key holds another kind of lock).
	function lib.refresh(key, token, ttl, ms)
		if redis.call('TYPE', key).ok ~= 'hash' then
			return 0
		end
		local st = lib.holds(key, ms, true)
		local h = st.by[token]
		if not h then
			return 0
		end
		h.exp = ms + tonumber(ttl)
		lib.put(key, st.family, h)
		lib.settle(key, st, ms)
		return 1
	end

	return lib
end

