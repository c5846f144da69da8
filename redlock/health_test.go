package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// noProbes keeps skipped nodes skipped for the whole test.
var noProbes = func() settings {
	s := defaults
	s.probeMin, s.probeMax = time.Hour, time.Hour
	return s
}()

func skip(d *driver, i int) {
	d.skipNode(d.nodes[i], skipAfter, errors.New("test: skipped"))
}

// TestSkippedNodesDoNotVote: two of five nodes are skipped though their
// servers are up and would vote. Every quorum is still a majority of all
// five, never of the three asked, and the skipped nodes are not touched.
func TestSkippedNodesDoNotVote(t *testing.T) {
	d, cs := testDriver(t, noProbes)
	ctx := context.Background()
	skip(d, 0)
	skip(d, 1)

	// Acquire: nodes 3 and 4 accept, node 2 has another holder: 2 of 5.
	cs[2].Set(ctx, lockKey("a"), "other", time.Minute)
	_, err := d.TryAcquire(ctx, backend.Request{Key: "a", Token: "t1", TTL: 10 * time.Second})
	var busy *backend.Busy
	if !errors.As(err, &busy) {
		t.Fatalf("TryAcquire with 2 of 5 nodes accepting, 2 skipped: %v, want *backend.Busy", err)
	}
	for i, c := range cs {
		if v, _ := c.Get(ctx, lockKey("a")).Result(); v == "t1" {
			t.Errorf("node %d holds the refused lock's token after the round", i)
		}
	}

	// A lock taken on all five; then node 2 loses it. Only nodes 3 and 4
	// of those asked still hold it: no majority, though 0 and 1 have it.
	d2, cs2 := testDriver(t, noProbes)
	acq, err := d2.TryAcquire(ctx, backend.Request{Key: "b", Token: "t2", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	skip(d2, 0)
	skip(d2, 1)
	cs2[2].Del(ctx, lockKey("b"))
	h := acq.Held
	wantNoMajority := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s with 2 of 5 nodes holding the lock and 2 skipped: nil error", what)
			return
		}
		for _, i := range []int{0, 1} {
			if want := d2.nodes[i].addr + ": not asked"; !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v; want it to name the skipped node (%q)", what, err, want)
			}
		}
	}
	err = h.Refresh(ctx, time.Minute)
	wantNoMajority("Refresh", err)
	_, err = h.TTL(ctx)
	wantNoMajority("TTL", err)
	wantNoMajority("RefreshBatch", d2.RefreshBatch(ctx, []backend.Held{h}, []time.Duration{time.Minute})[0])
	err = h.Release(ctx)
	wantNoMajority("Release", err)
	for _, i := range []int{0, 1} {
		ttl := cs2[i].PTTL(ctx, lockKey("b")).Val()
		if ttl <= 0 || ttl > 10*time.Second {
			t.Errorf("skipped node %d: PTTL %v, want the lock left as taken (10s TTL), untouched", i, ttl)
		}
	}
}

// TestProbeBringsBack: a skipped node whose server answers is used again
// once the prober asks it, without any request asking it first.
func TestProbeBringsBack(t *testing.T) {
	s := defaults
	s.probeMin, s.probeMax = 10*time.Millisecond, 10*time.Millisecond
	d, _ := testDriver(t, s)
	skip(d, 3)
	if d.nodes[3].skipped() == nil {
		t.Fatal("node 3 not skipped after skipNode")
	}
	testenv.WaitFor(t, 10*time.Second, "probe puts node 3 back", func() bool { return d.nodes[3].skipped() == nil })
}

// TestCloseStopsProbes: after Close, a skipped node that never answers is
// dialed no more, and no probe goroutine is left (goleak, in TestMain).
// Close waits for a probe under way, so every dial it made is counted by
// the time Close returns.
func TestCloseStopsProbes(t *testing.T) {
	dead := testenv.StartRedis(t)
	dead.Stop()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var ns []*node
	var probes *countingConn
	for i := range 3 {
		addr := dead.Addr()
		if i > 0 {
			addr = testenv.StartRedis(t).Addr()
		}
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { c.Close() })
		var conn redisconn.Conn = redisconn.NewGoRedis(c, false)
		if i == 0 {
			probes = &countingConn{Conn: conn}
			conn = probes
		}
		ns = append(ns, newNode(addr, conn, log))
	}
	s := defaults
	s.probeMin, s.probeMax = time.Millisecond, time.Millisecond
	d := newDriver(ns, s, log)
	skip(d, 0)
	testenv.WaitFor(t, 10*time.Second, "a few probes", func() bool { return probes.evals.Load() >= 3 })
	d.Close()
	// Close waits for the prober: every probe it sent began before.
	after := probes.evals.Load()
	time.Sleep(50 * time.Millisecond) // some 50 probe periods
	if n := probes.evals.Load() - after; n != 0 {
		t.Errorf("%d probes of the skipped node after Close", n)
	}
}

