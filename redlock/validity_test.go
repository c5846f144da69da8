package redlock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// stepClock is an injected clock: each reading is the previous one plus
// the next step (the first reading is the base time).
type stepClock struct {
	mu    sync.Mutex
	t     time.Time
	steps []time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	if len(c.steps) > 0 {
		c.t = c.t.Add(c.steps[0])
		c.steps = c.steps[1:]
	}
	return t
}

// testDriver is a driver over five private redis-servers, with clients
// the test can read the nodes through.
func testDriver(t *testing.T, cfg settings) (*driver, []*goredis.Client) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ns []*node
	var cs []*goredis.Client
	for range 5 {
		s := testenv.StartRedis(t)
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		conn := redisconn.NewGoRedis(c, false)
		ns = append(ns, &node{addr: s.Addr(), c: conn, notify: redisconn.NewNotifier(conn, log)})
		cs = append(cs, c)
	}
	d := newDriver(ns, cfg, log)
	t.Cleanup(func() { d.Close() })
	return d, cs
}

var defaults = settings{nodeTimeout: time.Second, driftFactor: 0.01, minDrift: 2 * time.Millisecond, retryDelay: 20 * time.Millisecond}

func TestDrift(t *testing.T) {
	d := &driver{cfg: defaults}
	for _, tc := range []struct{ ttl, want time.Duration }{
		{10 * time.Second, 102 * time.Millisecond},
		{time.Second, 12 * time.Millisecond},
		{100 * time.Millisecond, 3 * time.Millisecond},
	} {
		if got := d.Drift(tc.ttl); got != tc.want {
			t.Errorf("Drift(%v) = %v, want %v", tc.ttl, got, tc.want)
		}
	}
	d.cfg.driftFactor, d.cfg.minDrift = 0.05, 10*time.Millisecond
	if got := d.Drift(10 * time.Second); got != 510*time.Millisecond {
		t.Errorf("Drift(10s) with factor 0.05 and 10ms = %v, want 510ms", got)
	}
}

// TestValidity checks validity = TTL - elapsed - drift on acquisition,
// with the elapsed time set by an injected clock.
func TestValidity(t *testing.T) {
	d, _ := testDriver(t, defaults)
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ttl = 10 * time.Second
	d.now = (&stepClock{t: base, steps: []time.Duration{3 * time.Second}}).now
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "v", Token: "t1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// 10s - 3s elapsed - (100ms + 2ms) drift
	if want := 7*time.Second - 102*time.Millisecond; acq.Validity != want {
		t.Errorf("Validity = %v, want %v", acq.Validity, want)
	}
	if !acq.Start.Equal(base) {
		t.Errorf("Start = %v, want the clock reading before the round, %v", acq.Start, base)
	}
	if err := acq.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNoValidityLeft: a majority accepted, but the round took longer than
// TTL - drift. The lock must not be granted, and must be released on every
// node so that it blocks nobody.
func TestNoValidityLeft(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	const ttl = 10 * time.Second
	// Exactly TTL - drift: validity 0, which is not enough.
	d.now = (&stepClock{t: time.Now(), steps: []time.Duration{ttl - d.Drift(ttl)}}).now
	_, err := d.TryAcquire(ctx, backend.Request{Key: "nv", Token: "t1", TTL: ttl})
	var busy *backend.Busy
	if !errors.As(err, &busy) || !strings.Contains(err.Error(), "leaving no validity") {
		t.Fatalf("TryAcquire = %v, want not acquired for lack of validity", err)
	}
	for i, c := range cs {
		if n, err := c.Exists(ctx, lockKey("nv")).Result(); err != nil || n != 0 {
			t.Errorf("node %d still has the key after the failed round (exists=%d, err=%v)", i, n, err)
		}
	}
	// One nanosecond more of validity is enough.
	d.now = (&stepClock{t: time.Now(), steps: []time.Duration{ttl - d.Drift(ttl) - 1}}).now
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "nv", Token: "t2", TTL: ttl})
	if err != nil {
		t.Fatalf("TryAcquire with 1ns of validity: %v", err)
	}
	if acq.Validity != 1 {
		t.Errorf("Validity = %v, want 1ns", acq.Validity)
	}
	acq.Held.Release(ctx)
}

