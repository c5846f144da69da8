package redis_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// inspectKey inspects key through l, or fails the test.
func inspectKey(t *testing.T, l locker.Locker, key string) locker.Holder {
	t.Helper()
	h, err := locker.Inspect(context.Background(), l, key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantHolder checks that Inspect of key shows lk holding it with value,
// and with lk's fence when lk has asked for one, and none otherwise.
func wantHolder(t *testing.T, l locker.Locker, key string, lk locker.Lock, value string, fenced bool, why string) {
	t.Helper()
	h := inspectKey(t, l, key)
	if !h.Held || h.Token != lk.Token() || len(h.Holds) != 1 || h.Holds[0].Kind != backend.Exclusive {
		t.Fatalf("%s: Inspect = %+v, want %s's exclusive hold", why, h, lk.Token())
	}
	var want []byte
	if value != "" {
		want = []byte(value)
	}
	if !bytes.Equal(h.Value, want) || !bytes.Equal(h.Holds[0].Value, want) {
		t.Errorf("%s: Inspect reports the values %q and %q (Holds[0]), want %q", why, h.Value, h.Holds[0].Value, want)
	}
	switch {
	case !fenced && h.Fenced:
		t.Errorf("%s: Inspect reports the fence %d for a holder that has none", why, h.Fence)
	case fenced && (!h.Fenced || h.Fence != fence(t, lk) || h.Holds[0].Fence != h.Fence):
		t.Errorf("%s: Inspect reports the fence %d (%v), want the holder's %d", why, h.Fence, h.Fenced, fence(t, lk))
	}
}

// TestValues: a value stored with an exclusive hold is what Inspect
// reports, with the holder's fence, minted with the grant; SetValue
// replaces it, and a stale holder's SetValue is refused and leaves the
// new holder's value. Shared and permit holds keep a value each.
func TestValues(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		ctx := context.Background()
		a, b := openLocker(t, d.url), openLocker(t, d.url)
		if max := a.Capabilities().MaxValueLen; max != 64<<10 {
			t.Errorf("MaxValueLen = %d, want 64 KiB", max)
		}
		lk := tryAcquire(t, a, key, locker.WithValue([]byte("host-a:8080")), locker.WithAutoRefresh(false))
		wantHolder(t, b, key, lk, "host-a:8080", true, "acquired with a value")
		if err := lk.SetValue(ctx, []byte("host-a:9090")); err != nil {
			t.Fatal(err)
		}
		wantHolder(t, b, key, lk, "host-a:9090", true, "after SetValue")

		if ok, err := locker.ForceRelease(ctx, b, key); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v", ok, err)
		}
		fresh := tryAcquire(t, b, key, locker.WithValue([]byte("host-b")))
		if err := lk.SetValue(ctx, []byte("stale")); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("SetValue by a holder whose lock was released by force and taken by another: %v, want ErrNotHeld", err)
		}
		wantHolder(t, a, key, fresh, "host-b", true, "after a stale holder's SetValue")
		mustRelease(t, fresh)

		for _, opt := range []locker.Option{locker.Shared(), locker.Limit(3)} {
			r1 := tryAcquire(t, a, key, opt, locker.WithValue([]byte("one")))
			r2 := tryAcquire(t, b, key, opt, locker.WithValue([]byte("two")))
			if err := r2.SetValue(ctx, []byte("two again")); err != nil {
				t.Fatal(err)
			}
			hs := holds(t, a, key)
			if len(hs) != 2 || string(hs[0].Value) != "one" || string(hs[1].Value) != "two again" {
				t.Errorf("the values of two %v holders: %+v, want one and \"two again\" in grant order", hs[0].Kind, hs)
			}
			mustRelease(t, r1)
			mustRelease(t, r2)
		}
	})
}

