package etcd_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
)

// inspectBackend is the etcd backend as inspecttest runs it. The TTL is
// long enough that a lease kept alive a sixth of it apart never reports
// under a whole second left (etcd counts whole seconds).
func inspectBackend(open func(t testing.TB) locker.Locker) inspecttest.Backend {
	return inspecttest.Backend{
		Open:       open,
		TTL:        3 * time.Second,
		TTLKnown:   true,
		Waiters:    true,
		LostWithin: 15 * time.Second, // at once, as the holder's watch delivers the deletion
	}
}

func TestInspect(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdURL)
	t.Run("URL", func(t *testing.T) {
		inspecttest.Run(t, inspectBackend(func(t testing.TB) locker.Locker {
			l, err := locker.Open(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}))
	})
	t.Run("New", func(t *testing.T) {
		inspecttest.Run(t, inspectBackend(func(t testing.TB) locker.Locker {
			l, err := etcd.New(rawClient(t, testenv.Hosts(t, raw)...), &etcd.Options{Namespace: "inspect-new"})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}))
	})
}

// TestInspectDetail: Detail names the queue, the holder's entry and its
// lease, as the server has them.
func TestInspectDetail(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdURL)
	l := open(t, raw)
	c := rawClient(t, testenv.Hosts(t, raw)...)
	key := uniqueKey("inspect/detail")
	lk := inspecttest.Acquire(t, l, key, 5*time.Second)
	h := inspecttest.Inspect(t, l, key)

	qp := etcd.DefaultNamespace + "/" + strings.ReplaceAll(key, "/", "%2F") + "/"
	entries := queue(t, c, qp)
	if h.Detail["queue"] != qp || len(entries) != 1 || h.Detail["entry"] != entries[0] {
		t.Fatalf("Detail = %q, want the queue %s and its one entry %q", h.Detail, qp, entries)
	}
	resp, err := c.Get(context.Background(), entries[0])
	if err != nil {
		t.Fatal(err)
	}
	kv := resp.Kvs[0]
	if fence, _ := lk.Fence(); h.Fence != fence || uint64(kv.CreateRevision) != fence {
		t.Errorf("Holder.Fence = %d, entry create revision %d; want both the holder's fence %d", h.Fence, kv.CreateRevision, fence)
	}
	if want := strconv.FormatInt(kv.Lease, 16); h.Detail["lease"] != want || h.Detail["lease granted"] != "5s" {
		t.Errorf("Detail = %q, want lease %s granted 5s", h.Detail, want)
	}
	ttl, err := c.TimeToLive(context.Background(), clientv3.LeaseID(kv.Lease))
	if err != nil {
		t.Fatal(err)
	}
	if h.TTL <= 0 || h.TTL > time.Duration(ttl.GrantedTTL)*time.Second {
		t.Errorf("Holder.TTL = %v, want within the lease's %ds", h.TTL, ttl.GrantedTTL)
	}
}

// TestForceReleaseOnlyTheHolder: ForceRelease deletes the holder's entry
// alone; the waiters keep theirs, and the first of them gets the key.
func TestForceReleaseOnlyTheHolder(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdURL)
	op := open(t, raw)
	c := rawClient(t, testenv.Hosts(t, raw)...)
	key := uniqueKey("inspect/only")
	qp := etcd.DefaultNamespace + "/" + strings.ReplaceAll(key, "/", "%2F") + "/"
	const ttl = 3 * time.Second
	inspecttest.Acquire(t, open(t, raw), key, ttl)
	first := inspecttest.StartWaiter(t, open(t, raw), key, ttl)
	testenv.WaitFor(t, 10*time.Second, "the first waiter to queue", func() bool {
		return inspecttest.Inspect(t, op, key).Waiters == 1
	})
	inspecttest.StartWaiter(t, open(t, raw), key, ttl)
	testenv.WaitFor(t, 10*time.Second, "the second waiter to queue", func() bool {
		return inspecttest.Inspect(t, op, key).Waiters == 2
	})
	before := queue(t, c, qp)
	if !inspecttest.ForceRelease(t, op, key) {
		t.Fatal("ForceRelease of a held key reported nothing released")
	}
	lk := first.Wait(t, 30*time.Second)
	after := queue(t, c, qp)
	if len(before) != 3 || len(after) != 2 || after[0] != before[1] || after[1] != before[2] {
		t.Errorf("queue entries before ForceRelease %q, after %q: want only the first gone", before, after)
	}
	h := inspecttest.Inspect(t, op, key)
	if fence, _ := lk.Fence(); !h.Held || h.Fence != fence || h.Waiters != 1 || h.Detail["entry"] != after[0] {
		t.Errorf("Inspect after ForceRelease = %+v, want the first waiter holding (fence %d), one waiting", h, fence)
	}
}
