package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// kindDeployment is a deployment the tests of shared and permit holds run
// on: one server through either client library, and a Cluster.
type kindDeployment struct {
	name, url string
	// raw reads the server keys directly.
	raw goredis.UniversalClient
}

func kindDeployments(t *testing.T) []kindDeployment {
	t.Helper()
	single := testenv.Get(t, testenv.RedisURL)
	cluster := testenv.Get(t, testenv.RedisClusterURL)
	sc := goredis.NewClient(&goredis.Options{Addr: hostOf(t, single)})
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(hostOf(t, cluster), ",")})
	t.Cleanup(func() {
		sc.Close()
		cc.Close()
	})
	return []kindDeployment{
		{"go-redis", single, sc},
		{"redigo", single + "?client=redigo", sc},
		{"cluster", cluster, cc},
	}
}

// eachDeployment runs f on every kindDeployment, in parallel, with a key
// of its own.
func eachDeployment(t *testing.T, f func(t *testing.T, d kindDeployment, key string)) {
	for _, d := range kindDeployments(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			f(t, d, fmt.Sprintf("%s/%s/%d", t.Name(), d.name, time.Now().UnixNano()))
		})
	}
}

// openLocker opens a Locker on raw, closed when the test ends.
func openLocker(t *testing.T, raw string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// tryAcquire takes key or fails the test.
func tryAcquire(t *testing.T, l locker.Locker, key string, opts ...locker.Option) locker.Lock {
	t.Helper()
	lk, err := l.TryAcquire(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	t.Cleanup(func() { lk.Release(context.Background()) })
	return lk
}

// wantBusy checks that TryAcquire of key is refused as busy, not as a
// mismatch.
func wantBusy(t *testing.T, l locker.Locker, key, why string, opts ...locker.Option) {
	t.Helper()
	lk, err := l.TryAcquire(context.Background(), key, opts...)
	if err == nil {
		lk.Release(context.Background())
		t.Fatalf("TryAcquire while %s succeeded", why)
	}
	if !errors.Is(err, locker.ErrNotAcquired) || errors.Is(err, locker.ErrKindMismatch) {
		t.Fatalf("TryAcquire while %s: %v, want ErrNotAcquired", why, err)
	}
}

// mustRelease releases lk or fails the test.
func mustRelease(t *testing.T, lk locker.Lock) {
	t.Helper()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// fence returns lk's fence or fails the test.
func fence(t *testing.T, lk locker.Lock) uint64 {
	t.Helper()
	f, ok := lk.Fence()
	if !ok {
		t.Fatal("Fence() = false on a fencing backend")
	}
	return f
}

// acquisition is an Acquire running on a goroutine of its own.
type acquisition struct {
	done chan struct{}
	lk   locker.Lock
	err  error
}

// startAcquire calls Acquire on a goroutine of its own, bounded by a
// minute; the test's end waits for it and releases what it got.
func startAcquire(t *testing.T, l locker.Locker, key string, opts ...locker.Option) *acquisition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	a := &acquisition{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.lk, a.err = l.Acquire(ctx, key, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		<-a.done
		if a.err == nil {
			a.lk.Release(context.Background())
		}
	})
	return a
}

// wait returns the Acquire's lock, or fails the test.
func (a *acquisition) wait(t *testing.T, what string) locker.Lock {
	t.Helper()
	<-a.done
	if a.err != nil {
		t.Fatalf("%s: %v", what, a.err)
	}
	return a.lk
}

// holds inspects key through l and returns its holders.
func holds(t *testing.T, l locker.Locker, key string) []backend.Hold {
	t.Helper()
	h, err := locker.Inspect(context.Background(), l, key)
	if err != nil {
		t.Fatal(err)
	}
	return h.Holds
}

// TestReadersTogetherWriterAlone: shared holds coexist, with fences in
// grant order; a writer is refused while any reader holds the key and
// gets it, woken by the last reader's release notice (long before their
// TTL), with a fence above theirs; a reader is refused while it holds.
func TestReadersTogetherWriterAlone(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		r1l, r2l, wl, other := openLocker(t, d.url), openLocker(t, d.url), openLocker(t, d.url), openLocker(t, d.url)
		ttl := locker.WithTTL(time.Minute)
		r1 := tryAcquire(t, r1l, key, locker.Shared(), ttl)
		r2 := tryAcquire(t, r2l, key, locker.Shared(), ttl)
		if f1, f2 := fence(t, r1), fence(t, r2); f2 <= f1 {
			t.Errorf("fences of two shared holds in grant order: %d then %d, want increasing", f1, f2)
		}
		hs := holds(t, other, key)
		if len(hs) != 2 || hs[0].Token != r1.Token() || hs[1].Token != r2.Token() || hs[0].Kind != backend.Shared || hs[1].Kind != backend.Shared {
			t.Fatalf("Inspect: holds %+v, want the two shared holders in grant order", hs)
		}
		wantBusy(t, wl, key, "two readers hold the key")

		w := startAcquire(t, wl, key, ttl)
		mustRelease(t, r1)
		if hs := holds(t, other, key); len(hs) != 1 || hs[0].Token != r2.Token() {
			t.Fatalf("Inspect after one reader left: holds %+v, want the other reader alone", hs)
		}
		wantBusy(t, other, key, "one reader holds the key")
		mustRelease(t, r2)
		wlk := w.wait(t, "the writer once the readers left (their TTL a minute away)")
		if f := fence(t, wlk); f <= fence(t, r2) {
			t.Errorf("the writer's fence %d, after readers up to %d: want larger", f, fence(t, r2))
		}
		wantBusy(t, other, key, "a writer holds the key", locker.Shared())
		if hs := holds(t, other, key); len(hs) != 1 || hs[0].Kind != backend.Exclusive || hs[0].Token != wlk.Token() {
			t.Errorf("Inspect of the writer's key: holds %+v, want the writer alone", hs)
		}
	})
}

