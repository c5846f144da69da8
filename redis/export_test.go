package redis

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

// LockKey is the server key that holds lock k.
func LockKey(k string) string { return lockKey(k) }

// AcquireScript is the Lua source of the acquire script.
func AcquireScript() string { return acquireLua }

// SetNXOp is the Locker's protocol for locks whose fence is not asked
// for, without the Locker: SET NX PX, then release.lua, on key through c,
// for BenchmarkTurns.
func SetNXOp(c *goredis.Client, key string) func(context.Context) error {
	conn := redisconn.NewGoRedis(c, false)
	var n int
	return func(ctx context.Context) error {
		n++
		token := fmt.Sprint("setnx-", n)
		if _, err := conn.SetNX(ctx, lockKey(key), token, 30*time.Second); err != nil {
			return err
		}
		_, err := conn.Eval(ctx, redisconn.ReleaseScript, []string{lockKey(key)}, token, channelOf(lockKey(key)))
		return err
	}
}

// ScriptsOp is the Locker's protocol for locks whose fence is asked for,
// without the Locker: acquire.lua, minting the fence, then release.lua,
// on key through c, for BenchmarkTurns.
func ScriptsOp(c *goredis.Client, key string) func(context.Context) error {
	conn := redisconn.NewGoRedis(c, false)
	var n int
	return func(ctx context.Context) error {
		n++
		token := fmt.Sprint("scripts-", n)
		if _, err := conn.Eval(ctx, acquireScript, []string{lockKey(key), fenceKey(key)}, token, int64(30000), redisconn.Millis(fenceLifetime), changedOf(lockKey(key))); err != nil {
			return err
		}
		_, err := conn.Eval(ctx, redisconn.ReleaseScript, []string{lockKey(key)}, token, channelOf(lockKey(key)))
		return err
	}
}

// TryAcquireToken makes one attempt at k through a driver on c with the
// given token, as a retry of an acquisition with that token would.
func TryAcquireToken(c *goredis.Client, k, token string, ttl time.Duration) (backend.Held, error) {
	d := newDriver(redisconn.NewGoRedis(c, false), slog.New(slog.DiscardHandler))
	defer d.notify.Close()
	acq, err := d.TryAcquire(context.Background(), backend.Request{Key: k, Token: token, TTL: ttl})
	return acq.Held, err
}

// TryAcquireRequest makes one attempt of req through a driver on c, as a
// retry of an acquisition with req's token would.
func TryAcquireRequest(c *goredis.Client, req backend.Request) (backend.Acquisition, error) {
	d := newDriver(redisconn.NewGoRedis(c, false), slog.New(slog.DiscardHandler))
	defer d.notify.Close()
	return d.TryAcquire(context.Background(), req)
}

// HoldOp is an exclusive hold through the scripts of shared and permit
// holds, without the Locker: hold.lua for a permit of a semaphore of 1
// (the mutex as a semaphore), minting a fence when fenced, then
// hold_release.lua, on key through c, for BenchmarkExclusiveHash.
func HoldOp(c *goredis.Client, key string, fenced bool) func(context.Context) error {
	conn := redisconn.NewGoRedis(c, false)
	req := redisconn.HoldRequest{Key: lockKey(key), TTL: 30 * time.Second, Claim: backend.Claim{Kind: backend.Permit, Limit: 1, Weight: 1}}
	if fenced {
		req.FenceKey, req.FenceLife = fenceKey(key), fenceLifetime
	}
	var n int
	return func(ctx context.Context) error {
		n++
		req.Token = fmt.Sprint("hold-", n)
		g, err := redisconn.Hold(ctx, conn, req)
		if err != nil {
			return err
		}
		if !g.Taken {
			return fmt.Errorf("hold: key %s busy: %+v", key, g)
		}
		_, err = conn.Eval(ctx, redisconn.HoldReleaseScript, []string{lockKey(key)}, req.Token, channelOf(lockKey(key)))
		return err
	}
}

// ValuedOp is the protocol of an exclusive hold with a value, without the
// Locker: hold.lua for an exclusive hold with a 16-byte value, minting
// its fence and publishing the grant, then release.lua, whose GET fails
// on the hash and which releases the hold there, on key through c, for
// BenchmarkExclusiveHash.
func ValuedOp(c *goredis.Client, key string) func(context.Context) error {
	conn := redisconn.NewGoRedis(c, false)
	req := redisconn.HoldRequest{Key: lockKey(key), TTL: 30 * time.Second, Claim: backend.Claim{Kind: backend.Exclusive},
		Value: []byte("host-a.example:1"), FenceKey: fenceKey(key), FenceLife: fenceLifetime, Channel: changedOf(lockKey(key))}
	var n int
	return func(ctx context.Context) error {
		n++
		req.Token = fmt.Sprint("valued-", n)
		g, err := redisconn.Hold(ctx, conn, req)
		if err != nil {
			return err
		}
		if !g.Taken {
			return fmt.Errorf("valued: key %s busy: %+v", key, g)
		}
		released, err := redisconn.EvalInt(ctx, conn, redisconn.ReleaseScript, []string{lockKey(key)}, req.Token, channelOf(lockKey(key)))
		if err == nil && released != 1 {
			err = fmt.Errorf("valued: release of %s found no hold", key)
		}
		return err
	}
}

// NewDriver returns the driver a Locker on c runs, for the tests of its
// Observer; the test's end closes it (not c).
func NewDriver(t testing.TB, c *goredis.Client) backend.Driver {
	d := newDriver(redisconn.NewGoRedis(c, false), slog.New(slog.DiscardHandler))
	t.Cleanup(func() { d.Close() })
	return d
}