// TestValuesMixedExclusive: clients of one key with and without values
// exclude each other, each seeing the other as busy, not as a mismatch:
// a valued hold (in the hash of holders) against a mutex's SET NX, with
// and without fences minted, and against readers; a semaphore's permit
// is a mismatch for it. A mutex's waiter is woken by a valued holder's
// release.
func TestValuesMixedExclusive(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		plain, fenced, valued := openLocker(t, d.url), openLocker(t, d.url), openLocker(t, d.url)
		value := locker.WithValue([]byte("v"))
		// From its first Fence on, fenced acquires with the acquire script.
		fence(t, tryAcquire(t, fenced, key+"/first"))

		lk := tryAcquire(t, plain, key)
		wantBusy(t, valued, key, "a mutex's holder without a value holds the key", value)
		mustRelease(t, lk)
		lk = tryAcquire(t, fenced, key)
		wantBusy(t, valued, key, "a fenced mutex's holder holds the key", value)
		mustRelease(t, lk)
		lk = tryAcquire(t, plain, key, locker.Shared())
		wantBusy(t, valued, key, "a reader holds the key", value)
		mustRelease(t, lk)

		lk = tryAcquire(t, valued, key, value)
		wantBusy(t, plain, key, "a valued exclusive hold holds the key")
		wantBusy(t, fenced, key, "a valued exclusive hold holds the key (fenced acquire)")
		wantBusy(t, plain, key, "a valued exclusive hold holds the key", locker.Shared())
		wantBusy(t, fenced, key, "another valued exclusive hold holds the key", value)
		if _, err := plain.TryAcquire(context.Background(), key, locker.Limit(2)); !errors.Is(err, locker.ErrKindMismatch) {
			t.Errorf("a permit while a valued exclusive hold holds the key: %v, want ErrKindMismatch", err)
		}
		waiter := startAcquire(t, plain, key)
		mustRelease(t, lk)
		got := waiter.wait(t, "a mutex's Acquire waiting for a valued holder that released")
		if h := inspectKey(t, valued, key); h.Token != got.Token() || h.Value != nil {
			t.Errorf("after the hand-over: Inspect = %+v, want the waiter without a value", h)
		}
	})
}

// TestValueFences: Inspect reports a mutex's holder's fence only once it
// minted one (never a predecessor's, nor one of a counter that names no
// token); a value given to it by SetValue keeps that fence, and one given
// before its first Fence gets the fence minted then.
func TestValueFences(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		ctx := context.Background()
		l, o := openLocker(t, d.url), openLocker(t, d.url)
		fence(t, tryAcquire(t, o, key+"/x")) // o mints from now on
		prev := tryAcquire(t, o, key)
		mustRelease(t, prev)

		lk := tryAcquire(t, l, key)
		wantHolder(t, o, key, lk, "", false, "a holder that has not asked for its fence, after a fenced predecessor")
		if h := inspectKey(t, o, key); h.Detail["last fence"] != strconv.FormatUint(fence(t, prev), 10) {
			t.Errorf("Detail[last fence] = %q, want the predecessor's %d", h.Detail["last fence"], fence(t, prev))
		}
		// A counter written before it named tokens says nothing of the
		// holder's fence.
		if err := d.raw.Set(ctx, redis.LockKey(key)+":fence", "99", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		wantHolder(t, o, key, lk, "", false, "a counter that names no token")
		if err := lk.SetValue(ctx, []byte("before the fence")); err != nil {
			t.Fatal(err)
		}
		wantHolder(t, o, key, lk, "before the fence", false, "a value set before the holder's first Fence")
		fence(t, lk)
		wantHolder(t, o, key, lk, "before the fence", true, "the holder's first Fence, after SetValue")
		mustRelease(t, lk)

		lk = tryAcquire(t, l, key)
		fence(t, lk)
		wantHolder(t, o, key, lk, "", true, "the holder's Fence")
		if err := lk.SetValue(ctx, []byte("after the fence")); err != nil {
			t.Fatal(err)
		}
		wantHolder(t, o, key, lk, "after the fence", true, "SetValue after the holder's Fence")
		if err := lk.SetValue(ctx, nil); err != nil {
			t.Fatal(err)
		}
		wantHolder(t, o, key, lk, "", true, "SetValue of an empty value")
		if err := lk.Refresh(ctx, 20*time.Second); err != nil {
			t.Errorf("Refresh of a hold moved into the hash of holders: %v", err)
		}
		mustRelease(t, lk)
		if h := inspectKey(t, o, key); h.Held {
			t.Errorf("after Release of a hold moved into the hash: Inspect = %+v, want free", h)
		}
	})
}

