// Package redlockbench compares locker's Redlock backend with
// go-redsync/redsync on the same five Redis masters, in one run. It is a
// module of its own so that redsync stays out of the library's go.mod.
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/redlock && go test -run '^$' -bench . -benchmem -count 5
package redlockbench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redlock"
)

func clients(b *testing.B) []*goredis.Client {
	var cs []*goredis.Client
	for _, h := range testenv.Hosts(b, testenv.Get(b, testenv.RedlockURL)) {
		c := goredis.NewClient(&goredis.Options{Addr: h, ContextTimeoutEnabled: true})
		b.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// BenchmarkUncontended: one goroutine locks and unlocks a free key, b.N
// times, through each library, over the same go-redis clients.
func BenchmarkUncontended(b *testing.B) {
	cs := clients(b)
	b.Run("locker", func(b *testing.B) {
		var ucs []goredis.UniversalClient
		for _, c := range cs {
			ucs = append(ucs, c)
		}
		l, err := redlock.New(ucs, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchkit.AcquireRelease(b, l, "bench-peer-locker", locker.WithAutoRefresh(false), locker.WithTTL(8*time.Second))
	})
	b.Run("redsync", func(b *testing.B) {
		var pools []redsyncredis.Pool
		for _, c := range cs {
			pools = append(pools, redsyncgoredis.NewPool(c))
		}
		rs := redsync.New(pools...)
		m := rs.NewMutex("bench-peer-redsync", redsync.WithExpiry(8*time.Second), redsync.WithTries(1))
		benchkit.Loop(b, func(ctx context.Context, _ int) error {
			if err := m.LockContext(ctx); err != nil {
				return fmt.Errorf("redsync lock: %w", err)
			}
			if ok, err := m.UnlockContext(ctx); err != nil || !ok {
				return fmt.Errorf("redsync unlock: %v, %w", ok, err)
			}
			return nil
		})
	})
}