// TestSemaphoreWeights: holds take their weight of a semaphore's limit; a
// request that does not fit waits, while smaller ones that fit are let
// in (no queue); Inspect lists the holders with their weights.
func TestSemaphoreWeights(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		l1, l2, l3 := openLocker(t, d.url), openLocker(t, d.url), openLocker(t, d.url)
		sem, ttl := locker.Limit(3), locker.WithTTL(time.Minute)
		a := tryAcquire(t, l1, key, sem, locker.Weight(2), ttl)
		b := tryAcquire(t, l2, key, sem, ttl)
		wantBusy(t, l3, key, "2 + 1 of 3 permits are held", sem)
		hs := holds(t, l3, key)
		if len(hs) != 2 {
			t.Fatalf("Inspect: holds %+v, want two", hs)
		}
		for i, want := range []struct {
			lk     locker.Lock
			weight int
		}{{a, 2}, {b, 1}} {
			h := hs[i]
			if h.Kind != backend.Permit || h.Limit != 3 || h.Weight != want.weight || h.Token != want.lk.Token() ||
				!h.Fenced || h.Fence != fence(t, want.lk) || !h.TTLKnown || h.TTL <= 0 || h.TTL > time.Minute {
				t.Errorf("Inspect: hold %d = %+v, want a permit of weight %d of 3, token %s, fence %d, TTL in (0, 1m]",
					i, h, want.weight, want.lk.Token(), fence(t, want.lk))
			}
		}

		c := startAcquire(t, l3, key, sem, locker.Weight(2), ttl)
		mustRelease(t, b)
		// c does not fit beside a; a permit of weight 1 does.
		d1 := tryAcquire(t, l2, key, sem, ttl)
		mustRelease(t, d1)
		mustRelease(t, a)
		clk := c.wait(t, "a request of weight 2 once a left")
		e := tryAcquire(t, l1, key, sem, ttl)
		wantBusy(t, l2, key, "2 + 1 of 3 permits are held again", sem)
		if fence(t, e) <= fence(t, clk) {
			t.Errorf("fences %d then %d in grant order, want increasing", fence(t, clk), fence(t, e))
		}
	})
}

