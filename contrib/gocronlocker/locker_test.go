package gocronlocker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/contrib/gocronlocker"
	"github.com/distlock/locker/memory"
)

// TestNewErrors: bad arguments are errors that name the problem.
func TestNewErrors(t *testing.T) {
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	long := make([]byte, l.Capabilities().MaxValueLen+1)
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"locker over nil", func() error { _, err := gocronlocker.NewLocker(nil); return err }, "nil locker.Locker"},
		{"negative min hold", func() error { _, err := gocronlocker.NewLocker(l, gocronlocker.WithMinHold(-time.Second)); return err }, "WithMinHold(-1s)"},
		{"zero TTL", func() error { _, err := gocronlocker.NewLocker(l, gocronlocker.WithTTL(0)); return err }, "WithTTL(0s)"},
		{"nil option", func() error { _, err := gocronlocker.NewLocker(l, nil); return err }, "option 1 is nil"},
		{"elector over nil", func() error { _, err := gocronlocker.NewElector(nil, "x"); return err }, "nil locker.Locker"},
		{"empty name", func() error { _, err := gocronlocker.NewElector(l, ""); return err }, "empty election name"},
		{"elector TTL", func() error { _, err := gocronlocker.NewElector(l, "x", gocronlocker.WithTTL(-1)); return err }, "WithTTL(-1ns)"},
		{"long value", func() error { _, err := gocronlocker.NewElector(l, "x", gocronlocker.WithValue(long)); return err }, "longer than the 65536"},
	} {
		err := tc.new()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "gocronlocker: ") {
			t.Errorf("%s: err = %v, want a gocronlocker error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestLockerMinHold: a job's lock is kept after Unlock until its minimum
// hold has passed, so that another instance cannot take it; Close lets go
// of it at once.
func TestLockerMinHold(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	la := memory.New(&memory.Options{Store: store})
	lb := memory.New(&memory.Options{Store: store})
	defer la.Close()
	defer lb.Close()
	a, err := gocronlocker.NewLocker(la, gocronlocker.WithMinHold(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	b, err := gocronlocker.NewLocker(lb, gocronlocker.WithMinHold(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	lk, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if h := a.Held("report"); h == nil || h.Key() != "gocron/report" {
		t.Fatalf("Held = %v, want the lock of gocron/report", h)
	}
	if _, err := b.Lock(ctx, "report"); !errors.Is(err, locker.ErrNotAcquired) || !strings.Contains(err.Error(), "runs on another instance") {
		t.Fatalf("b.Lock while a runs the job = %v, want ErrNotAcquired", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if _, err := b.Lock(ctx, "report"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("b.Lock within a's minimum hold = %v, want ErrNotAcquired", err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("second Unlock = %v, want ErrNotHeld", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if a.Held("report") != nil {
		t.Fatal("Held after Close is not nil")
	}
	if _, err := a.Lock(ctx, "report"); !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("Lock after Close = %v, want ErrClosed", err)
	}

	// b's minimum hold of 100 ms runs out by itself.
	lk, err = b.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("b.Lock after a closed: %v", err)
	}
	acquired := time.Now()
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, nil, 10*time.Second, "the minimum hold to end", func() bool {
		lk, err := la.TryAcquire(ctx, "gocron/report")
		if err != nil {
			return false
		}
		lk.Release(ctx)
		return true
	})
	if held := time.Since(acquired); held < 100*time.Millisecond {
		t.Fatalf("the key was free %v after b acquired it, within its minimum hold", held)
	}

	// Without a minimum hold, Unlock releases at once.
	c, err := gocronlocker.NewLocker(la, gocronlocker.WithKeyPrefix("jobs/"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lk, err = c.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Held("report") != nil {
		t.Fatal("Held after Unlock without a minimum hold is not nil")
	}
	free, err := lb.TryAcquire(ctx, "jobs/report")
	if err != nil {
		t.Fatalf("the key is still held after Unlock without a minimum hold: %v", err)
	}
	free.Release(ctx)
}
