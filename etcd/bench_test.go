package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/etcdbench"
	"github.com/distlock/locker/internal/testenv"
)

// BenchmarkUncontended compares one holder acquiring and releasing a free
// key through a Locker with the raw pair on the same client: a transaction
// that puts the key with a lease if it does not exist, then a bare delete.
// Both are two raft writes; the Locker's acquire compares over the lock's
// whole queue, and its release compares the entry's create revision. The
// designs take turns (benchkit.Interleave): read "locker/raw".
func BenchmarkUncontended(b *testing.B) {
	c := rawClient(b, testenv.Hosts(b, testenv.Get(b, testenv.EtcdURL))...)
	ctx := context.Background()
	g, err := c.Grant(ctx, int64(locker.DefaultTTL/time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Revoke(ctx, g.ID)
	ka, err := c.KeepAlive(ctx, g.ID) // kept alive like the Locker's shared lease
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range ka {
		}
	}()
	l, err := etcd.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	stamp := fmt.Sprint(time.Now().UnixNano())
	rawKey := "bench-raw/" + stamp
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: etcdbench.RawPair(c, rawKey, g.ID)},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(l, "bench-locker/"+stamp)},
		benchkit.Design{Name: "noautorefresh", Op: benchkit.AcquireReleaseOp(l, "bench-noautorefresh/"+stamp, locker.WithAutoRefresh(false))},
	)
}

// BenchmarkShared compares one reader taking and dropping a shared hold
// through a Locker (Acquire with locker.Shared, then Release) with etcd's
// experimental recipe.RWMutex (RLock, then RUnlock) on the same client;
// the raw pair and the Locker's exclusive hold are the reference. The key
// is free ("free"), or held by another reader throughout
// ("beside-reader"), which changes nothing for either reader: a shared
// hold joins the queue and reads it in one transaction, and the recipe's
// RLock puts its key and reads the last writer's. The designs take turns
// (benchkit.Interleave): read "shared/recipe".
func BenchmarkShared(b *testing.B) {
	c := rawClient(b, testenv.Hosts(b, testenv.Get(b, testenv.EtcdURL))...)
	ctx := context.Background()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(int(locker.DefaultTTL/time.Second))) // a kept-alive lease
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := etcd.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, beside := range []bool{false, true} {
		name := "free"
		if beside {
			name = "beside-reader"
		}
		b.Run(name, func(b *testing.B) {
			stamp := fmt.Sprint(time.Now().UnixNano())
			shared, recipeKey := "bench-shared/"+stamp, "bench-recipe/"+stamp
			if beside {
				r, err := l.Acquire(ctx, shared, locker.Shared())
				if err != nil {
					b.Fatal(err)
				}
				defer r.Release(ctx)
				m := recipe.NewRWMutex(s, recipeKey)
				if err := m.RLock(); err != nil {
					b.Fatal(err)
				}
				defer m.RUnlock()
			}
			benchkit.Interleave(b,
				benchkit.Design{Name: "raw", Op: etcdbench.RawPair(c, "bench-raw/"+stamp, s.Lease())},
				benchkit.Design{Name: "recipe", Op: etcdbench.RecipeRead(s, recipeKey)},
				benchkit.Design{Name: "exclusive", Op: benchkit.AcquireReleaseOp(l, "bench-exclusive/"+stamp)},
				benchkit.Design{Name: "shared", Op: benchkit.AcquireReleaseOp(l, shared, locker.Shared())},
			)
		})
	}
}

// BenchmarkHandoff measures release-to-next-acquire latency and fairness
// with 2 and 8 waiters on one key, each with its own client and Locker.
func BenchmarkHandoff(b *testing.B) {
	hosts := testenv.Hosts(b, testenv.Get(b, testenv.EtcdURL))
	for _, waiters := range []int{2, 8} {
		b.Run(benchkit.WaitersName(waiters), func(b *testing.B) {
			benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
				return etcd.New(rawClient(b, hosts...), nil)
			}, "bench-handoff/"+fmt.Sprint(time.Now().UnixNano()))
		})
	}
}
