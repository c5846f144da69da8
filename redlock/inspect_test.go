package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redlock"
)

// inspectBackend is the redlock backend as inspecttest runs it. A holder
// learns of a forced release at its next refresh, a third of the TTL on.
func inspectBackend(open func(t testing.TB) locker.Locker) inspecttest.Backend {
	return inspecttest.Backend{
		Open:       open,
		TTL:        1500 * time.Millisecond,
		Token:      true,
		TTLKnown:   true,
		LostWithin: 15 * time.Second,
	}
}

// newLocker returns a Locker made by New over clients of addrs, as Open
// builds them (no retries), with the given node timeout: one that a
// loaded machine meets. The test's end closes them.
func newLocker(t testing.TB, addrs []string, nodeTimeout time.Duration) locker.Locker {
	t.Helper()
	var cs []goredis.UniversalClient
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	l, err := redlock.New(cs, &redlock.Options{NodeTimeout: nodeTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestInspect(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
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
		inspecttest.Run(t, inspectBackend(func(t testing.TB) locker.Locker { return newLocker(t, testenv.Hosts(t, raw), 10*time.Second) }))
	})
}

// TestInspectNodes: Detail reports every node, and a copy on a minority
// of nodes is not a holder, but ForceRelease deletes it.
func TestInspectNodes(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	hosts := testenv.Hosts(t, raw)
	l := mustOpen(t, raw)
	key := inspecttest.Key(t)
	lk := inspecttest.Acquire(t, l, key, time.Minute)
	h := inspecttest.Inspect(t, l, key)
	for _, host := range hosts {
		if want := "token " + lk.Token() + ", ttl "; !strings.HasPrefix(h.Detail[host], want) {
			t.Errorf("Detail[%q] = %q, want %q...", host, h.Detail[host], want)
		}
	}
	if want := "5 of 5 nodes hold token " + lk.Token(); h.Detail["majority"] != want {
		t.Errorf(`Detail["majority"] = %q, want %q`, h.Detail["majority"], want)
	}
	serverKey := h.Detail["redis key"]
	if !strings.HasPrefix(serverKey, "redlock:{k:") {
		t.Fatalf(`Detail["redis key"] = %q, want the lock key on the nodes`, serverKey)
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A copy left on one node (a holder whose release did not reach it).
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: hosts[1]})
	defer c.Close()
	if err := c.Set(ctx, serverKey, "stale", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	defer c.Del(ctx, serverKey)
	h = inspecttest.Inspect(t, l, key)
	if h.Held || h.Token != "" || h.TTLKnown {
		t.Errorf("Inspect with a copy on one node of five = %+v, want not held", h)
	}
	if !strings.HasPrefix(h.Detail[hosts[1]], "token stale, ttl ") || h.Detail[hosts[0]] != "free" ||
		!strings.Contains(h.Detail["majority"], "1 of 5 nodes hold token stale (no token on a majority of 3") {
		t.Errorf("Detail = %q, want node %s holding token stale, the others free, and no majority", h.Detail, hosts[1])
	}
	if !inspecttest.ForceRelease(t, l, key) {
		t.Error("ForceRelease of a copy on one node reported nothing released")
	}
	if n, err := c.Exists(ctx, serverKey).Result(); err != nil || n != 0 {
		t.Errorf("the copy on %s after ForceRelease: exists %d, %v; want it deleted", hosts[1], n, err)
	}
}

// TestForceReleaseNodeDown: with a node unreachable, Inspect reports its
// error and still finds the holder on the majority; ForceRelease releases
// the others, names the node in its error, and the key can be taken.
func TestForceReleaseNodeDown(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	var proxies []*conformance.Proxy
	var addrs []string
	for _, h := range testenv.Hosts(t, raw) {
		p := testenv.Proxy(t, h)
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	down := proxies[2] // the node taken down
	holder, op := newLocker(t, addrs, 10*time.Second), newLocker(t, addrs, 10*time.Second)
	defer holder.Close()
	defer op.Close()
	key := inspecttest.Key(t)
	lk := inspecttest.Acquire(t, holder, key, 1500*time.Millisecond)
	down.Cut()

	h := inspecttest.Inspect(t, op, key)
	if !h.Held || h.Token != lk.Token() || !strings.HasPrefix(h.Detail[down.Addr()], "error: ") {
		t.Errorf("Inspect with node %s down = %+v, want held by %q and the node's error", down.Addr(), h, lk.Token())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	released, err := locker.ForceRelease(ctx, op, key)
	if !released || err == nil || !strings.Contains(err.Error(), down.Addr()) || !strings.Contains(err.Error(), "reached 4 of 5 nodes") {
		t.Fatalf("ForceRelease with node %s down = %v, %v; want released, and an error naming the node", down.Addr(), released, err)
	}
	// The copy on the node that is down blocks no one.
	other := mustOpen(t, raw)
	lk2, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the forced release: %v", err)
	}
	defer lk2.Release(ctx)
	testenv.WaitFor(t, 15*time.Second, "the force-released holder's Lost to close", func() bool {
		return testenv.Closed(lk.Lost())
	})
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("the force-released holder's Err() = %v, want ErrNotHeld", err)
	}
}
