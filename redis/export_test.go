package redis

import (
	"context"
	"fmt"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/internal/redisconn"
)

// LockKey is the server key that holds lock k.
func LockKey(k string) string { return lockKey(k) }

// AcquireScript is the Lua source of the acquire script.
func AcquireScript() string { return acquireLua }

// ScriptsOp is the Locker's protocol without the Locker: acquire.lua,
// then release.lua, on key through c, for BenchmarkTurns.
func ScriptsOp(c *goredis.Client, key string) func(context.Context) error {
	conn := redisconn.NewGoRedis(c, false)
	var n int
	return func(ctx context.Context) error {
		n++
		token := fmt.Sprint("scripts-", n)
		if _, err := conn.Eval(ctx, acquireScript, []string{lockKey(key), fenceKey(key)}, token, int64(30000), redisconn.Millis(fenceLifetime)); err != nil {
			return err
		}
		_, err := conn.Eval(ctx, redisconn.ReleaseScript, []string{lockKey(key)}, token, channelOf(key))
		return err
	}
}
