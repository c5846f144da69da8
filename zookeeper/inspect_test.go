package zookeeper_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// inspectBackend is the zookeeper backend as inspecttest runs it. A holder
// learns of a forced release at its next refresh, a third of the TTL on.
func inspectBackend(open func(t testing.TB) locker.Locker, ttl time.Duration) inspecttest.Backend {
	return inspecttest.Backend{
		Open:       open,
		TTL:        ttl,
		Waiters:    true,
		LostWithin: 15 * time.Second,
	}
}

func TestInspect(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	t.Run("URL", func(t *testing.T) {
		base := "/" + uniq("inspect")
		inspecttest.Run(t, inspectBackend(func(t testing.TB) locker.Locker {
			l, err := locker.Open(context.Background(), raw+base)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, 1500*time.Millisecond))
	})
	t.Run("New", func(t *testing.T) {
		hosts := testenv.Hosts(t, raw)
		timeout := readRange(t, hosts[0]).clamp(1500 * time.Millisecond)
		base := "/" + uniq("inspect-new")
		inspecttest.Run(t, inspectBackend(func(t testing.TB) locker.Locker {
			l, err := zookeeper.New(dial(t, hosts, timeout), &zookeeper.Options{SessionTimeout: timeout, Path: base})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, timeout))
	})
}

// TestInspectDetail: Detail names the holder's node, whose czxid is the
// fence, and its session, with the session's timeout when the session is
// the inspecting Locker's own.
func TestInspectDetail(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("inspect-detail")
	l, other := open(t, raw+base), open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "orders/42"
	lk := inspecttest.Acquire(t, l, key, 3*time.Second)

	h := inspecttest.Inspect(t, l, key)
	keyNode := base + "/" + zookeeper.EncodeKey(key)
	nodes := lockNodes(t, c, base, key)
	if len(nodes) != 1 || h.Detail["key node"] != keyNode || h.Detail["node"] != keyNode+"/"+nodes[0] {
		t.Fatalf("Detail = %q, want the key node %s and the holder's node among %q", h.Detail, keyNode, nodes)
	}
	_, st, err := c.Get(h.Detail["node"])
	if err != nil {
		t.Fatal(err)
	}
	if fence, _ := lk.Fence(); h.Fence != fence || uint64(st.Czxid) != fence {
		t.Errorf("Holder.Fence = %d, node czxid %d; want both the holder's fence %d", h.Fence, st.Czxid, fence)
	}
	if want := "0x" + strconv.FormatInt(st.EphemeralOwner, 16); h.Detail["session"] != want {
		t.Errorf(`Detail["session"] = %q, want the node's owner %s`, h.Detail["session"], want)
	}
	if h.Detail["session timeout"] != "3s" {
		t.Errorf(`Detail["session timeout"] = %q through the holder's Locker, want its TTL 3s`, h.Detail["session timeout"])
	}
	created, err := time.Parse(time.RFC3339Nano, h.Detail["created"])
	if err != nil || !created.Equal(time.UnixMilli(st.Ctime)) {
		t.Errorf(`Detail["created"] = %q (%v), want the node's ctime %v`, h.Detail["created"], err, time.UnixMilli(st.Ctime))
	}
	// Another Locker, as another process, learns the timeout from the
	// server the holder's session is connected to (cons).
	if h := inspecttest.Inspect(t, other, key); h.Detail["session timeout"] != "3s" || h.Detail["session"] == "" {
		t.Errorf("Detail through another Locker = %q, want the session and its timeout 3s, as the server tells", h.Detail)
	}
}

// TestInspectSessionTimeoutFromEnsemble: the holder's session is on one
// member of the ensemble; a Locker that names every member finds its
// timeout there (cons lists only a server's own connections), and one that
// names another member alone says plainly why it cannot.
func TestInspectSessionTimeoutFromEnsemble(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	hosts := testenv.Hosts(t, raw)
	base := "/" + uniq("inspect-ensemble")
	holder := open(t, "zk://"+hosts[2]+base)
	key := "k"
	inspecttest.Acquire(t, holder, key, 3*time.Second)

	all := open(t, raw+base)
	if h := inspecttest.Inspect(t, all, key); h.Detail["session timeout"] != "3s" {
		t.Errorf(`Detail["session timeout"] through every member = %q, want 3s`, h.Detail["session timeout"])
	}
	one := open(t, "zk://"+hosts[0]+base)
	h := inspecttest.Inspect(t, one, key)
	if got := h.Detail["session timeout"]; !strings.HasPrefix(got, "unknown: ") || !strings.Contains(got, hosts[0]) || !strings.Contains(got, h.Detail["session"]) {
		t.Errorf(`Detail["session timeout"] through another member alone = %q, want "unknown: " and why`, got)
	}
}

// TestInspectSessionTimeoutNoCons: a server that does not allow cons
// cannot tell another process the session's timeout, and Inspect says so.
func TestInspectSessionTimeoutNoCons(t *testing.T) {
	addr := startZKConf(t, "4lw.commands.whitelist=ruok,srvr\nminSessionTimeout=1000\nmaxSessionTimeout=60000\n")
	holder, other := open(t, "zk://"+addr), open(t, "zk://"+addr)
	inspecttest.Acquire(t, holder, "k", 3*time.Second)
	h := inspecttest.Inspect(t, other, "k")
	if got := h.Detail["session timeout"]; !strings.HasPrefix(got, "unknown: ") || !strings.Contains(got, "cons") {
		t.Errorf(`Detail["session timeout"] = %q, want "unknown: " and that cons is not allowed`, got)
	}
}

// TestForceReleaseOnlyTheHolder: ForceRelease deletes the holder's node
// alone; the waiters keep their places, and the first of them gets the
// key.
func TestForceReleaseOnlyTheHolder(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("inspect-only")
	op := open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	key := "k"
	const ttl = 3 * time.Second
	inspecttest.Acquire(t, open(t, raw+base), key, ttl)
	first := inspecttest.StartWaiter(t, open(t, raw+base), key, ttl)
	testenv.WaitFor(t, 10*time.Second, "the first waiter to queue", func() bool {
		return inspecttest.Inspect(t, op, key).Waiters == 1
	})
	inspecttest.StartWaiter(t, open(t, raw+base), key, ttl)
	testenv.WaitFor(t, 10*time.Second, "the second waiter to queue", func() bool {
		return inspecttest.Inspect(t, op, key).Waiters == 2
	})
	before := lockNodes(t, c, base, key)
	if !inspecttest.ForceRelease(t, op, key) {
		t.Fatal("ForceRelease of a held key reported nothing released")
	}
	lk := first.Wait(t, 30*time.Second)
	after := lockNodes(t, c, base, key)
	if len(before) != 3 || len(after) != 2 || after[0] != before[1] || after[1] != before[2] {
		t.Errorf("lock nodes before ForceRelease %q, after %q: want only the first gone", before, after)
	}
	h := inspecttest.Inspect(t, op, key)
	if fence, _ := lk.Fence(); !h.Held || h.Fence != fence || h.Waiters != 1 || !strings.HasSuffix(h.Detail["node"], after[0]) {
		t.Errorf("Inspect after ForceRelease = %+v, want the first waiter holding (fence %d), one waiting", h, fence)
	}
}
