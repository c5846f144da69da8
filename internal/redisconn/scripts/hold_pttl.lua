-- Remaining lifetime of a shared or permit hold, only if it is still ours
-- (after holds.lua).
-- KEYS[1] lock key; ARGV[1] token
-- Returns the remaining ms, or -1 when the key does not hold our hold.
return library().pttl(KEYS[1], ARGV[1])
