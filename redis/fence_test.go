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
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// counter returns what key's fence counter holds: "<fence> <token>", or ""
// when there is none.
func counter(t *testing.T, c *goredis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), redis.LockKey(key)+":fence").Result()
	if errors.Is(err, goredis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestFenceOnDemand: a Locker mints no fence until one of its locks is
// asked for it; that first Fence mints one, above every earlier holder's,
// and from then on the Locker mints the fence with each acquisition.
func TestFenceOnDemand(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, testenv.Get(t, testenv.RedisURL))})
	defer c.Close()
	ctx := context.Background()
	key := fmt.Sprintf("on-demand/%d", time.Now().UnixNano())
	other, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	first, err := other.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	f1, ok := first.Fence()
	if !ok {
		t.Fatal("Fence() = false on Redis")
	}
	first.Release(ctx)

	l, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := counter(t, c, key); !strings.HasSuffix(got, " "+first.Token()) {
		t.Fatalf("the counter after an acquisition no fence was asked of: %q, want the last holder's, %d %s", got, f1, first.Token())
	}
	h, err := locker.Inspect(ctx, l, key)
	if err != nil || !h.Held || h.Fenced {
		t.Fatalf("Inspect of a holder that has not minted: %+v, %v; want held, no fence", h, err)
	}
	f2, ok := lk.Fence()
	if !ok || f2 <= f1 {
		t.Fatalf("the first Fence() = %d, %v; want a fence above the last holder's %d", f2, ok, f1)
	}
	if again, _ := lk.Fence(); again != f2 {
		t.Fatalf("a second Fence() = %d, want %d again", again, f2)
	}
	if got := counter(t, c, key); got != fmt.Sprintf("%d %s", f2, lk.Token()) {
		t.Fatalf("the counter after Fence(): %q, want %d %s", got, f2, lk.Token())
	}
	lk.Release(ctx)

	// Asked once, this Locker mints with the acquisition.
	lk, err = l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	got := counter(t, c, key)
	if !strings.HasSuffix(got, " "+lk.Token()) {
		t.Fatalf("the counter right after an acquisition of a Locker asked for fences: %q, want this lock's fence", got)
	}
	if f3, ok := lk.Fence(); !ok || f3 <= f2 || got != fmt.Sprintf("%d %s", f3, lk.Token()) {
		t.Fatalf("Fence() = %d, %v with the counter %q; want the fence minted with the acquisition, above %d", f3, ok, got, f2)
	}
}

// TestFenceAfterLoss: a lock whose fence was not asked for before it was
// lost gets none: minting one then would hand a stale holder a fence above
// its successor's.
func TestFenceAfterLoss(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, testenv.Get(t, testenv.RedisURL))})
	defer c.Close()
	ctx := context.Background()
	l, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	key := fmt.Sprintf("fence-after-loss/%d", time.Now().UnixNano())

	// Taken by someone else behind the holder's back (as after it paused
	// past its TTL): the mint finds the key not ours, and the lock lost.
	lk, err := l.Acquire(ctx, key, locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.ForceRelease(ctx, b, key); err != nil {
		t.Fatal(err)
	}
	next, err := b.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	fNext, _ := next.Fence()
	if f, ok := lk.Fence(); ok {
		t.Fatalf("Fence() of a lock taken over = %d, true (its successor's is %d); want false", f, fNext)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Err() after the mint found the key another's: %v, want ErrNotHeld", err)
	}

	// Expired here: no round trip, no fence. (A fresh Locker: l, asked
	// for a fence above, now mints with each acquisition.)
	fresh, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	lk2, err := fresh.Acquire(ctx, key+"/2", locker.WithTTL(200*time.Millisecond), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	<-lk2.Lost()
	if f, ok := lk2.Fence(); ok {
		t.Fatalf("Fence() of an expired lock = %d, true; want false", f)
	}
}

// TestRetriedSetFindsItsLock: an acquisition retried after a lost reply
// (the client library sends a command again when its connection broke
// after the server ran it) finds its own token in the key and holds the
// lock, rather than waiting for itself until the TTL runs out.
func TestRetriedSetFindsItsLock(t *testing.T) {
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, testenv.Get(t, testenv.RedisURL))})
	defer c.Close()
	ctx := context.Background()
	key := fmt.Sprintf("retried-set/%d", time.Now().UnixNano())
	// The first try's SET NX PX, whose reply was lost.
	if err := c.SetArgs(ctx, redis.LockKey(key), "tok", goredis.SetArgs{Mode: "NX", TTL: time.Minute}).Err(); err != nil {
		t.Fatal(err)
	}
	acq, err := redis.TryAcquireToken(c, key, "tok", time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire retried with the holder's token: %v, want the lock", err)
	}
	if err := acq.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := redis.TryAcquireToken(c, key, "tok", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err = redis.TryAcquireToken(c, key, "another", time.Minute)
	var busy *backend.Busy
	if !errors.As(err, &busy) || !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire with another token: %v, want a *backend.Busy", err)
	}
	if busy.Remaining <= 0 || busy.Remaining > time.Minute {
		t.Fatalf("Busy.Remaining = %v, want the holder's TTL, in (0, 1m]", busy.Remaining)
	}
	c.Del(ctx, redis.LockKey(key))
}
