package locker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/memory"
)

// TestInspectMemoryOpen runs the shared cases on Lockers from Open; the
// memory package runs them on its own constructor's.
func TestInspectMemoryOpen(t *testing.T) {
	inspecttest.Run(t, inspecttest.Backend{
		Open: func(t testing.TB) locker.Locker {
			l, err := locker.Open(context.Background(), "memory://inspect-open")
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		TTL:        5 * time.Second,
		Token:      true,
		TTLKnown:   true,
		Waiters:    true,
		LostWithin: 5 * time.Second,
	})
}

// TestForceReleaseLostAtOnce: the memory store tells a force-released
// holder at once, so its Lost is closed by the time ForceRelease returns.
func TestForceReleaseLostAtOnce(t *testing.T) {
	var logs bytes.Buffer
	s := memory.NewStore()
	l := memory.New(&memory.Options{Store: s, Config: locker.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	defer l.Close()
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	released, err := locker.ForceRelease(ctx, l, "stuck")
	if !released || err != nil {
		t.Fatalf("ForceRelease = %v, %v; want true, nil", released, err)
	}
	select {
	case <-lk.Lost():
	default:
		t.Fatal("Lost still open after ForceRelease returned")
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) || !strings.Contains(err.Error(), "by force") {
		t.Errorf("Err() = %v, want ErrNotHeld saying the lock was released by force", err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "key=stuck") {
		t.Errorf("the Locker's log does not record the forced release at Warn with its key: %q", logs.String())
	}
}

// TestInspectPrefix: Inspect and ForceRelease add the Locker's prefix as
// Acquire does.
func TestInspectPrefix(t *testing.T) {
	ctx := context.Background()
	s := memory.NewStore()
	prefixed := memory.New(&memory.Options{Store: s, Config: locker.Config{Prefix: "app/"}})
	defer prefixed.Close()
	bare := memory.New(&memory.Options{Store: s})
	defer bare.Close()
	lk, err := prefixed.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	for _, c := range []struct {
		l    locker.Locker
		key  string
		held bool
	}{{prefixed, "k", true}, {bare, "app/k", true}, {bare, "k", false}, {prefixed, "app/k", false}} {
		h, err := locker.Inspect(ctx, c.l, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if h.Held != c.held || (c.held && h.Token != lk.Token()) {
			t.Errorf("Inspect(%q) = %+v, want held %v by %q", c.key, h, c.held, lk.Token())
		}
	}
	if released, err := locker.ForceRelease(ctx, bare, "k"); released || err != nil {
		t.Errorf("ForceRelease of the unprefixed key = %v, %v; want false, nil", released, err)
	}
	if released, err := locker.ForceRelease(ctx, prefixed, "k"); !released || err != nil {
		t.Errorf("ForceRelease through the prefixed Locker = %v, %v; want true, nil", released, err)
	}
	// The prefix counts towards the key length, as for Acquire.
	long := strings.Repeat("x", backend.DefaultMaxKeyLen-len("app/")+1)
	_, aerr := prefixed.TryAcquire(ctx, long)
	_, ierr := locker.Inspect(ctx, prefixed, long)
	if !errors.Is(ierr, locker.ErrInvalidKey) || !strings.Contains(ierr.Error(), "with its prefix") ||
		errors.Unwrap(ierr).Error() != errors.Unwrap(aerr).Error() {
		t.Errorf("Inspect of a key too long with its prefix: %v; want Acquire's %v", ierr, aerr)
	}
}

// plainDriver hides the memory driver's Inspector: a backend without one.
type plainDriver struct{ backend.Driver }

func (plainDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Name: "plain", MaxKeyLen: 100}
}

func TestInspectUnsupported(t *testing.T) {
	ctx := context.Background()
	l := locker.New(plainDriver{memstore.NewDriver(memstore.NewStore())}, nil)
	defer l.Close()
	_, ierr := locker.Inspect(ctx, l, "k")
	_, ferr := locker.ForceRelease(ctx, l, "k")
	for _, err := range []error{ierr, ferr} {
		if !errors.Is(err, locker.ErrUnsupported) || !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "plain backend") {
			t.Errorf("got %v, want ErrUnsupported naming the plain backend", err)
		}
	}
	// Bad keys are refused as by Acquire first, whatever the backend.
	if _, err := locker.Inspect(ctx, l, strings.Repeat("x", 101)); !errors.Is(err, locker.ErrInvalidKey) {
		t.Errorf("Inspect of a key over the backend's 100 bytes: %v, want ErrInvalidKey", err)
	}
}

// foreign is a Locker of some other package.
type foreign struct{ locker.Locker }

// wrapper wraps a Locker and says so.
type wrapper struct {
	foreign
	inner locker.Locker
}

func (w wrapper) Unwrap() locker.Locker { return w.inner }

// loop unwraps to itself.
type loop struct{ foreign }

func (l loop) Unwrap() locker.Locker { return l }

func TestInspectWhichLockers(t *testing.T) {
	ctx := context.Background()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)

	h, err := locker.Inspect(ctx, wrapper{inner: l}, "k")
	if err != nil || h.Token != lk.Token() {
		t.Errorf("Inspect through a wrapper with Unwrap = %+v, %v; want the holder %q", h, err, lk.Token())
	}
	for _, c := range []struct {
		name string
		l    locker.Locker
		want error
		msg  string
	}{
		{"nil", nil, nil, "nil Locker"},
		{"foreign", foreign{l}, locker.ErrUnsupported, "locker_test.foreign is not a Locker of package locker"},
		{"loop", loop{}, locker.ErrUnsupported, "wrapped in one another"},
		{"failed New", locker.New(nil, nil), nil, "nil driver"},
	} {
		_, err := locker.Inspect(ctx, c.l, "k")
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: Inspect = %v, want an error saying %q", c.name, err, c.msg)
		}
		var oe *locker.OpError
		if !errors.As(err, &oe) || oe.Op != "inspect" || oe.Key != "k" {
			t.Errorf("%s: Inspect = %#v, want an *OpError of op inspect and key k", c.name, err)
		}
	}

	var nilCtx context.Context
	if _, err := locker.Inspect(nilCtx, l, "k"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Inspect with a nil context: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := locker.ForceRelease(cancelled, l, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("ForceRelease with a cancelled context: %v, want context.Canceled", err)
	}
	if h, err := locker.Inspect(ctx, l, "k"); err != nil || !h.Held {
		t.Errorf("after the failed calls, Inspect = %+v, %v; want the lock still held", h, err)
	}
}

func ExampleInspect() {
	ctx := context.Background()
	l, _ := locker.Open(ctx, "memory://example-inspect")
	defer l.Close()
	lk, _ := l.Acquire(ctx, "orders/42", locker.WithTTL(time.Minute))

	h, _ := locker.Inspect(ctx, l, "orders/42")
	fmt.Println("held:", h.Held, "by this lock:", h.Token == lk.Token(), "fence:", h.Fence)

	// An operator frees a stuck key. The holder, if alive, is told only
	// through Lost (here at once; on most backends later): fencing is
	// what protects the resource meanwhile.
	released, _ := locker.ForceRelease(ctx, l, "orders/42")
	<-lk.Lost()
	fmt.Println("released:", released, "holder's error:", errors.Is(lk.Err(), locker.ErrNotHeld))
	// Output:
	// held: true by this lock: true fence: 1
	// released: true holder's error: true
}
