package etcd_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

// The watch that tells a holder its entry was deleted or put on another
// lease behind its back, and how it covers what it cannot see: the look
// at every held entry before it starts, the locks taken while it starts
// and those whose entry changed before the watcher knew of them. The
// locks here are not refreshed (a refresh of a lock alone reads its
// entry): Lost closes either because the watcher saw the change, with its
// cause, or at the end of the lock's validity, with another.

const watchTTL = 10 * time.Second

// watchHooks records what the watcher's hooks saw, for the test that
// sets it. Each hook func, if set, runs at the event (on the watcher's
// goroutine for its events, the acquirer's for "held").
type watchHooks struct {
	mu       sync.Mutex
	resyncs  int             // "resynced" events
	changed  map[string]bool // "PUT key" or "DELETE key" of "change" events
	held     []string        // entries of "held" events
	onHeld   func(entry string)
	onResync func(n int) // at "resync", n counting from 1
	onStart  func(n int) // at "resynced"
}

// setWatchHooks installs h until the test ends.
func setWatchHooks(t *testing.T) *watchHooks {
	h := &watchHooks{changed: map[string]bool{}}
	etcd.SetHooks(t, etcd.Hooks{
		Held: func(entry string) {
			h.mu.Lock()
			h.held = append(h.held, entry)
			on := h.onHeld
			h.mu.Unlock()
			if on != nil {
				on(entry)
			}
		},
		Resync: func() {
			h.mu.Lock()
			on, n := h.onResync, h.resyncs+1
			h.mu.Unlock()
			if on != nil {
				on(n)
			}
		},
		Resynced: func() {
			h.mu.Lock()
			h.resyncs++
			on, n := h.onStart, h.resyncs
			h.mu.Unlock()
			if on != nil {
				on(n)
			}
		},
		Change: func(key, typ string) {
			h.mu.Lock()
			h.changed[typ+" "+key] = true
			h.mu.Unlock()
		},
	})
	return h
}

func (h *watchHooks) set(f func(h *watchHooks)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// waitChange waits until the watcher has applied a change of type typ
// (PUT or DELETE) to key.
func (h *watchHooks) waitChange(t *testing.T, typ, key string) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the watcher applies the "+typ+" of "+key, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.changed[typ+" "+key]
	})
}

// waitWatch waits until the watcher has started a watch: a change made
// from then on is reported by it. (A watch started later begins at the
// revision its look saw, after the change, and never reports it.)
func (h *watchHooks) waitWatch(t *testing.T) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the watcher starts a watch", func() bool { return h.resynced() > 0 })
}

func (h *watchHooks) resynced() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resyncs
}

// entryOf returns the one queue entry of lock key in the default
// namespace.
func entryOf(t *testing.T, raw *clientv3.Client, key string) string {
	t.Helper()
	q := queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, key))
	if len(q) != 1 {
		t.Fatalf("queue of %s: %q, want one entry", key, q)
	}
	return q[0]
}

// acquireUnrefreshed takes key with watchTTL and no watchdog.
func acquireUnrefreshed(t *testing.T, l locker.Locker, key string) locker.Lock {
	t.Helper()
	lk, err := l.Acquire(context.Background(), key, locker.WithTTL(watchTTL), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	return lk
}

// wantLostBy waits for lk's Lost and checks that the watcher closed it,
// for cause, rather than the end of its validity.
func wantLostBy(t *testing.T, lk locker.Lock, cause error) {
	t.Helper()
	<-lk.Lost()
	// TTL tells why a lost lock was lost.
	if _, err := lk.TTL(context.Background()); !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, cause) {
		t.Errorf("Lost closed with %v; want ErrNotHeld for %v", err, cause)
	}
}

// TestLostWhenEntryChanged: an entry deleted by someone else, or put again
// on no lease, is a lock lost at once, though its lease lives on; a
// Refresh then returns ErrNotHeld.
func TestLostWhenEntryChanged(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		tamper func(entry string) error
		want   error
	}{
		{"deleted", func(e string) error { _, err := raw.Delete(ctx, e); return err }, etcd.ErrEntryDeleted},
		{"put on no lease", func(e string) error { _, err := raw.Put(ctx, e, ""); return err }, etcd.ErrEntryMoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey("tampered")
			lk := acquireUnrefreshed(t, l, key)
			entry := entryOf(t, raw, key)
			t.Cleanup(func() { raw.Delete(ctx, entry) })
			if err := tc.tamper(entry); err != nil {
				t.Fatal(err)
			}
			wantLostBy(t, lk, tc.want)
			if err := lk.Refresh(ctx, watchTTL); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("Refresh after the entry was %s: %v, want ErrNotHeld", tc.name, err)
			}
			// Our entry, on no lease of ours, would block the key for
			// ever: the Locker deletes it.
			testenv.WaitFor(t, 10*time.Second, "the entry put on no lease deleted", func() bool {
				resp, err := raw.Get(ctx, entry, clientv3.WithCountOnly())
				return err == nil && resp.Count == 0
			})
		})
	}
}

