package etcd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

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
