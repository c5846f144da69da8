package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/testenv"
)

// The batched refresh the watchdog uses, on the driver itself: which
// requests go out, and what each lock is told.

// batchDriver opens a driver on the servers of the URL in the variable
// env, with its own base path, and a plain connection to look at the
// nodes.
func batchDriver(t *testing.T, env string) (*driver, *gozk.Conn) {
	t.Helper()
	raw := testenv.Get(t, env)
	servers := testenv.Hosts(t, raw)
	d := newDriver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	d.servers = servers
	var b [6]byte
	rand.Read(b[:])
	d.base = "/batch-" + hex.EncodeToString(b[:])
	d.acl = gozk.WorldACL(gozk.PermAll)
	t.Cleanup(func() { d.Close() })
	c, _, err := gozk.Connect(servers, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quietLog{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return d, c
}

type quietLog struct{}

func (quietLog) Printf(string, ...any) {}

// takeMany acquires keys prefix0..prefix(n-1) with ttl, on 16 goroutines.
func takeMany(t *testing.T, d *driver, prefix string, n int, ttl time.Duration) []*held {
	t.Helper()
	hs := make([]*held, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				acq, err := d.TryAcquire(context.Background(), backend.Request{Key: fmt.Sprint(prefix, i), Token: "t", TTL: ttl})
				if err == nil {
					hs[i] = acq.Held.(*held)
				}
				errs[i] = err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			h.Release(context.Background())
		}
	})
	return hs
}

// multis records the multis of checks sent, by session timeout.
func multis(t *testing.T) func() map[time.Duration][]int {
	var mu sync.Mutex
	sent := map[time.Duration][]int{}
	testHooks.Store(&hooks{checking: func(ttl time.Duration, n int) {
		mu.Lock()
		sent[ttl] = append(sent[ttl], n)
		mu.Unlock()
	}})
	t.Cleanup(func() { testHooks.Store(nil) })
	return func() map[time.Duration][]int {
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
}

// owner returns the session that owns the node at path, as the leader
// has it (c may talk to a follower that lags behind).
func owner(t *testing.T, c *gozk.Conn, path string) int64 {
	t.Helper()
	if _, err := c.Sync(path); err != nil {
		t.Fatal(err)
	}
	_, st, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.EphemeralOwner
}

// TestRefreshBatch: locks of two sessions due together are checked in one
// multi per session; a lock whose node was deleted behind its holder's
// back is told ErrNotHeld, as Refresh would tell it, and the others are
// checked again without it and stay held; a lock asking for another TTL
// moves to that TTL's session on its own.
func TestRefreshBatch(t *testing.T) {
	// On the ensemble, a follower the driver talks to forwards the multis
	// to the leader.
	for name, env := range map[string]string{"standalone": testenv.ZooKeeperURL, "ensemble": testenv.ZooKeeperEnsembleURL} {
		t.Run(name, func(t *testing.T) { testRefreshBatch(t, env) })
	}
}

func testRefreshBatch(t *testing.T, env string) {
	d, c := batchDriver(t, env)
	ctx := context.Background()
	const short, long = 10 * time.Second, 20 * time.Second
	a := takeMany(t, d, "a/", 50, short)
	b := takeMany(t, d, "b/", 3, long)
	if err := c.Delete(a[7].path, -1); err != nil {
		t.Fatal(err)
	}
	var locks []backend.Held
	var ttls []time.Duration
	for i, h := range a {
		locks, ttls = append(locks, h), append(ttls, short)
		if i == 10 {
			ttls[i] = long
		}
	}
	for _, h := range b {
		locks, ttls = append(locks, h), append(ttls, 0) // 0: the TTL it has
	}
	sent := multis(t)
	errs := d.RefreshBatch(ctx, locks, ttls)

	for i, err := range errs {
		switch {
		case i == 7:
			if !errors.Is(err, backend.ErrNotHeld) || err.Error() != "lock not held: the lock node is gone" {
				t.Errorf("lock 7, deleted: %v, want ErrNotHeld as Refresh gives it", err)
			}
		case err != nil:
			t.Errorf("lock %d: %v", i, err)
		}
	}
	// 49 checks (lock 10 moves on its own), failing at lock 7; then 48.
	want := map[time.Duration][]int{short: {49, 48}, long: {3}}
	if got := sent(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("multis sent, by session: %v, want %v", got, want)
	}
	if err := a[7].Refresh(ctx, 0); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("Refresh of the deleted lock after the batch: %v, want ErrNotHeld", err)
	}
	if ok, _, err := c.Exists(a[7].path); ok || err != nil {
		t.Errorf("the deleted node is back (%v, %v)", ok, err)
	}
	// Lock 10 now lives in the long TTL's session, with the b locks.
	if moved, other := owner(t, c, a[10].path), owner(t, c, b[0].path); moved != other {
		t.Errorf("lock 10 asked for %v but its node's session is %x, not that of the %v locks (%x)", long, moved, long, other)
	}
	for i, h := range slices.Concat(a, b) {
		if i == 7 {
			continue
		}
		if ttl, err := h.TTL(ctx); err != nil || ttl < short {
			t.Errorf("lock %d after the batch: TTL %v, %v", i, ttl, err)
		}
	}
}

