package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// inspectBackend is the postgres backend as inspecttest runs it. A holder
// learns of a forced release at its next refresh, a third of the TTL on.
func inspectBackend(open func(t testing.TB) locker.Locker) inspecttest.Backend {
	return inspecttest.Backend{
		Open:       open,
		TTL:        1500 * time.Millisecond,
		Token:      true,
		TTLKnown:   true,
		LostWithin: 15 * time.Second,
	}
}

func TestInspect(t *testing.T) {
	raw := serverURL(t)
	for _, c := range []struct {
		name string
		open func(t testing.TB) locker.Locker
	}{
		{"Open", func(t testing.TB) locker.Locker {
			l, err := locker.Open(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"New", func(t testing.TB) locker.Locker {
			l, err := postgres.New(dbPool(t, raw), nil)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
	} {
		t.Run(c.name, func(t *testing.T) { inspecttest.Run(t, inspectBackend(c.open)) })
	}
}

// TestInspectDetail: what Inspect reports of each kind of hold: whether
// it was waited for (Detail, only once it was); each holder's token, value and remaining
// TTL; an exclusive holder's fence once minted, equal to its Lock.Fence;
// shared and permit holds in grant order, each with its fence, equal to
// its Lock.Fence, and a permit's limit and weight.
func TestInspectDetail(t *testing.T) {
	raw := serverURL(t)
	l, other := openLocker(t, raw), openLocker(t, raw)
	ctx := context.Background()

	t.Run("mutex", func(t *testing.T) {
		key := inspecttest.Key(t)
		lk, err := l.Acquire(ctx, key, locker.WithTTL(time.Minute), locker.WithValue([]byte("v1")))
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Release(ctx)
		h := inspecttest.Inspect(t, other, key)
		if h.Detail != nil {
			t.Errorf("Detail = %q, want none: nobody waited", h.Detail)
		}
		if !h.Held || h.Token != lk.Token() || string(h.Value) != "v1" || len(h.Holds) != 1 || h.Holds[0].Kind != backend.Exclusive {
			t.Errorf("Inspect = %+v, want the holder's token and value, one exclusive hold", h)
		}
		if !h.TTLKnown || h.TTL <= 50*time.Second || h.TTL > time.Minute {
			t.Errorf("Holder.TTL = %v (known %v) just after acquiring for a minute", h.TTL, h.TTLKnown)
		}
		// Taken by the INSERT alone, the mutex has no fence until asked.
		if h.Fenced {
			t.Errorf("Inspect of a mutex never asked for its fence: Fenced, fence %d", h.Fence)
		}
		fence, ok := lk.Fence()
		if !ok {
			t.Fatal("Fence: none")
		}
		h = inspecttest.Inspect(t, other, key)
		if !h.Fenced || h.Fence != fence || !h.Holds[0].Fenced || h.Holds[0].Fence != fence {
			t.Errorf("Inspect after Fence() = %d: fence %d (known %v), want the lock's", fence, h.Fence, h.Fenced)
		}
		if err := lk.SetValue(ctx, []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if _, err := other.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key: %v", err)
		}
		h = inspecttest.Inspect(t, l, key)
		if string(h.Value) != "v2" || !strings.HasPrefix(h.Detail["waited for"], "yes") {
			t.Errorf("Inspect after SetValue and a failed TryAcquire: value %q, Detail %q; want v2, waited for yes", h.Value, h.Detail)
		}
		// From now on l mints each mutex's fence with its grant.
		key2 := inspecttest.Key(t)
		lk2, err := l.Acquire(ctx, key2, locker.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer lk2.Release(ctx)
		h = inspecttest.Inspect(t, other, key2)
		fence2, _ := lk2.Fence()
		if !h.Fenced || h.Fence != fence2 || fence2 <= fence {
			t.Errorf("Inspect of a mutex granted with its fence: %d (known %v), Fence() %d, earlier fence %d", h.Fence, h.Fenced, fence2, fence)
		}
	})

	t.Run("shared", func(t *testing.T) {
		key := inspecttest.Key(t)
		var held []locker.Lock
		for i, ll := range []locker.Locker{l, other, l} {
			lk, err := ll.Acquire(ctx, key, locker.Shared(), locker.WithTTL(time.Minute), locker.WithValue([]byte{'a' + byte(i)}))
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx)
			held = append(held, lk)
		}
		h := inspecttest.Inspect(t, other, key)
		if !h.Held || len(h.Holds) != len(held) || h.Token != held[0].Token() || string(h.Value) != "a" {
			t.Fatalf("Inspect of three shared holds = %+v", h)
		}
		for i, hold := range h.Holds {
			fence, ok := held[i].Fence()
			if hold.Kind != backend.Shared || hold.Token != held[i].Token() || !bytes.Equal(hold.Value, []byte{'a' + byte(i)}) ||
				!ok || !hold.Fenced || hold.Fence != fence || !hold.TTLKnown || hold.TTL <= 50*time.Second {
				t.Errorf("hold %d = %+v, want the %d-th shared holder's (token %s, fence %d)", i, hold, i+1, held[i].Token(), fence)
			}
		}
		if h.Fence != h.Holds[0].Fence || !h.Fenced {
			t.Errorf("Holder fence %d (known %v), want the first hold's, %d", h.Fence, h.Fenced, h.Holds[0].Fence)
		}
	})

	t.Run("permit", func(t *testing.T) {
		key := inspecttest.Key(t)
		a, err := l.Acquire(ctx, key, locker.Limit(3), locker.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Release(ctx)
		b, err := other.Acquire(ctx, key, locker.Limit(3), locker.Weight(2), locker.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Release(ctx)
		h := inspecttest.Inspect(t, l, key)
		if len(h.Holds) != 2 {
			t.Fatalf("Inspect of two permit holds = %+v", h)
		}
		for i, c := range []struct {
			lk     locker.Lock
			weight int
		}{{a, 1}, {b, 2}} {
			hold := h.Holds[i]
			fence, _ := c.lk.Fence()
			if hold.Kind != backend.Permit || hold.Limit != 3 || hold.Weight != c.weight || hold.Token != c.lk.Token() || hold.Fence != fence {
				t.Errorf("permit hold %d = %+v, want limit 3, weight %d, token %s, fence %d", i, hold, c.weight, c.lk.Token(), fence)
			}
		}
	})

	t.Run("force-release-shared", func(t *testing.T) {
		key := inspecttest.Key(t)
		var held []locker.Lock
		for _, ll := range []locker.Locker{l, other} {
			lk, err := ll.Acquire(ctx, key, locker.Shared(), locker.WithTTL(1500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, lk)
		}
		if !inspecttest.ForceRelease(t, other, key) {
			t.Fatal("ForceRelease of a read lock with two holders reported nothing released")
		}
		if h := inspecttest.Inspect(t, l, key); h.Held || len(h.Holds) != 0 {
			t.Errorf("Inspect after ForceRelease = %+v, want free", h)
		}
		for i, lk := range held {
			testenv.WaitFor(t, 15*time.Second, "a force-released shared holder's Lost", func() bool { return testenv.Closed(lk.Lost()) })
			if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("force-released shared holder %d's Release: %v, want ErrNotHeld", i, err)
			}
		}
		lk, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire after ForceRelease: %v", err)
		}
		lk.Release(ctx)
	})
}
