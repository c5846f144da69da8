-- Release a lock by force, whoever holds it, and publish a release notice
-- for its waiters, as release.lua does for the holder's own release.
-- KEYS[1] lock key; ARGV[1] release channel
-- Returns 1 when a lock was deleted, 0 when the key was free.
if redis.call('DEL', KEYS[1]) == 0 then
	return 0
end
redis.call('PUBLISH', ARGV[1], '')
return 1
