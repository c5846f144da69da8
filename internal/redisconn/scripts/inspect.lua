-- What a lock key holds, whoever owns it: an operator's inspection (after
-- holds.lua).
-- KEYS[1] lock key; KEYS[2], if given, its fence counter (same hash slot)
-- Returns {token or nil, PTTL of the lock key in ms, fence counter or nil}
-- for a mutex's hold without a value (a string key) or a free key, and
-- for a hash of holders (shared, permit, or an exclusive hold with a
-- value) {nil, PTTL, fence counter or nil, family, holders}, holders
-- being for each live holder its token, remaining ms, weight, fence (0
-- when none was minted), value ('' when none) and the value's version (0
-- when none was set), one after another.
-- PTTL is -2 when the key does not exist.
local fence = false
if #KEYS > 1 then
	fence = redis.call('GET', KEYS[2])
end
local pttl = redis.call('PTTL', KEYS[1])
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
	return {redis.call('GET', KEYS[1]), pttl, fence}
end
local lib = library()
local ms = lib.clock()
local st = lib.holds(KEYS[1], ms, false)
local flat = {}
for _, h in ipairs(st.list) do
	flat[#flat + 1] = h.token
	flat[#flat + 1] = h.exp - ms
	flat[#flat + 1] = h.weight
	flat[#flat + 1] = h.fence
	flat[#flat + 1] = h.value
	flat[#flat + 1] = h.version
end
return {false, pttl, fence, st.family, flat}
