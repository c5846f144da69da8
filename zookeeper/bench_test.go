package zookeeper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/locker/internal/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
)

// BenchmarkUncontended compares one holder acquiring and releasing a free
// key through a Locker with the raw recipe on the same server: create an
// ephemeral sequential node, list the children to see that it is the
// lowest, delete it, each after the previous reply. The Locker sends the
// same three requests, but the listing right behind the create, so it
// waits for two round trips; its create carries a guid in the node's
// name, it reads the czxid (the fence) off the create's reply, and the
// key's node is a container. The designs take turns
// (benchkit.Interleave): read "locker/raw" and "autorefresh/raw".
func BenchmarkUncontended(b *testing.B) {
	raw := testenv.Get(b, testenv.ZooKeeperURL)
	c := dial(b, testenv.Hosts(b, raw), 30*time.Second)
	parent := "/" + uniq("bench-raw")
	if _, err := c.Create(parent, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	defer c.Delete(parent, -1)
	l, err := benchkit.Warm(locker.Open(context.Background(), raw+"/"+uniq("bench")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: func(context.Context) error {
			p, err := c.Create(parent+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			if err != nil {
				return err
			}
			children, _, err := c.Children(parent)
			if err != nil {
				return err
			}
			if len(children) != 1 || parent+"/"+children[0] != p {
				return fmt.Errorf("raw: queue %v, want only %s", children, p)
			}
			return c.Delete(p, -1)
		}},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(l, "k", locker.WithAutoRefresh(false))},
		benchkit.Design{Name: "autorefresh", Op: benchkit.AcquireReleaseOp(l, "k-autorefresh")},
	)
}

// BenchmarkHandoff measures release-to-next-acquire latency and fairness
// with 2 and 8 waiters on one key, each with its own Locker and session.
// A release wakes only the waiter queued next, which then lists the queue
// once: two round trips after the delete.
func BenchmarkHandoff(b *testing.B) {
	raw := testenv.Get(b, testenv.ZooKeeperURL)
	for _, waiters := range []int{2, 8} {
		b.Run(benchkit.WaitersName(waiters), func(b *testing.B) {
			base := raw + "/" + uniq("bench-handoff")
			benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
				return benchkit.Warm(locker.Open(context.Background(), base))
			}, "k", locker.WithAutoRefresh(false))
		})
	}
}
