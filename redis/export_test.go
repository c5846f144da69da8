package redis

// LockKey is the server key that holds lock k.
func LockKey(k string) string { return lockKey(k) }

// AcquireScript is the Lua source of the acquire script.
func AcquireScript() string { return acquireLua }