// TestKindMismatch: a request of another family than the key's holders
// fails with ErrKindMismatch, a *backend.Mismatch naming both, at once
// (Acquire does not wait); a read/write lock's two kinds only make each
// other wait; once the holders are gone the key takes any family.
func TestKindMismatch(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		holder, l := openLocker(t, d.url), openLocker(t, d.url)
		// A Locker that mints fences with its acquisitions: its
		// exclusive requests go through the acquire script.
		fenced := openLocker(t, d.url)
		fence(t, tryAcquire(t, fenced, key+"/other"))
		ttl := locker.WithTTL(time.Minute)
		for i, tc := range []struct {
			name      string
			held, req []locker.Option
			want      backend.Mismatch
			l         locker.Locker
		}{
			{"permit on an exclusive holder", nil, []locker.Option{locker.Limit(2)},
				backend.Mismatch{HeldKind: backend.Exclusive, Kind: backend.Permit, Limit: 2}, l},
			{"permit on shared holders", []locker.Option{locker.Shared()}, []locker.Option{locker.Limit(2)},
				backend.Mismatch{HeldKind: backend.Shared, Kind: backend.Permit, Limit: 2}, l},
			{"shared on a semaphore", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Shared()},
				backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 2, Kind: backend.Shared}, l},
			{"exclusive on a semaphore", []locker.Option{locker.Limit(2)}, nil,
				backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 2, Kind: backend.Exclusive}, l},
			{"exclusive on a semaphore, fence minted", []locker.Option{locker.Limit(2)}, nil,
				backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 2, Kind: backend.Exclusive}, fenced},
			{"another limit", []locker.Option{locker.Limit(2)}, []locker.Option{locker.Limit(3)},
				backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 2, Kind: backend.Permit, Limit: 3}, l},
		} {
			k := fmt.Sprintf("%s/%d", key, i)
			lk := tryAcquire(t, holder, k, append(tc.held, ttl)...)
			for _, op := range []string{"TryAcquire", "Acquire"} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				var err error
				if op == "TryAcquire" {
					_, err = tc.l.TryAcquire(ctx, k, tc.req...)
				} else {
					_, err = tc.l.Acquire(ctx, k, tc.req...)
				}
				cancel()
				var m *backend.Mismatch
				if !errors.Is(err, locker.ErrKindMismatch) || !errors.As(err, &m) || *m != tc.want {
					t.Errorf("%s: %s = %v, want the mismatch %+v", tc.name, op, err, tc.want)
				}
			}
			mustRelease(t, lk)
			// Free again: the family of the refused request is welcome.
			mustRelease(t, tryAcquire(t, tc.l, k, tc.req...))
		}
		k := key + "/rw"
		w := tryAcquire(t, holder, k, ttl)
		wantBusy(t, l, k, "an exclusive holder holds the key", locker.Shared())
		mustRelease(t, w)
		tryAcquire(t, holder, k, locker.Shared(), ttl)
		wantBusy(t, l, k, "a shared holder holds the key")
		wantBusy(t, fenced, k, "a shared holder holds the key")
	})
}

// TestCrashedSharedHolderFreed: a shared holder cut off without releasing
// keeps the key until its hold expires on the server, and not longer: a
// writer waiting for it gets the key after the holder's validity ended
// (the server keeps the hold at least that long) and well within its TTL
// and the backend's slack.
func TestCrashedSharedHolderFreed(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		ctx := context.Background()
		c, err := conformance.URLHarness(d.url).NewClient(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Cleanup()
		defer c.Locker.Close()
		const ttl = time.Second
		lk, err := c.Locker.TryAcquire(ctx, key, locker.Shared(), locker.WithTTL(ttl), locker.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		until := lk.Until()
		c.Crash()
		crashed := time.Now()
		w := openLocker(t, d.url)
		wantBusy(t, w, key, "the crashed reader's hold has not expired")
		wlk := startAcquire(t, w, key).wait(t, "the writer after the reader crashed")
		got := time.Now()
		if got.Before(until) {
			t.Errorf("the writer got the key at %v, before the crashed reader's validity ended at %v", got, until)
		}
		if took := got.Sub(crashed); took > 10*ttl {
			t.Errorf("the writer got the key %v after the crash, with a TTL of %v", took, ttl)
		}
		mustRelease(t, wlk)
	})
}

// TestRetriedHoldFindsItsHold: a shared or permit acquisition sent again
// with its token (its first reply lost) finds its hold and its fence,
// even on a full semaphore, where another token is refused with the
// holder's remaining TTL.
func TestRetriedHoldFindsItsHold(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, testenv.Get(t, testenv.RedisURL))})
	defer c.Close()
	ctx := context.Background()
	for _, req := range []backend.Request{
		{Kind: backend.Shared},
		{Kind: backend.Permit, Limit: 1, Weight: 1},
	} {
		req.Key = fmt.Sprintf("retried-hold/%v/%d", req.Kind, time.Now().UnixNano())
		req.Token, req.TTL = "tok", time.Minute
		first, err := redis.TryAcquireRequest(c, req)
		if err != nil || !first.Fenced {
			t.Fatalf("%v: the first try: %+v, %v", req.Kind, first, err)
		}
		again, err := redis.TryAcquireRequest(c, req)
		if err != nil || again.Fence != first.Fence {
			t.Errorf("%v: the same request again = %+v, %v; want its hold, with fence %d", req.Kind, again, err, first.Fence)
		}
		if req.Kind == backend.Permit {
			req.Token = "another"
			_, err := redis.TryAcquireRequest(c, req)
			var busy *backend.Busy
			if !errors.As(err, &busy) || busy.Remaining <= 0 || busy.Remaining > time.Minute {
				t.Errorf("another token on the full semaphore: %v, want busy for the holder's TTL, in (0, 1m]", err)
			}
		}
		if err := first.Held.Release(ctx); err != nil {
			t.Errorf("%v: release: %v", req.Kind, err)
		}
		if n, _ := c.Exists(ctx, redis.LockKey(req.Key)).Result(); n != 0 {
			t.Errorf("%v: the key after the only holder's release exists", req.Kind)
		}
	}
}

