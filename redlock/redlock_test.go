package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
	_ "github.com/distlock/locker/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedlockURL)))
}

// nodes starts n private redis-servers and returns them with a redlock URL
// naming them all.
func nodes(t *testing.T, n int) ([]*testenv.Redis, string) {
	t.Helper()
	var srv []*testenv.Redis
	var hosts []string
	for range n {
		s := testenv.StartRedis(t)
		srv = append(srv, s)
		hosts = append(hosts, s.Addr())
	}
	return srv, "redlock://" + strings.Join(hosts, ",")
}

func mustOpen(t *testing.T, url string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestMinorityDown stops two of five nodes: locks are still acquired,
// exclusive and released; a restarted node (empty) rejoins.
func TestMinorityDown(t *testing.T) {
	srv, url := nodes(t, 5)
	a, b := mustOpen(t, url), mustOpen(t, url)
	ctx := context.Background()
	srv[0].Stop()
	srv[3].Stop()
	for i := range 3 {
		lk, err := a.Acquire(ctx, "k", locker.WithTTL(5*time.Second))
		if err != nil {
			t.Fatalf("round %d: Acquire with 3 of 5 nodes up: %v", i, err)
		}
		if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("round %d: second client's TryAcquire on a held key: %v, want ErrNotAcquired", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("round %d: Release with 3 of 5 nodes up: %v", i, err)
		}
		lk, err = b.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: TryAcquire after release: %v", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv[0].Start()
	srv[3].Start()
	lk, err := a.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the nodes came back: %v", err)
	}
	defer lk.Release(ctx)
}

// TestMajorityDown stops three of five nodes: Acquire must fail by itself,
// with an error naming the missing majority, long before its context
// would end; restarting the nodes restores service.
func TestMajorityDown(t *testing.T) {
	srv, url := nodes(t, 5)
	l := mustOpen(t, url)
	for _, s := range srv[:3] {
		s.Stop()
	}
	for _, op := range []string{"Acquire", "TryAcquire"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		var err error
		if op == "Acquire" {
			_, err = l.Acquire(ctx, "k")
		} else {
			_, err = l.TryAcquire(ctx, "k")
		}
		took := time.Since(start)
		cancel()
		if err == nil {
			t.Fatalf("%s succeeded with 2 of 5 nodes up", op)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("%s: %v; want an error saying the majority is unreachable", op, err)
		}
		if !strings.Contains(err.Error(), "only 2 of 5 nodes answered, 3 needed") {
			t.Fatalf("%s: %v; want it to say only 2 of 5 nodes answered", op, err)
		}
		t.Logf("%s with 3 of 5 nodes down failed after %v: %v", op, took, err)
	}
	for _, s := range srv[:3] {
		s.Start()
	}
	lk, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatalf("TryAcquire after restarting the nodes: %v", err)
	}
	lk.Release(context.Background())
}

// TestMajorityUnresponsive puts three of five nodes behind proxies that
// delay every reply by a minute, as a hung or partitioned server would:
// Acquire must fail within a few per-node timeouts, not wait for them.
func TestMajorityUnresponsive(t *testing.T) {
	srv, _ := nodes(t, 5)
	var hosts []string
	for i, s := range srv {
		if i >= 3 {
			hosts = append(hosts, s.Addr())
			continue
		}
		p := testenv.Proxy(t, s.Addr())
		p.SetLatency(time.Minute)
		hosts = append(hosts, p.Addr())
	}
	const nodeTimeout = 50 * time.Millisecond
	// The open-time checks of the slow nodes time out, which is logged.
	l := mustOpen(t, "redlock://"+strings.Join(hosts, ",")+"?node_timeout="+nodeTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(ctx, "k")
	took := time.Since(start)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with 3 of 5 nodes hung: %v after %v; want a quorum error", err, took)
	}
	if !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Fatalf("Acquire: %v; want it to name the per-node timeout", err)
	}
	t.Logf("Acquire with 3 of 5 nodes hung failed after %v: %v", took, err)
}

func TestOpenErrors(t *testing.T) {
	testenv.WantOpenErrors(t, [][2]string{
		{"redlock://", "URL has no host"},
		{"redlock://127.0.0.1", "has no port"},
		{"redlock://127.0.0.1:1,127.0.0.1:1", "listed twice"},
		{"redlock://127.0.0.1:1?node_timeout=-1s", "NodeTimeout must be positive"},
		{"redlock://127.0.0.1:1?drift_factor=2", "DriftFactor must be in [0, 1)"},
		{"redlock://127.0.0.1:1?drift_factor=x", "drift_factor \"x\" is not a number"},
		{"redlock://127.0.0.1:1?client=memcached", "unknown client"},
		{"redlock://127.0.0.1:1?bogus=1", "bogus"},
		{"redlock://127.0.0.1:1/x", "not a database number"},
	})
}

// TestEviction: a node whose maxmemory-policy can evict lock keys is
// refused unless allowed.
func TestEviction(t *testing.T) {
	srv, url := nodes(t, 2)
	_ = srv
	bad := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	url += "," + bad.Addr()
	if l, err := locker.Open(context.Background(), url); err == nil {
		l.Close()
		t.Fatal("Open succeeded with a node whose maxmemory-policy is allkeys-lru")
	} else if !strings.Contains(err.Error(), bad.Addr()) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("Open: %v; want it to name the node and its policy", err)
	}
	mustOpen(t, url+"?allow_eviction=true")
}

// TestRedigo runs the suite through redigo pools.
func TestRedigo(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedlockURL)+"?client=redigo"))
}
