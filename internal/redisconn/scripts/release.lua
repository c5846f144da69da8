-- Release a lock only if it is still ours, and publish a release notice
-- for its waiters.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key did not hold our token (expired,
-- taken by another).
--
-- The key may have become a hash of shared or permit holds since ours
-- expired: GET is called in protected mode, its WRONGTYPE error is then
-- no token of ours, and the script costs no more than with call.
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], '')
return 1
