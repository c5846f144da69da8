package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
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
	d, cs, _ := testDriverServers(t, cfg)
	return d, cs
}

// testDriverServers is testDriver, also returning the servers.
func testDriverServers(t *testing.T, cfg settings) (*driver, []*goredis.Client, []*testenv.Redis) {
	t.Helper()
	var srv []*testenv.Redis
	var addrs []string
	for range 5 {
		s := testenv.StartRedis(t)
		srv = append(srv, s)
		addrs = append(addrs, s.Addr())
	}
	d, cs := driverOn(t, addrs, cfg)
	return d, cs, srv
}

// driverOn is a driver over the nodes at addrs, with clients the test can
// read the nodes through.
func driverOn(t *testing.T, addrs []string, cfg settings) (*driver, []*goredis.Client) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ns []*node
	var cs []*goredis.Client
	for _, addr := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		ns = append(ns, newNode(addr, redisconn.NewGoRedis(c, false), log))
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
	_, split, err := d.round(ctx, backend.Request{Key: "s", Token: "mine", TTL: 10 * time.Second})
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

// TestHolderTTL: a round refused by a majority tells the waiter how long
// the holder has left, from the refusals themselves (the smallest a
// refusing node reports), so that a waiter whose holder died without
// releasing tries again when it expires; a holder's key without a TTL
// (not a lock of ours) tells nothing.
func TestHolderTTL(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	for i, ttl := range []time.Duration{time.Minute, 40 * time.Second, time.Minute} {
		if err := cs[i].Set(ctx, lockKey("held"), "holder", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := d.round(ctx, backend.Request{Key: "held", Token: "mine", TTL: 10 * time.Second})
	var busy *backend.Busy
	if !errors.As(err, &busy) || busy.Remaining < 30*time.Second || busy.Remaining > 40*time.Second {
		t.Fatalf("round refused by a holder with 40s to 1m left = %v (%+v), want Busy with about 40s", err, busy)
	}
	for i := range 3 {
		if err := cs[i].Set(ctx, lockKey("forever"), "holder", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = d.round(ctx, backend.Request{Key: "forever", Token: "mine", TTL: 10 * time.Second})
	if !errors.As(err, &busy) || busy.Remaining != 0 {
		t.Fatalf("round refused by keys without a TTL = %v (%+v), want Busy with Remaining 0 (unknown)", err, busy)
	}
}

// TestLateCopyCountsAsOurs drives the reordering that a node timeout
// allows: a round's SET waits on its connection past the node timeout,
// the round is undone over another connection, and then the SET lands,
// leaving a copy of our token that nobody will release. The next round
// of the same acquisition must count that copy as ours (and set its TTL
// afresh). Were it refused, two such copies with one node down would
// leave no majority to anyone until they expired, a whole TTL later.
func TestLateCopyCountsAsOurs(t *testing.T) {
	cfg := defaults
	cfg.nodeTimeout = 300 * time.Millisecond
	srv := make([]*testenv.Redis, 5)
	addrs := make([]string, 5)
	for i := range srv {
		srv[i] = testenv.StartRedis(t)
		addrs[i] = srv[i].Addr()
	}
	// Nodes 0 and 1 behind proxies that can hold the requests of their
	// first connection; node 4 down.
	gate := make(chan struct{})
	var gated atomic.Bool
	for i := range 2 {
		p, err := conformance.NewProxy(addrs[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.SetConnLatency(func(conn uint64, dir conformance.Direction) time.Duration {
			if conn == 1 && dir == conformance.Requests && gated.Load() {
				<-gate
			}
			return 0
		})
		addrs[i] = p.Addr()
	}
	srv[4].Stop()
	d, cs := driverOn(t, addrs, cfg)
	ctx := context.Background()
	// One connection open to each node, which the round's SETs will use,
	// and the script loaded.
	warm, _, err := d.round(ctx, backend.Request{Key: "warm-up", Token: "w", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	gated.Store(true)
	req := backend.Request{Key: "late", Token: "mine", TTL: 10 * time.Second}
	if _, _, err := d.round(ctx, req); err == nil {
		t.Fatal("a round with two nodes held up and one down succeeded")
	}
	// The round has been undone everywhere; now the held SETs land.
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for i := range 2 {
		for {
			v, err := cs[i].Get(ctx, lockKey("late")).Result()
			if v == "mine" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: the held SET never landed after the undo (%q, %v): the client reused the timed-out connection", i, v, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	acq, _, err := d.round(ctx, req)
	if err != nil {
		t.Fatalf("the next round of the same acquisition, with its own late copies on two nodes: %v", err)
	}
	for i := range 2 {
		if ttl := cs[i].PTTL(ctx, lockKey("late")).Val(); ttl <= 0 || ttl > req.TTL {
			t.Errorf("node %d: the late copy has %v left after the round, want the round's TTL of %v set afresh", i, ttl, req.TTL)
		}
	}
	if err := acq.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if n := cs[i].Exists(ctx, lockKey("late")).Val(); n != 0 {
			t.Errorf("node %d still has the key after Release", i)
		}
	}
}

// evalCalls is the EVALSHA and EVAL calls a server has had.
func evalCalls(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, line := range strings.Split(info, "\n") {
		for _, name := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), name); ok {
				n, _, _ := strings.Cut(rest, ",")
				v, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				sum += v
			}
		}
	}
	return sum
}

// TestRefreshBatch: the watchdog's batched refresh extends each lock that
// a majority still holds for us, reports ErrNotHeld for one a majority no
// longer holds, judges validity per round like Refresh, and sends each
// node a script call per 100 locks, not one per lock.
func TestRefreshBatch(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	const n = 1200 // two rounds of maxRoundLocks
	var locks []backend.Held
	var ttls []time.Duration
	for i := range n {
		acq, err := d.TryAcquire(ctx, backend.Request{Key: fmt.Sprint("b", i), Token: fmt.Sprint("t", i), TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, acq.Held)
		ttls = append(ttls, time.Minute)
	}
	// Lock 7 changed hands on a majority, lock 9 on a minority.
	for j, c := range cs {
		if j < 3 {
			c.Set(ctx, lockKey("b7"), "thief", time.Minute)
		}
		if j < 2 {
			c.Set(ctx, lockKey("b9"), "thief", time.Minute)
		}
	}
	// The first call loads the script on each node (NOSCRIPT, then EVAL).
	if err := d.RefreshBatch(ctx, locks[:1], ttls[:1])[0]; err != nil {
		t.Fatal(err)
	}
	before := make([]int64, len(cs))
	for j, c := range cs {
		before[j] = evalCalls(t, c)
	}
	errs := d.RefreshBatch(ctx, locks, ttls)
	for j, c := range cs {
		if calls := evalCalls(t, c) - before[j]; calls < 1 || calls > n/redisconn.MaxRefreshKeys+2 {
			t.Errorf("node %d: %d locks refreshed in %d script calls, want about %d", j, n, calls, n/redisconn.MaxRefreshKeys)
		}
	}
	for i, err := range errs {
		switch {
		case i == 7:
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("lock 7, taken over on 3 of 5 nodes: %v, want ErrNotHeld", err)
			}
		case err != nil:
			t.Errorf("lock %d: %v", i, err)
		}
	}
	for j, c := range cs {
		if ttl := c.PTTL(ctx, lockKey("b100")).Val(); ttl < 50*time.Second {
			t.Errorf("node %d: lock b100 after a 1m refresh has %v left", j, ttl)
		}
		if v := c.Get(ctx, lockKey("b7")).Val(); j < 3 && v != "thief" {
			t.Errorf("node %d: the batch touched a lock that is not ours: %q", j, v)
		}
	}

	// A round that takes the whole TTL leaves no validity: too late, not
	// lost.
	d.now = (&stepClock{t: time.Now(), steps: []time.Duration{time.Minute}}).now
	for i, err := range d.RefreshBatch(ctx, locks[:3], ttls[:3]) {
		if err == nil || errors.Is(err, backend.ErrNotHeld) || !strings.Contains(err.Error(), "too late") {
			t.Errorf("lock %d refreshed in a round as long as its TTL: %v, want a too-late error", i, err)
		}
	}
	d.now = time.Now
	for _, l := range locks {
		l.Release(ctx)
	}
}

// TestReleaseAsksAgain: a release that three of five nodes did not answer
// decides nothing; it asks those nodes again, and succeeds once they
// answer, rather than leave the lock to its TTL there.
func TestReleaseAsksAgain(t *testing.T) {
	d, _, srv := testDriverServers(t, defaults)
	ctx := context.Background()
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "again", Token: "t", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srv[:3] {
		s.Stop()
	}
	var rounds []int
	setHooks(t, hooks{releaseRetry: func(round int) {
		rounds = append(rounds, round)
		for _, s := range srv[:3] {
			s.Start() // empty: the lock is not there any more
		}
	}})
	if err := acq.Held.Release(ctx); err != nil {
		t.Fatalf("Release with three nodes back after the first round: %v", err)
	}
	if len(rounds) != 1 {
		t.Errorf("release rounds retried: %v, want one", rounds)
	}
}

// setHooks installs h for the rest of the test.
func setHooks(t testing.TB, h hooks) {
	testHooks.Store(&h)
	t.Cleanup(func() { testHooks.Store(nil) })
}
