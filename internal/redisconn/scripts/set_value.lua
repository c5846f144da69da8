-- Replace a hold's value, only if the hold is still ours, and publish a
-- change notice (after holds.lua).
-- KEYS[1] lock key; KEYS[2], if given, its fence counter (same hash slot)
-- ARGV[1] token, ARGV[2] the new value ('' removes it), ARGV[3] the key's
-- change channel, ARGV[4] the value's version (2 or more: see holds.lua)
-- Returns 1 when the hold is ours (its value replaced, or already of a
-- later version), 0 when the key does not hold our hold. The hold's TTL,
-- fence and place are unchanged.
--
-- A hold in a hash of holders (shared, permit, or an exclusive hold that
-- has a value) keeps its value beside it, and takes a value only of a
-- later version than its own: the holder's SetValue calls reach each
-- Redlock node in any order, and every node ends with the latest. A
-- mutex's hold without a value is a string key: a value moves it into a
-- hash of family 'exclusive', with its remaining TTL and its fence, if
-- one was minted for it (the counter names its token), so that Inspect
-- reports that fence as before; the scripts on an exclusive hold
-- (release.lua, refresh.lua, pttl.lua, refresh_many.lua) find it there.
-- An empty value leaves a string key as it is: it has no value to remove.
-- Either way the notice is published, so that an observer looks again (an
-- election announces a new leader so, whatever its value).
local token, value, version = ARGV[1], ARGV[2], tonumber(ARGV[4])
local v = redis.pcall('GET', KEYS[1])
if v == token then
	if value ~= '' then
		local left = redis.call('PTTL', KEYS[1])
		if left < 0 then
			-- Without a TTL it is no lock of ours.
			return 0
		end
		local fence = 0
		if #KEYS > 1 then
			local f, minter = string.match(redis.call('GET', KEYS[2]) or '', '^(%d+) (.*)$')
			if minter == token then
				fence = tonumber(f)
			end
		end
		local lib = library()
		local ms = lib.clock()
		local h = {token = token, exp = ms + math.max(left, 1), weight = 1, fence = fence}
		redis.call('DEL', KEYS[1])
		lib.put(KEYS[1], 'exclusive', h)
		redis.call('HSET', KEYS[1], 'v:' .. token, version .. ' ' .. value)
		lib.settle(KEYS[1], {list = {h}}, ms)
	end
	redis.call('PUBLISH', ARGV[3], '')
	return 1
end
if type(v) ~= 'table' or redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
	return 0
end
local lib = library()
local h = lib.holds(KEYS[1], lib.clock(), true).by[token]
if not h then
	return 0
end
if version > h.version then
	redis.call('HSET', KEYS[1], 'v:' .. token, version .. ' ' .. value)
	redis.call('PUBLISH', ARGV[3], '')
end
return 1
