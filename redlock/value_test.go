package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// valueKey is a key of the test's own on the shared nodes.
func valueKey(t *testing.T) string { return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano()) }

// inspectValue returns the value Inspect reports of key's first holder,
// checking that Holder.Value and Holds[0].Value agree.
func inspectValue(t *testing.T, l locker.Locker, key string) (locker.Holder, []byte) {
	t.Helper()
	h, err := locker.Inspect(context.Background(), l, key)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Held || len(h.Holds) == 0 {
		t.Fatalf("Inspect(%s) = %+v, want it held", key, h)
	}
	if !bytes.Equal(h.Value, h.Holds[0].Value) {
		t.Errorf("Inspect(%s): Value %q, Holds[0].Value %q, want them equal", key, h.Value, h.Holds[0].Value)
	}
	return h, h.Value
}

// mustTry takes key or fails the test; the test's end releases it.
func mustTry(t *testing.T, l locker.Locker, key string, opts ...locker.Option) locker.Lock {
	t.Helper()
	lk, err := l.TryAcquire(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%s): %v", key, err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	return lk
}

// TestValues: a value stored with an exclusive hold on the nodes is what
// Inspect reports, with no fence; SetValue replaces it, a stale holder's
// SetValue is refused and leaves the new holder's value; shared and
// permit holds keep a value each.
func TestValues(t *testing.T) {
	url := testenv.Get(t, testenv.RedlockURL)
	a, b := mustOpen(t, url), mustOpen(t, url)
	ctx := context.Background()
	key := valueKey(t)
	if max := a.Capabilities().MaxValueLen; max != 64<<10 {
		t.Errorf("MaxValueLen = %d, want 64 KiB", max)
	}
	lk := mustTry(t, a, key, locker.WithValue([]byte("host-a")), locker.WithAutoRefresh(false))
	if h, v := inspectValue(t, b, key); string(v) != "host-a" || h.Token != lk.Token() || h.Fenced {
		t.Errorf("Inspect = %+v, want %s's hold with the value host-a and no fence", h, lk.Token())
	}
	if err := lk.SetValue(ctx, []byte("host-a, again")); err != nil {
		t.Fatal(err)
	}
	if _, v := inspectValue(t, b, key); string(v) != "host-a, again" {
		t.Errorf("after SetValue: value %q", v)
	}
	if ok, err := locker.ForceRelease(ctx, b, key); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	fresh := mustTry(t, b, key, locker.WithValue([]byte("host-b")))
	if err := lk.SetValue(ctx, []byte("stale")); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("SetValue by a holder whose lock was released by force and taken by another: %v, want ErrNotHeld", err)
	}
	if h, v := inspectValue(t, a, key); string(v) != "host-b" || h.Token != fresh.Token() {
		t.Errorf("after a stale SetValue: Inspect = %+v, want %s's value host-b", h, fresh.Token())
	}
	fresh.Release(ctx)

	for _, opt := range []locker.Option{locker.Shared(), locker.Limit(3)} {
		r1 := mustTry(t, a, key, opt, locker.WithValue([]byte("one")))
		r2 := mustTry(t, b, key, opt, locker.WithValue([]byte("two")))
		if err := r2.SetValue(ctx, []byte("two again")); err != nil {
			t.Fatal(err)
		}
		h, _ := inspectValue(t, a, key)
		got := map[string]string{}
		for _, hd := range h.Holds {
			got[hd.Token] = string(hd.Value)
		}
		if len(got) != 2 || got[r1.Token()] != "one" || got[r2.Token()] != "two again" {
			t.Errorf("the values of two holders: %v, want one and \"two again\"", got)
		}
		r1.Release(ctx)
		r2.Release(ctx)
	}
}

// TestValuesMixedExclusive: exclusive holds with and without values
// exclude each other on the nodes, each seeing the other as busy, and a
// semaphore's permit is a mismatch for a valued exclusive hold.
func TestValuesMixedExclusive(t *testing.T) {
	url := testenv.Get(t, testenv.RedlockURL)
	plain, valued := mustOpen(t, url), mustOpen(t, url)
	ctx := context.Background()
	key := valueKey(t)
	value := locker.WithValue([]byte("v"))
	busy := func(l locker.Locker, why string, opts ...locker.Option) {
		t.Helper()
		lk, err := l.TryAcquire(ctx, key, opts...)
		if err == nil {
			lk.Release(ctx)
			t.Fatalf("TryAcquire while %s succeeded", why)
		}
		if !errors.Is(err, locker.ErrNotAcquired) || errors.Is(err, locker.ErrKindMismatch) {
			t.Errorf("TryAcquire while %s: %v, want ErrNotAcquired", why, err)
		}
	}
	lk := mustTry(t, plain, key)
	busy(valued, "a holder without a value holds the key", value)
	lk.Release(ctx)
	lk = mustTry(t, valued, key, value)
	busy(plain, "a holder with a value holds the key")
	busy(plain, "a holder with a value holds the key", locker.Shared())
	busy(plain, "another holder with a value holds the key", value)
	if _, err := plain.TryAcquire(ctx, key, locker.Limit(2)); !errors.Is(err, locker.ErrKindMismatch) {
		t.Errorf("a permit while a valued exclusive hold holds the key: %v, want ErrKindMismatch", err)
	}
	lk.Release(ctx)
	mustTry(t, plain, key).Release(ctx)
}

// TestElection: an election on a redlock:// Locker reports its leader
// with its value and token and no term, and an observer sees the leader
// and a Proclaim.
func TestElection(t *testing.T) {
	url := testenv.Get(t, testenv.RedlockURL)
	a, o := mustOpen(t, url), mustOpen(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := valueKey(t)
	changes := locker.NewElection(o, name).Observe(ctx)
	e := locker.NewElection(a, name, locker.WithTTL(30*time.Second))
	lead, err := e.Campaign(ctx, []byte("host-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Resign(context.Background())
	if _, ok := lead.Fence(); ok {
		t.Error("a Redlock leader has a fence")
	}
	want := locker.Leader{Value: []byte("host-a"), Token: lead.Token()}
	ldr, err := e.Leader(ctx)
	if err != nil || !bytes.Equal(ldr.Value, want.Value) || ldr.Token != want.Token || ldr.Termed {
		t.Errorf("Leader = %+v, %v; want %+v, without a term", ldr, err, want)
	}
	await := func(what string) {
		t.Helper()
		select {
		case ldr := <-changes:
			if !bytes.Equal(ldr.Value, want.Value) || ldr.Token != want.Token || ldr.Termed {
				t.Fatalf("%s: the observer reported %+v, want %+v", what, ldr, want)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the observer reported nothing", what)
		}
	}
	await("A leads")
	want.Value = []byte("host-a, proclaimed")
	if err := e.Proclaim(ctx, want.Value); err != nil {
		t.Fatal(err)
	}
	await("A proclaimed")

	// A campaign without a value takes the name by a plain SET NX, which
	// publishes nothing: Campaign announces it (an empty SetValue), so
	// the observer hears of it long before any TTL could tell.
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	b := locker.NewElection(mustOpen(t, url), name, locker.WithTTL(30*time.Second))
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	lb, err := b.Campaign(wctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Resign(context.Background())
	for {
		select {
		case ldr := <-changes:
			if ldr.Token == lb.Token() {
				if ldr.Value != nil || ldr.Termed {
					t.Fatalf("B without a value: observed %+v", ldr)
				}
				return
			}
		case <-wctx.Done():
			t.Fatal("the observer never heard of a leader that campaigned without a value")
		}
	}
}