// countingConn counts the scripts sent through it.
type countingConn struct {
	redisconn.Conn
	evals atomic.Int64
}

func (c *countingConn) Eval(ctx context.Context, s *redisconn.Script, keys []string, args ...any) (any, error) {
	c.evals.Add(1)
	return c.Conn.Eval(ctx, s, keys, args...)
}

// TestUnreachableBatch: a batched refresh whose every reply failed in
// transport is the node's failure, so that a node refusing connections is
// not counted as answering (which would reset its failures and unskip
// it); one answer from the server, even an error, is an answer.
func TestUnreachableBatch(t *testing.T) {
	refused := errors.New("dial tcp: connection refused")
	if err := unreachable([]redisconn.Reply{{Err: refused}, {Err: refused}}); !errors.Is(err, refused) {
		t.Errorf("every reply failed in transport: %v, want the transport error", err)
	}
	server := redigo.Error("NOSCRIPT no matching script")
	if err := unreachable([]redisconn.Reply{{Err: refused}, {Err: server}}); err != nil {
		t.Errorf("one reply from the server: %v, want nil", err)
	}
	if err := unreachable([]redisconn.Reply{{Err: refused}, {Val: int64(1)}}); err != nil {
		t.Errorf("one success: %v, want nil", err)
	}
}

// TestReleaseAfterMajorityLost: a lock that a majority of nodes let expire,
// and gave to another holder, while two nodes still had a copy of it (its
// SET arrived there late, so their copy expires later): Release reports it
// lost, deletes the late copies, and leaves the other holder's copies.
func TestReleaseAfterMajorityLost(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "k", Token: "a", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs[:3] {
		if err := c.Set(ctx, lockKey("k"), "b", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	err = acq.Held.Release(ctx)
	if !errors.Is(err, backend.ErrNotHeld) {
		t.Fatalf("Release of a lock three of five nodes gave to another: %v, want ErrNotHeld", err)
	}
	for i, c := range cs {
		v, err := c.Get(ctx, lockKey("k")).Result()
		switch {
		case i < 3 && v != "b":
			t.Errorf("node %d: the other holder's copy is %q, %v", i, v, err)
		case i >= 3 && !errors.Is(err, goredis.Nil):
			t.Errorf("node %d: our late copy is still there: %q, %v", i, v, err)
		}
	}
}

// setCalls is the SET commands a server has had.
func setCalls(t *testing.T, c *goredis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_set:calls="); ok {
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return v
		}
	}
	return 0
}

// TestWaitersGoThroughTheGate: a release notice wakes every waiter at
// once. Were they all to run a round on every node, each handoff would
// cost every node a SET per waiter left, and rounds started together
// split the vote. Woken waiters ask the first node alone first, so the
// other nodes see about one round per handoff.
func TestWaitersGoThroughTheGate(t *testing.T) {
	d, cs, srv := testDriverServers(t, defaults)
	var addrs []string
	for _, s := range srv {
		addrs = append(addrs, s.Addr())
	}
	ctx := context.Background()
	const key, waiters = "gate", 8
	holder, err := d.TryAcquire(ctx, backend.Request{Key: key, Token: "holder", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	results := make(chan error, waiters)
	for i := range waiters {
		dw, _ := driverOn(t, addrs, defaults) // a client of its own, as another process
		go func() {
			acq, err := dw.Acquire(ctx, backend.Request{Key: key, Token: fmt.Sprint("w", i), TTL: time.Minute})
			if err == nil {
				err = acq.Held.Release(ctx)
			}
			results <- err
		}()
	}
	// Every waiter subscribes to the key's notices on every node once its
	// first round found the key held: then all are waiting.
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := cs[4].PubSubNumSub(ctx, channelOf(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[channelOf(key)] >= waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d waiters subscribed", n[channelOf(key)], waiters)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := make([]int64, len(cs))
	for i, c := range cs {
		before[i] = setCalls(t, c)
	}
	if err := holder.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	// Without the gate: 8+7+...+1 = 36 SETs on every node.
	for i, c := range cs[1:] {
		if n := setCalls(t, c) - before[i+1]; n > 2*waiters {
			t.Errorf("node %d had %d SETs for %d handoffs, want about one each: the woken waiters did not go through the gate", i+1, n, waiters)
		}
	}
	if n := setCalls(t, cs[0]) - before[0]; n < waiters {
		t.Errorf("the gate node had %d SETs for %d handoffs, want at least one each", n, waiters)
	}
}