// TestRefreshAfterDelete: a Refresh made right after the entry was
// deleted returns ErrNotHeld, whether or not the watch has told yet.
func TestRefreshAfterDelete(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	key := uniqueKey("refresh-deleted")
	lk, err := l.Acquire(ctx, key, locker.WithTTL(watchTTL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Delete(ctx, entryOf(t, raw, key)); err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, watchTTL); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Refresh after the entry was deleted: %v, want ErrNotHeld", err)
	}
	<-lk.Lost()
}

// TestWatchStartGap: an entry deleted after the watcher looked at it but
// before its watch started is found: the watch starts just after the
// revision the look saw.
func TestWatchStartGap(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	hooks := setWatchHooks(t)
	key := uniqueKey("start-gap")
	hooks.set(func(h *watchHooks) {
		h.onStart = func(n int) {
			if n != 1 {
				return
			}
			h.mu.Lock()
			entry := h.held[0]
			h.mu.Unlock()
			if _, err := raw.Delete(context.Background(), entry); err != nil {
				t.Error(err)
			}
		}
	})
	l := open(t, url) // a Locker of its own: its watcher starts with this lock
	wantLostBy(t, acquireUnrefreshed(t, l, key), etcd.ErrEntryDeleted)
}

// TestWatchCoversLockTakenDuringStart: a lock taken after the watcher
// listed the entries to look at, and deleted before the watch starts, is
// looked at once the watch runs.
func TestWatchCoversLockTakenDuringStart(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	hooks := setWatchHooks(t)
	l := open(t, url)
	late := make(chan locker.Lock, 1)
	hooks.set(func(h *watchHooks) {
		h.onResync = func(n int) {
			if n != 1 {
				return
			}
			// On the watcher's goroutine (so no t.Fatal), after it listed
			// the held entries: the first lock's alone.
			ctx := context.Background()
			key := uniqueKey("during-start")
			lk, err := l.Acquire(ctx, key, locker.WithTTL(watchTTL), locker.WithAutoRefresh(false))
			if err != nil {
				t.Error(err)
				close(late)
				return
			}
			if _, err := raw.Delete(ctx, etcd.QueuePrefix(etcd.DefaultNamespace, key), clientv3.WithPrefix()); err != nil {
				t.Error(err)
			}
			late <- lk
		}
	})
	acquireUnrefreshed(t, l, uniqueKey("first"))
	lk, ok := <-late
	if !ok {
		t.FailNow()
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	wantLostBy(t, lk, etcd.ErrEntryDeleted)
}

// TestWatchCoversLockRegisteredLate: an entry deleted, and the deletion
// applied by the watcher, between the acquire and the moment the watcher
// learns of the lock, is looked at.
func TestWatchCoversLockRegisteredLate(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	hooks := setWatchHooks(t)
	l := open(t, url)
	acquireUnrefreshed(t, l, uniqueKey("first"))
	hooks.waitWatch(t)
	key := uniqueKey("registered-late")
	hooks.set(func(h *watchHooks) {
		h.onHeld = func(entry string) {
			if !strings.HasPrefix(entry, etcd.QueuePrefix(etcd.DefaultNamespace, key)) {
				return
			}
			if _, err := raw.Delete(context.Background(), entry); err != nil {
				t.Error(err)
			}
			hooks.waitChange(t, "DELETE", entry)
		}
	})
	wantLostBy(t, acquireUnrefreshed(t, l, key), etcd.ErrEntryDeleted)
}

// gapServer is a private etcd reached through a proxy, so that a test
// can break the Locker's watch while history it would resume from is
// compacted away.
type gapServer struct {
	raw   *clientv3.Client // straight to the server
	proxy *conformance.Proxy
	ns    string
	hooks *watchHooks
}

func newGapServer(t *testing.T, ns string, args ...string) *gapServer {
	s := startServer(t, "http", plainReady, args...)
	return &gapServer{raw: rawClient(t, s.addr), proxy: testenv.Proxy(t, s.addr), ns: ns, hooks: setWatchHooks(t)}
}

// watching waits until the watcher's watch delivers changes, and the
// looks it had to make when the first was applied are done: the second
// change is applied in a later turn of its loop.
func (g *gapServer) watching(t *testing.T, name string) {
	t.Helper()
	g.hooks.waitWatch(t)
	for _, k := range []string{g.ns + "/probe/" + name + "-1", g.ns + "/probe/" + name + "-2"} {
		if _, err := g.raw.Put(context.Background(), k, ""); err != nil {
			t.Fatal(err)
		}
		g.hooks.waitChange(t, "PUT", k)
	}
}

// gap cuts the Locker off, runs during, compacts the history to the
// latest revision and lets the Locker back: its watch cannot resume
// where it stopped. It returns once the watcher has looked at every held
// entry again.
func (g *gapServer) gap(t *testing.T, during func()) {
	t.Helper()
	ctx := context.Background()
	before := g.hooks.resynced()
	g.proxy.Cut()
	during()
	// Two changes, so that the revision the watch resumes from, at the
	// latest the first's, goes with the compaction.
	var rev int64
	for range 2 {
		r, err := g.raw.Put(ctx, g.ns+"/probe/gap", "")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if _, err := g.raw.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	g.proxy.Restore()
	testenv.WaitFor(t, 30*time.Second, "the watcher looks at every entry again", func() bool {
		return g.hooks.resynced() > before
	})
}

// TestWatchGapCompacted: an entry deleted while the watch is broken, and
// the history of the deletion compacted before it could resume, is found
// by the look at every held entry that restarts the watch.
func TestWatchGapCompacted(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	g := newGapServer(t, etcd.DefaultNamespace)
	l := open(t, "etcd://"+g.proxy.Addr())
	key := uniqueKey("gap")
	lk := acquireUnrefreshed(t, l, key)
	kept := acquireUnrefreshed(t, l, uniqueKey("gap-kept"))
	g.watching(t, "1")
	g.gap(t, func() {
		if _, err := g.raw.Delete(context.Background(), entryOf(t, g.raw, key)); err != nil {
			t.Fatal(err)
		}
	})
	wantLostBy(t, lk, etcd.ErrEntryDeleted)
	g.watching(t, "2")
	select {
	case <-kept.Lost():
		_, err := kept.TTL(context.Background())
		t.Errorf("a lock whose entry stayed was lost across the gap: %v", err)
	default:
	}
}

// TestWatchLagsBehindOwnMoves: the watch reports the puts of our own lease
// changes after the fact, and may lag several behind. A refresh that moves
// the entry to another lease and a second that moves it back must not make
// the first put, seen late, look like someone else's: the lock stays held
// and its entry stays. (Judged by the lock's lease at the time the event
// was seen, the first put was on a lease the entry was no longer on: the
// lock was reported lost and its entry left behind, on a lease kept alive,
// blocking the key.)
func TestWatchLagsBehindOwnMoves(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	started := setWatchHooks(t)
	l := open(t, url)
	ctx := context.Background()
	key := uniqueKey("lag")
	lk := acquireUnrefreshed(t, l, key)
	started.waitWatch(t) // else the watch may begin after the blocker's put
	entry := entryOf(t, raw, key)
	blocker := etcd.DefaultNamespace + "/" + uniqueKey("lag-blocker")
	t.Cleanup(func() { raw.Delete(ctx, blocker) })

	// The watcher stops at the blocker's put until the test lets it go.
	held, letGo := make(chan struct{}), make(chan struct{})
	var goOnce sync.Once
	release := func() { goOnce.Do(func() { close(letGo) }) }
	t.Cleanup(release) // before the Locker's Close, which waits for the watcher
	var entryPuts atomic.Int32
	restore := etcd.SetHooks(t, etcd.Hooks{Change: func(key, typ string) {
		switch {
		case key == blocker:
			close(held)
			<-letGo
		case key == entry && typ == "PUT":
			entryPuts.Add(1)
		}
	}})
	defer restore()
	if _, err := raw.Put(ctx, blocker, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not apply the blocker's put within 30s")
	}
	if err := lk.Refresh(ctx, watchTTL+2*time.Second); err != nil {
		t.Fatalf("Refresh to another lease: %v", err)
	}
	if err := lk.Refresh(ctx, watchTTL); err != nil {
		t.Fatalf("Refresh back to the first lease: %v", err)
	}
	release()
	testenv.WaitFor(t, 10*time.Second, "the watcher applied both moves", func() bool { return entryPuts.Load() >= 2 })
	if err := lk.Err(); err != nil {
		t.Fatalf("the lock was reported lost by its own lease changes: %v", err)
	}
	if got := entryOf(t, raw, key); got != entry {
		t.Fatalf("entry %q, want %q", got, entry)
	}
}

// TestWatchStartsForLongHolds: a lock released within watchAfter starts no
// watch; one held that long starts it, and the look the watch starts with
// reports an entry deleted by someone else before it started.
func TestWatchStartsForLongHolds(t *testing.T) {
	etcd.SetWatchAfter(t, 50*time.Millisecond)
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	var starts atomic.Int32
	due := make(chan struct{}, 16)
	var gate atomic.Pointer[chan struct{}] // due waits for it, when set
	etcd.SetHooks(t, etcd.Hooks{
		Due: func() {
			if g := gate.Load(); g != nil {
				<-*g
			}
			select {
			case due <- struct{}{}:
			default:
			}
		},
		Resync: func() { starts.Add(1) },
	})

	// The check waits for the release: a stall between the two must not
	// make the brief lock a long one.
	brief := make(chan struct{})
	gate.Store(&brief)
	lk := acquireUnrefreshed(t, l, uniqueKey("brief"))
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	close(brief)
	<-due
	if n := starts.Load(); n != 0 {
		t.Fatalf("the watch started %d times for a lock released before watchAfter", n)
	}

	g := make(chan struct{})
	gate.Store(&g)
	key := uniqueKey("long")
	lk = acquireUnrefreshed(t, l, key)
	entry := entryOf(t, raw, key)
	if _, err := raw.Delete(ctx, entry); err != nil {
		t.Fatal(err)
	}
	close(g) // the check runs after the deletion
	wantLostBy(t, lk, etcd.ErrEntryDeleted)
	if n := starts.Load(); n != 1 {
		t.Errorf("the watch started %d times, want 1", n)
	}
}
