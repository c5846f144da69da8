// Package inspecttest checks a backend's locker.Inspect and
// locker.ForceRelease against its real servers: the same cases for every
// backend, each saying which rule broke. Backend-specific checks (server
// key names, per-node answers) stay in the backend's own tests.
package inspecttest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// Backend describes the backend under test.
type Backend struct {
	// Open returns a new Locker of the backend, one client as a process
	// would have; the test closes it. Required.
	Open func(t testing.TB) locker.Locker
	// TTL of the held locks. Where a holder learns of a forced release
	// only at its next refresh, a short one keeps the test short.
	// Required.
	TTL time.Duration
	// MaxTTL bounds Holder.TTL for a lock of TTL (etcd rounds TTLs up to
	// whole seconds); 0: TTL.
	MaxTTL time.Duration
	// What the backend's Holder tells.
	Token, TTLKnown, Waiters bool
	// LostWithin bounds the wait for a force-released holder's Lost.
	// Required.
	LostWithin time.Duration
}

// seq makes keys unique within the process; the nanoseconds make them
// unique across runs on servers that other tests share.
var seq atomic.Int64

// Key returns a key no other test uses, with bytes that need encoding.
func Key(t testing.TB) string {
	return fmt.Sprintf("inspect/%s/ключ %d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// Run runs every case against b.
func Run(t *testing.T, b Backend) {
	if b.MaxTTL == 0 {
		b.MaxTTL = b.TTL
	}
	t.Run("Free", func(t *testing.T) { testFree(t, b) })
	t.Run("Held", func(t *testing.T) { testHeld(t, b) })
	t.Run("Waiters", func(t *testing.T) { testWaiters(t, b) })
	t.Run("ForceRelease", func(t *testing.T) { testForceRelease(t, b) })
	t.Run("BadKeys", func(t *testing.T) { testBadKeys(t, b) })
	t.Run("Closed", func(t *testing.T) { testClosed(t, b) })
}

// open returns a Locker of b, closed when the test ends.
func open(t testing.TB, b Backend) locker.Locker {
	t.Helper()
	l := b.Open(t)
	t.Cleanup(func() { l.Close() })
	return l
}

// Inspect calls locker.Inspect and fails the test on an error.
func Inspect(t testing.TB, l locker.Locker, key string) locker.Holder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := locker.Inspect(ctx, l, key)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", key, err)
	}
	return h
}

// ForceRelease calls locker.ForceRelease and fails the test on an error.
func ForceRelease(t testing.TB, l locker.Locker, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := locker.ForceRelease(ctx, l, key)
	if err != nil {
		t.Fatalf("ForceRelease(%q): %v", key, err)
	}
	return ok
}

// Acquire takes key on l with ttl, and releases it when the test ends if
// it is still held.
func Acquire(t testing.TB, l locker.Locker, key string, ttl time.Duration) locker.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lk, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	lk.Fence() // minted now, where a backend mints on demand, as a fenced writer's would be
	return lk
}

// CheckHolder checks that h describes lk as b reports a holder.
func CheckHolder(t testing.TB, b Backend, h locker.Holder, lk locker.Lock) {
	t.Helper()
	if !h.Held {
		t.Fatalf("Inspect of a held key: Held is false (%+v)", h)
	}
	switch {
	case b.Token && h.Token != lk.Token():
		t.Errorf("Holder.Token = %q, want the holder's Token() %q", h.Token, lk.Token())
	case !b.Token && h.Token != "":
		t.Errorf("Holder.Token = %q, want none: this backend stores no token", h.Token)
	}
	fence, fenced := lk.Fence()
	if h.Fenced != fenced || h.Fence != fence {
		t.Errorf("Holder fence = %d (known %v), want the holder's Fence() %d (ok %v)", h.Fence, h.Fenced, fence, fenced)
	}
	if h.TTLKnown != b.TTLKnown {
		t.Errorf("Holder.TTLKnown = %v, want %v", h.TTLKnown, b.TTLKnown)
	}
	if h.TTLKnown && (h.TTL <= 0 || h.TTL > b.MaxTTL) {
		t.Errorf("Holder.TTL = %v, want in (0, %v]", h.TTL, b.MaxTTL)
	}
	if h.WaitersKnown != b.Waiters {
		t.Errorf("Holder.WaitersKnown = %v, want %v", h.WaitersKnown, b.Waiters)
	}
}

func testFree(t *testing.T, b Backend) {
	l := open(t, b)
	key := Key(t)
	h := Inspect(t, l, key)
	if h.Held || h.Token != "" || h.Fenced || h.TTLKnown || h.Waiters != 0 {
		t.Errorf("Inspect of a key never locked = %+v, want a free key", h)
	}
	if h.WaitersKnown != b.Waiters {
		t.Errorf("Holder.WaitersKnown = %v, want %v", h.WaitersKnown, b.Waiters)
	}
	if ForceRelease(t, l, key) {
		t.Error("ForceRelease of a key never locked reported a release")
	}
}

