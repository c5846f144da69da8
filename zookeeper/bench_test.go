package zookeeper_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/internal/zkclient"
	"github.com/distlock/locker/zookeeper"
)

// BenchmarkUncontended compares one holder acquiring and releasing a free
// key through a Locker with the raw recipe on the same server: create an
// ephemeral sequential node, list the children to see that it is the
// lowest, delete it, each after the previous reply; once over
// go-zookeeper's connection ("raw") and once over this project's
// (internal/zkclient, "rawown"), which tells the client's share from the
// recipe's. The Locker sends the same three requests, but the listing
// right behind the create, so it waits for two round trips; its create
// carries a guid in the node's name, it reads the czxid (the fence) off
// the create's reply, and the key's node is a container. The designs take
// turns (benchkit.Interleave): read "locker/raw", "locker/rawown" and
// "autorefresh/raw".
func BenchmarkUncontended(b *testing.B) {
	raw := testenv.Get(b, testenv.ZooKeeperURL)
	hosts := testenv.Hosts(b, raw)
	c := dial(b, hosts, 30*time.Second)
	own, err := zkclient.Connect(context.Background(), zkclient.Config{Servers: hosts, SessionTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer own.Close()
	parent := "/" + uniq("bench-raw")
	if _, err := c.Create(parent, nil, 0, gozk.WorldACL(gozk.PermAll)); err != nil {
		b.Fatal(err)
	}
	defer c.Delete(parent, -1)
	l, err := benchkit.Warm(locker.Open(context.Background(), raw+"/"+uniq("bench")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: func(context.Context) error { return rawRecipe(c, parent) }},
		benchkit.Design{Name: "rawown", Op: func(context.Context) error { return rawRecipe(own, parent) }},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(l, "k", locker.WithAutoRefresh(false))},
		benchkit.Design{Name: "autorefresh", Op: benchkit.AcquireReleaseOp(l, "k-autorefresh")},
	)
}

// rawConn is what rawRecipe needs of a client.
type rawConn interface {
	Create(path string, data []byte, flags int32, acl []gozk.ACL) (string, error)
	Children(path string) ([]string, *gozk.Stat, error)
	Delete(path string, version int32) error
}

// rawRecipe takes and releases the lock of parent the bare way: create,
// list, delete, each after the previous reply.
func rawRecipe(c rawConn, parent string) error {
	p, err := c.Create(parent+"/lock-", nil, gozk.FlagEphemeralSequential, gozk.WorldACL(gozk.PermAll))
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

// BenchmarkValue measures what values cost: Lock.SetValue against a bare
// setData of a node ("rawset"), and Inspect of a key whose holder has a
// 100-byte value against a bare listing and read of the holder's node,
// without a sync ("rawinspect") and with the sync sent ahead of the
// listing in the same write ("rawsyncinspect"), as Inspect does; all over
// internal/zkclient's connection. The designs take turns
// (benchkit.Interleave).
func BenchmarkValue(b *testing.B) {
	raw := testenv.Get(b, testenv.ZooKeeperURL)
	hosts := testenv.Hosts(b, raw)
	own, err := zkclient.Connect(context.Background(), zkclient.Config{Servers: hosts, SessionTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer own.Close()
	l, err := benchkit.Warm(locker.Open(context.Background(), raw+"/"+uniq("bench-value")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	value := bytes.Repeat([]byte("v"), 100)
	lk, err := l.Acquire(context.Background(), "k", locker.WithValue(value), locker.WithAutoRefresh(false), locker.WithTTL(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	defer lk.Release(context.Background())
	h, err := locker.Inspect(context.Background(), l, "k")
	if err != nil {
		b.Fatal(err)
	}
	node, parent := h.Detail["node"], h.Detail["key node"]
	rawInspect := func(sync bool) func(context.Context) error {
		return func(context.Context) error {
			var children []string
			var err error
			if sync {
				children, _, err = own.SyncChildrenStop(zkclient.Stop{}, parent)
			} else {
				children, _, err = own.Children(parent)
			}
			if err != nil {
				return err
			}
			if len(children) != 1 {
				return fmt.Errorf("queue %v, want the holder alone", children)
			}
			_, err = own.GetAll(zkclient.Stop{}, parent+"/"+children[0])
			return err
		}
	}
	benchkit.Interleave(b,
		benchkit.Design{Name: "setvalue", Op: func(ctx context.Context) error { return lk.SetValue(ctx, value) }},
		benchkit.Design{Name: "rawset", Op: func(context.Context) error {
			_, err := own.Set(node, append([]byte(zookeeper.NodeData+"\n"), value...), -1)
			return err
		}},
		benchkit.Design{Name: "inspect", Op: func(ctx context.Context) error {
			_, err := locker.Inspect(ctx, l, "k")
			return err
		}},
		benchkit.Design{Name: "rawinspect", Op: rawInspect(false)},
		benchkit.Design{Name: "rawsyncinspect", Op: rawInspect(true)},
	)
}
