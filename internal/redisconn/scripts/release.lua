-- Release a lock only if it is still ours, and publish a release notice
-- for its waiters.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key did not hold our token (expired,
-- taken by another).
--
-- A mutex's hold is the key's string value; one with a value lives in a
-- hash of holders (see holds.lua), where SetValue may also have moved a
-- hold taken without one. GET is called in protected mode: its WRONGTYPE
-- error on a hash costs no more than with call, and sends the script to
-- the hash's release, which finds our hold in a hash of family
-- 'exclusive' or answers 0 (a key of shared or permit holds, taken since
-- ours expired). The library is put after the string key's path, which
-- never creates it.
local v = redis.pcall('GET', KEYS[1])
if v == ARGV[1] then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', ARGV[2], '')
	return 1
end
if type(v) ~= 'table' then
	return 0
end
--@holds
return library().release(KEYS[1], ARGV[1], ARGV[2], 'exclusive')
