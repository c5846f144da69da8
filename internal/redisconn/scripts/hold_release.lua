-- Release a shared or permit hold only if it is still ours, and publish a
-- release notice for the waiters (after holds.lua). The other holders keep
-- theirs; the key goes with the last of them.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the key does not hold our hold
-- (expired, released by force, never taken).
return library().release(KEYS[1], ARGV[1], ARGV[2])
