package conformance_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"
	_ "github.com/distlock/locker/redlock" // redlock://, for TestURLHarnessOptions
)

// TestURLHarnessMemory checks that the clients of a memory:// harness
// share the named store, and no other, and that Crash really crashes a
// client: its lock (auto-refreshed) goes to a waiter, its Lost closes, and
// its calls fail.
func TestURLHarnessMemory(t *testing.T) {
	ctx := context.Background()
	client := func(raw string) conformance.Client {
		t.Helper()
		c, err := conformance.URLHarness(raw).NewClient(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Locker.Close()
			if c.Cleanup != nil {
				c.Cleanup()
			}
		})
		return c
	}
	a, b := client("memory://urlharness-memory"), client("memory://urlharness-memory")
	other := client("memory://urlharness-memory-other")
	const ttl = 100 * time.Millisecond
	lk, err := a.Locker.TryAcquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Locker.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("a second client of the same store: TryAcquire of a held key = %v, want ErrNotAcquired", err)
	}
	lkO, err := other.Locker.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("a client of another store: TryAcquire = %v, want the key free there", err)
	}
	lkO.Release(ctx)
	if a.Crash == nil {
		t.Fatal("the harness cannot crash a memory:// client")
	}
	a.Crash()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	lkB, err := b.Locker.Acquire(wctx, "k")
	if err != nil {
		t.Fatalf("the crashed client's lock did not go to a waiter: %v", err)
	}
	lkB.Release(ctx)
	select {
	case <-lk.Lost():
	case <-wctx.Done():
		t.Error("the crashed client's Lost did not close")
	}
	if _, err := a.Locker.TryAcquire(ctx, "free"); err == nil || errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("TryAcquire of a crashed client = %v, want the crash's error", err)
	}
}

// TestLongKeys checks that a run with a long prefix passes (the longest
// key is what the Locker accepts with its prefix), and that a failure
// shows a long key cut short.
func TestLongKeys(t *testing.T) {
	h := conformance.URLHarness("memory://long-keys?prefix=" + strings.Repeat("p", 100))
	h.TTL = 100 * time.Millisecond
	long := strings.Repeat("m", 800)
	h.Cases = []conformance.Case{{
		Name: "long-key-held",
		Rule: "a failure shows a long key cut short",
		Func: func(t *conformance.T) {
			a, b := t.Locker(), t.Locker()
			lk := t.TryAcquire(a, long)
			defer lk.Release(t.Context())
			t.TryAcquire(b, long) // held: fails
		},
	}}
	rep, err := conformance.Check(context.Background(), h)
	if err == nil {
		t.Fatalf("Check passed a case that fails:\n%s", rep)
	}
	for _, r := range rep.Failed() {
		if r.Name != "long-key-held" {
			t.Errorf("%s failed with a 100-byte prefix: %s", r.Name, r.Detail)
		}
	}
	r, _ := rep.Result("long-key-held")
	if r.Status != conformance.Fail || !strings.Contains(r.Detail, `"mmmm`) || !strings.Contains(r.Detail, "…(800 bytes)") || strings.Contains(r.Detail, strings.Repeat("m", 100)) {
		t.Errorf("the failure shows the key as %q, want its first bytes and its length", r.Detail)
	}
}

// nohook is a scheme whose opener ignores the harness's hook, as a
// backend from another module does: it records the hosts it is given and
// opens a memory Locker.
var nohook struct {
	mu    sync.Mutex
	hosts []string
}

func init() {
	locker.Register("nohook", func(ctx context.Context, u *locker.URL) (locker.Locker, error) {
		if err := u.CheckParams(); err != nil {
			return nil, err
		}
		nohook.mu.Lock()
		nohook.hosts = append(nohook.hosts, u.Host)
		nohook.mu.Unlock()
		return memory.New(nil), nil
	})
}

// TestURLHarnessWithoutHook checks that a backend whose opener ignores the
// hook gets its hosts replaced by proxies (found out at the first client,
// which is opened twice; later ones once), and that its clients can crash.
func TestURLHarnessWithoutHook(t *testing.T) {
	h := conformance.URLHarness("nohook://127.0.0.1:1,127.0.0.1:2/x")
	for i := range 2 {
		nohook.mu.Lock()
		nohook.hosts = nil
		nohook.mu.Unlock()
		c, err := h.NewClient(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		c.Locker.Close()
		c.Cleanup()
		nohook.mu.Lock()
		hosts := nohook.hosts
		nohook.mu.Unlock()
		want := map[int]int{0: 2, 1: 1}[i] // opened with the hook first, then by URL
		if len(hosts) != want {
			t.Fatalf("client %d: the opener ran %d times, want %d", i+1, len(hosts), want)
		}
		last := strings.Split(hosts[len(hosts)-1], ",")
		if len(last) != 2 || last[0] == "127.0.0.1:1" || last[1] == "127.0.0.1:2" || !strings.HasPrefix(last[0], "127.0.0.1:") {
			t.Errorf("client %d was opened with hosts %v, want two proxies in place of 127.0.0.1:1,127.0.0.1:2", i+1, last)
		}
		if c.Crash == nil {
			t.Errorf("client %d cannot crash", i+1)
		}
	}
}

// TestURLHarnessInProcess: another module's backend whose URL names no
// address (an in-process store) is opened as its URL says, with no Crash,
// so that the crash cases skip instead of the suite failing to start.
func TestURLHarnessInProcess(t *testing.T) {
	h := conformance.URLHarness("nohook://store")
	c, err := h.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Locker.Close()
	if c.Crash != nil {
		t.Error("a client of an in-process store has a Crash, which could cut nothing")
	}
	nohook.mu.Lock()
	hosts := nohook.hosts
	nohook.mu.Unlock()
	if len(hosts) == 0 || hosts[len(hosts)-1] != "store" {
		t.Errorf("opened with hosts %v, want the URL's own, store", hosts)
	}
}

// TestURLHarnessOptions: the options given to URLHarness reach every Open,
// so that a caller routes the clients' warnings (a Redlock node down at
// Open, here) to a logger of its own, not to slog.Default.
func TestURLHarnessOptions(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	dead := testenv.ClosedAddr(t)
	u := strings.Replace(raw, "redlock://", "redlock://"+dead+",", 1) // one of six down: a warning
	var def, given testenv.SyncBuffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&def, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	h := conformance.URLHarness(u, locker.WithLogger(slog.New(slog.NewTextHandler(&given, nil))))
	c, err := h.NewClient(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Locker.Close()
	if c.Cleanup != nil {
		c.Cleanup()
	}
	if !strings.Contains(given.String(), dead) {
		t.Errorf("the logger given to URLHarness got %q, want the warning naming %s", given.String(), dead)
	}
	if def.Len() > 0 {
		t.Errorf("slog.Default got %q, want nothing", def.String())
	}
}