func testHeld(t *testing.T, b Backend) {
	l, other := open(t, b), open(t, b)
	key := Key(t)
	lk := Acquire(t, l, key, b.TTL)
	// Another client sees the same as the holder's own Locker.
	for _, in := range []locker.Locker{l, other} {
		h := Inspect(t, in, key)
		CheckHolder(t, b, h, lk)
		if b.Waiters && h.Waiters != 0 {
			t.Errorf("Holder.Waiters = %d with nobody waiting", h.Waiters)
		}
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := Inspect(t, other, key); h.Held {
		t.Errorf("Inspect after Release: still held (%+v)", h)
	}
}

// A Waiter is an Acquire running in the background.
type Waiter struct {
	cancel context.CancelFunc
	done   chan struct{}
	lk     locker.Lock
	err    error
}

// StartWaiter starts Acquire of key on l with ttl in the background. When
// the test ends, the Acquire is cancelled and waited for, and a lock it
// took is released.
func StartWaiter(t testing.TB, l locker.Locker, key string, ttl time.Duration) *Waiter {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	w := &Waiter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.lk, w.err = l.Acquire(ctx, key, locker.WithTTL(ttl))
		if w.err == nil {
			w.lk.Fence() // minted now, where a backend mints on demand, as a fenced writer's would be
		}
	}()
	t.Cleanup(func() {
		w.cancel()
		<-w.done
		if w.lk != nil {
			w.lk.Release(context.Background())
		}
	})
	return w
}

// Wait waits for the waiter's Acquire to return, and fails the test
// unless it acquired the key.
func (w *Waiter) Wait(t testing.TB, within time.Duration) locker.Lock {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(within):
		t.Fatalf("the waiter did not acquire the key within %v", within)
	}
	if w.err != nil {
		t.Fatalf("the waiter's Acquire: %v", w.err)
	}
	return w.lk
}

func testWaiters(t *testing.T, b Backend) {
	if !b.Waiters {
		t.Skip("the backend keeps no queue on the server: waiters cannot be counted")
	}
	holder := open(t, b)
	key := Key(t)
	lk := Acquire(t, holder, key, b.TTL)
	var ws []*Waiter
	for n := 1; n <= 2; n++ {
		ws = append(ws, StartWaiter(t, open(t, b), key, b.TTL))
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("Inspect to count %d waiters", n), func() bool {
			return Inspect(t, holder, key).Waiters == n
		})
	}
	CheckHolder(t, b, Inspect(t, holder, key), lk) // the waiters changed nothing
	for _, w := range ws {
		w.cancel()
		<-w.done
	}
	testenv.WaitFor(t, 10*time.Second, "Inspect to count no waiters once they gave up", func() bool {
		return Inspect(t, holder, key).Waiters == 0
	})
}

func testForceRelease(t *testing.T, b Backend) {
	holder, next, op := open(t, b), open(t, b), open(t, b)
	key := Key(t)
	lk := Acquire(t, holder, key, b.TTL)
	w := StartWaiter(t, next, key, b.TTL)
	if b.Waiters {
		testenv.WaitFor(t, 10*time.Second, "the waiter to queue", func() bool {
			return Inspect(t, op, key).Waiters == 1
		})
	}
	if !ForceRelease(t, op, key) {
		t.Fatal("ForceRelease of a held key reported nothing released")
	}
	// The waiter gets the key: the forced release wakes it, or at the
	// latest its poll does.
	lk2 := w.Wait(t, 30*time.Second)
	CheckHolder(t, b, Inspect(t, op, key), lk2)
	testenv.WaitFor(t, b.LostWithin, "the force-released holder's Lost to close", func() bool {
		return testenv.Closed(lk.Lost())
	})
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("the force-released holder's Err() = %v, want ErrNotHeld", err)
	}
	if err := lk.Release(context.Background()); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("the force-released holder's Release = %v, want ErrNotHeld", err)
	}
	// Its release left the new holder alone.
	CheckHolder(t, b, Inspect(t, op, key), lk2)
	if err := lk2.Release(context.Background()); err != nil {
		t.Fatalf("the new holder's Release: %v", err)
	}
	if ForceRelease(t, op, key) {
		t.Error("ForceRelease of a released key reported a release")
	}
	if h := Inspect(t, op, key); h.Held {
		t.Errorf("Inspect after every release: still held (%+v)", h)
	}
}

func testBadKeys(t *testing.T, b Backend) {
	l := open(t, b)
	ctx := context.Background()
	long := strings.Repeat("x", l.Capabilities().MaxKeyLen+1)
	for _, key := range []string{"", long} {
		_, aerr := l.TryAcquire(ctx, key)
		_, ierr := locker.Inspect(ctx, l, key)
		_, ferr := locker.ForceRelease(ctx, l, key)
		for _, c := range []struct {
			op  string
			err error
		}{{"inspect", ierr}, {"force-release", ferr}} {
			if !errors.Is(c.err, locker.ErrInvalidKey) {
				t.Errorf("%s of a %d-byte key: %v, want ErrInvalidKey", c.op, len(key), c.err)
				continue
			}
			var ao, co *locker.OpError
			if !errors.As(aerr, &ao) || !errors.As(c.err, &co) {
				t.Fatalf("errors %v and %v: want *locker.OpError", aerr, c.err)
			}
			if co.Op != c.op || co.Err.Error() != ao.Err.Error() {
				t.Errorf("%s of a %d-byte key: op %q, cause %q; want op %q and TryAcquire's cause %q", c.op, len(key), co.Op, co.Err, c.op, ao.Err)
			}
		}
	}
}

func testClosed(t *testing.T, b Backend) {
	l := b.Open(t)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := locker.Inspect(ctx, l, "k"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Inspect on a closed Locker: %v, want ErrClosed", err)
	}
	if _, err := locker.ForceRelease(ctx, l, "k"); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("ForceRelease on a closed Locker: %v, want ErrClosed", err)
	}
}