// TestRefreshBatchChunks: a batch larger than a multi may be is sent in
// chunks; a deleted node in one chunk costs that chunk one more multi and
// no other chunk anything.
func TestRefreshBatchChunks(t *testing.T) {
	d, c := batchDriver(t, testenv.ZooKeeperURL)
	const ttl = 10 * time.Second
	// Enough locks for three chunks and a part, whatever the paths' length.
	n := 3*maxCheckBytes/(checkOpBytes+len(d.base)+len("/k-k%2F1234/_c_-lock-0000000000")+guidLen) + 100
	hs := takeMany(t, d, "k/", n, ttl)
	items := make([]checkItem, n)
	locks := make([]backend.Held, n)
	for i, h := range hs {
		items[i], locks[i] = checkItem{h, i}, h
	}
	cs := chunks(items)
	if len(cs) < 3 {
		t.Fatalf("%d locks make %d chunks, want 3 or more", n, len(cs))
	}
	// One lock gone in each of the first two chunks: those are sent again
	// without it.
	var want []int
	for _, c := range cs {
		want = append(want, len(c))
	}
	gone := []int{cs[0][0].i, cs[1][len(cs[1])/2].i}
	for _, i := range gone {
		if err := c.Delete(hs[i].path, -1); err != nil {
			t.Fatal(err)
		}
	}
	want = append(want, len(cs[0])-1, len(cs[1])-1)
	slices.Sort(want)

	sent := multis(t)
	errs := d.RefreshBatch(context.Background(), locks, make([]time.Duration, n))
	for i, err := range errs {
		if slices.Contains(gone, i) {
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("lock %d, deleted: %v, want ErrNotHeld", i, err)
			}
		} else if err != nil {
			t.Errorf("lock %d: %v", i, err)
		}
	}
	got := sent()[ttl]
	slices.Sort(got) // the chunks go out concurrently
	if !slices.Equal(got, want) {
		t.Errorf("multis sent: %v checks, want %v", got, want)
	}
	for i, h := range hs {
		ok, _, err := c.Exists(h.path)
		if err != nil {
			t.Fatal(err)
		}
		if ok == slices.Contains(gone, i) {
			t.Errorf("lock %d: node exists %v after the batch", i, ok)
		}
	}
}

// TestChunks: chunks keep to both the operation count and the byte size
// of a multi, in order, whatever the paths' lengths.
func TestChunks(t *testing.T) {
	for _, pathLen := range []int{10, 100, 3500} {
		items := make([]checkItem, 2500)
		for i := range items {
			items[i] = checkItem{h: &held{path: "/" + strings.Repeat("x", pathLen-1)}, i: i}
		}
		next := 0
		for _, c := range chunks(items) {
			size := 0
			for _, it := range c {
				size += checkOpBytes + len(it.h.path)
				if it.i != next {
					t.Fatalf("paths of %d bytes: item %d where %d was due", pathLen, it.i, next)
				}
				next++
			}
			if len(c) == 0 || len(c) > maxCheckOps || size > maxCheckBytes {
				t.Errorf("paths of %d bytes: a chunk of %d checks, %d bytes", pathLen, len(c), size)
			}
		}
		if next != len(items) {
			t.Errorf("paths of %d bytes: %d of %d items in chunks", pathLen, next, len(items))
		}
	}
}