// TestObserver: the driver's Observer tells of a valued grant, of a value
// set, of a release, and of an empty SetValue of a mutex's holder (what an
// Election announces a term with).
func TestObserver(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, raw)})
	defer c.Close()
	obs := redis.NewDriver(t, c).(backend.Observer)
	l := openLocker(t, raw)
	ctx := context.Background()
	key := "observer/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	events, stop, err := obs.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	notice := func(what string) {
		t.Helper()
		select {
		case <-events:
		case <-time.After(10 * time.Second):
			t.Fatalf("the observer had no notice within 10s of %s", what)
		}
	}
	lk := tryAcquire(t, l, key, locker.WithValue([]byte("a")))
	notice("a grant with a value")
	if err := lk.SetValue(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	notice("SetValue")
	mustRelease(t, lk)
	notice("Release")
	lk = tryAcquire(t, l, key)
	if err := lk.SetValue(ctx, nil); err != nil {
		t.Fatal(err)
	}
	notice("an empty SetValue of a mutex's holder")
	if ok, err := locker.ForceRelease(ctx, l, key); !ok || err != nil {
		t.Fatalf("ForceRelease = %v, %v", ok, err)
	}
	notice("ForceRelease")
}

// TestElection: an election on a redis:// Locker reports its leader with
// its value and its term, the leader's fence, whether it campaigned with a
// value (the term minted with the grant) or without (minted by Campaign,
// then announced); an observer sees each leader and a Proclaim.
func TestElection(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	a, b, o := openLocker(t, raw), openLocker(t, raw), openLocker(t, raw)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "election/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	changes := locker.NewElection(o, name).Observe(ctx)
	// await waits for the observer to report want; it may report the
	// value before the term, and nothing else.
	await := func(want locker.Leader, what string) {
		t.Helper()
		for {
			select {
			case ldr := <-changes:
				if bytes.Equal(ldr.Value, want.Value) && ldr.Token == want.Token && ldr.Termed && ldr.Term == want.Term {
					return
				}
				if !bytes.Equal(ldr.Value, want.Value) || ldr.Token != want.Token || ldr.Termed {
					t.Fatalf("%s: the observer reported %+v, want %+v", what, ldr, want)
				}
			case <-ctx.Done():
				t.Fatalf("%s: the observer did not report %+v", what, want)
			}
		}
	}
	for _, c := range []struct {
		who   string
		l     locker.Locker
		value []byte
	}{{"A, with a value", a, []byte("host-a")}, {"B, without one", b, nil}} {
		e := locker.NewElection(c.l, name, locker.WithTTL(30*time.Second))
		lead, err := e.Campaign(ctx, c.value)
		if err != nil {
			t.Fatalf("%s: Campaign: %v", c.who, err)
		}
		ldr, err := e.Leader(ctx)
		want := locker.Leader{Value: c.value, Term: fence(t, lead), Termed: true, Token: lead.Token()}
		if err != nil || !bytes.Equal(ldr.Value, want.Value) || ldr.Term != want.Term || !ldr.Termed || ldr.Token != want.Token {
			t.Errorf("%s: Leader = %+v, %v; want %+v", c.who, ldr, err, want)
		}
		await(want, c.who+" leads")
		want.Value = []byte(c.who + ", proclaimed")
		if err := e.Proclaim(ctx, want.Value); err != nil {
			t.Fatal(err)
		}
		await(want, c.who+" proclaimed")
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
