package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redisconn"
)

// NewWakeList is New with the other wake-up design: waiters block with BLPOP
// on a per-key list that Release pushes to, one connection per waiter. The
// tests and benchmarks compare it with the pub/sub design New uses.
func NewWakeList(c goredis.UniversalClient, opts *Options) (locker.Locker, error) {
	return newLocker(context.Background(), redisconn.NewGoRedis(c, false), "", opts, wakeList)
}

// LockKey is the server key that holds lock k.
func LockKey(k string) string { return lockKey(k) }

// AcquireScript is the Lua source of the acquire script.
func AcquireScript() string { return acquireLua }
