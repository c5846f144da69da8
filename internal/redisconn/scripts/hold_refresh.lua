-- Extend a shared or permit hold only if it is still ours (after
-- holds.lua). The key's TTL becomes the latest expiry of its holders, so
-- a shorter TTL for one holder never shortens another's.
-- KEYS[1] lock key; ARGV[1] token, ARGV[2] new TTL in ms
-- Returns 1 when extended, 0 when the key does not hold our hold.
local lib = library()
return lib.refresh(KEYS[1], ARGV[1], ARGV[2], (lib.clock()))