// TestRefreshValidity: a refresh counts only if a majority extended the
// lock within its validity.
func TestRefreshValidity(t *testing.T) {
	d, _ := testDriver(t, defaults)
	ctx := context.Background()
	const ttl = 10 * time.Second
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "r", Token: "t1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer acq.Held.Release(ctx)
	d.now = (&stepClock{t: time.Now(), steps: []time.Duration{time.Second}}).now
	if err := acq.Held.Refresh(ctx, ttl); err != nil {
		t.Fatalf("Refresh taking 1s of a 10s TTL: %v", err)
	}
	d.now = (&stepClock{t: time.Now(), steps: []time.Duration{ttl}}).now
	err = acq.Held.Refresh(ctx, ttl)
	if err == nil || !strings.Contains(err.Error(), "too late") {
		t.Fatalf("Refresh taking the whole TTL = %v, want a too-late error", err)
	}
	if errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("a late refresh is not proof the lock is gone: %v", err)
	}
}

// TestSplitVote: when two nodes hold another token and one node does not
// answer, our round wins two of five: not acquired, reported as a split
// vote, and our key removed from every node that took it.
func TestSplitVote(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	for _, c := range cs[:2] {
		if err := c.Set(ctx, lockKey("s"), "other", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	cs[4].Shutdown(ctx) // down; the shutdown reply itself is an error
	_, err, split := d.round(ctx, backend.Request{Key: "s", Token: "mine", TTL: 10 * time.Second})
	if !errors.Is(err, backend.ErrNotAcquired) || !split || !strings.Contains(err.Error(), "split vote: 2 of 5 nodes accepted, 2 refused") {
		t.Fatalf("round = %v (split %v), want a split vote", err, split)
	}
	for i, c := range cs[:4] {
		v, err := c.Get(ctx, lockKey("s")).Result()
		if i < 2 && v != "other" {
			t.Errorf("node %d: the other holder's key is %q (%v), want it untouched", i, v, err)
		}
		if i >= 2 && !errors.Is(err, goredis.Nil) {
			t.Errorf("node %d: our key is still there (%q, %v) after the failed round", i, v, err)
		}
	}
}

// TestHolderTTLAfterExpiry: the nodes that refused a waiter are asked for
// the holder's remaining TTL. When the holder's key has expired between the
// refusal and that question, the waiter must try again at once, not be told
// "unknown" (0), which makes a waiter with release notices sleep for
// seconds: an expiry sends no notice.
func TestHolderTTLAfterExpiry(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	const key = "expired-holder"
	// Nodes 0-2 refused (n == 0), 3-4 accepted (n == 1).
	out := []outcome{{n: 0}, {n: 0}, {n: 0}, {n: 1}, {n: 1}}
	for i := range 3 {
		if err := cs[i].Set(ctx, lockKey(key), "holder", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := d.holderTTL(ctx, key, out); got < 50*time.Second || got > time.Minute {
		t.Fatalf("holderTTL with the holder's key on the refusing nodes = %v, want about a minute", got)
	}
	// The holder's key on one refusing node expires (or is released)
	// before the question: that node now tells nothing but that the key
	// may be free.
	if err := cs[1].Del(ctx, lockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	if got := d.holderTTL(ctx, key, out); got != time.Millisecond {
		t.Errorf("holderTTL with the key gone from a refusing node = %v, want 1ms (try again now)", got)
	}
	for i := range 3 {
		cs[i].Del(ctx, lockKey(key))
	}
	if got := d.holderTTL(ctx, key, out); got != time.Millisecond {
		t.Errorf("holderTTL with the key gone from every refusing node = %v, want 1ms", got)
	}
}