// TestReleaseExpiredHold: the release of a shared hold that expired
// returns ErrNotHeld and leaves the other holder's intact.
func TestReleaseExpiredHold(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		l1, l2 := openLocker(t, d.url), openLocker(t, d.url)
		a := tryAcquire(t, l1, key, locker.Shared(), locker.WithTTL(200*time.Millisecond), locker.WithAutoRefresh(false))
		b := tryAcquire(t, l2, key, locker.Shared(), locker.WithTTL(time.Minute))
		testenv.WaitFor(t, 30*time.Second, "the short hold to expire on the server", func() bool { return len(holds(t, l2, key)) == 1 })
		if err := a.Release(context.Background()); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("Release of an expired shared hold: %v, want ErrNotHeld", err)
		}
		hs := holds(t, l2, key)
		if len(hs) != 1 || hs[0].Token != b.Token() || hs[0].TTL < 50*time.Second {
			t.Errorf("holds after the expired release: %+v, want b's, about a minute left", hs)
		}
		if ttl, err := b.TTL(context.Background()); err != nil || ttl < 50*time.Second {
			t.Errorf("b's TTL = %v, %v; want about a minute", ttl, err)
		}
		mustRelease(t, b)
	})
}

// TestRefreshKeepsOthers: a shared holder's refresh to a shorter TTL
// shortens neither another holder's hold nor the key's life: once its own
// hold lapsed, the other holds on, for its own TTL.
func TestRefreshKeepsOthers(t *testing.T) {
	eachDeployment(t, func(t *testing.T, d kindDeployment, key string) {
		ctx := context.Background()
		l1, l2 := openLocker(t, d.url), openLocker(t, d.url)
		opts := []locker.Option{locker.Shared(), locker.WithTTL(time.Minute), locker.WithAutoRefresh(false)}
		a := tryAcquire(t, l1, key, opts...)
		b := tryAcquire(t, l2, key, opts...)
		if err := a.Refresh(ctx, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		keyTTL := func() time.Duration {
			ttl, err := d.raw.PTTL(ctx, redis.LockKey(key)).Result()
			if err != nil {
				t.Fatal(err)
			}
			return ttl
		}
		if ttl := keyTTL(); ttl < 50*time.Second {
			t.Errorf("the key's TTL after one holder's refresh to 200ms: %v, want the other's, about a minute", ttl)
		}
		testenv.WaitFor(t, 30*time.Second, "the refreshed hold to lapse", func() bool { return len(holds(t, l2, key)) == 1 })
		if ttl, err := b.TTL(ctx); err != nil || ttl < 50*time.Second {
			t.Errorf("the other holder's TTL after the first lapsed: %v, %v; want about a minute", ttl, err)
		}
		if ttl := keyTTL(); ttl < 50*time.Second {
			t.Errorf("the key's TTL after the first holder lapsed: %v, want about a minute", ttl)
		}
		if err := b.Refresh(ctx, time.Minute); err != nil {
			t.Errorf("the other holder's refresh: %v", err)
		}
		if err := a.Refresh(ctx, time.Minute); !errors.Is(err, locker.ErrNotHeld) {
			t.Errorf("the lapsed holder's refresh: %v, want ErrNotHeld", err)
		}
	})
}

// TestWaitingWriterKeepsReadersOut: there is no queue, but a writer that
// waits behind a reader marks the key, so that a new reader is refused
// while it waits (a stream of overlapping readers would starve it
// otherwise), and the writer gets the key as soon as the reader holding
// it leaves. Once the writer has had the key, readers get in again.
func TestWaitingWriterKeepsReadersOut(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, raw)})
	defer c.Close()
	ctx := context.Background()
	key := fmt.Sprintf("writer-mark/%d", time.Now().UnixNano())
	channel := redis.LockKey(key) + ":released"
	readers, wl := openLocker(t, raw), openLocker(t, raw)
	opts := []locker.Option{locker.Shared(), locker.WithTTL(time.Minute)}
	r := tryAcquire(t, readers, key, opts...)
	w := startAcquire(t, wl, key, locker.WithTTL(time.Minute))
	// The writer subscribes after its first busy attempt, which marked
	// the key.
	testenv.WaitFor(t, 30*time.Second, "the writer to wait for release notices", func() bool {
		return c.PubSubNumSub(ctx, channel).Val()[channel] == 1
	})
	if lk, err := readers.TryAcquire(ctx, key, opts...); !errors.Is(err, locker.ErrNotAcquired) {
		if lk != nil {
			mustRelease(t, lk)
		}
		t.Fatalf("a new reader while the writer waits: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, r)
	mustRelease(t, w.wait(t, "the writer once the reader left"))
	mustRelease(t, tryAcquire(t, readers, key, opts...))
}
