package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// TestWriterNotStarved: a writer waiting behind a reader keeps new
// readers out (TryAcquire and Acquire alike), and gets the key when that
// reader leaves, though readers keep overlapping; once it has had the
// key, readers come in again. The readers are in other Lockers, as in
// processes of their own.
func TestWriterNotStarved(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	readers, writers := openLocker(t, u), openLocker(t, u)
	key := uniqueKey(t)
	ctx := context.Background()
	ttl := locker.WithTTL(30 * time.Second)

	held, err := readers.TryAcquire(ctx, key, ttl, locker.Shared())
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		w, err := writers.Acquire(wctx, key, ttl)
		if err == nil {
			err = w.Release(ctx)
		}
		granted <- err
	}()
	waitWaitedFor(t, admin, s, key)

	// Readers overlap: each new one comes before the last one leaves.
	for i := range 3 {
		next, err := readers.TryAcquire(ctx, key, ttl, locker.Shared())
		if err == nil {
			held.Release(ctx)
			held = next
			t.Fatalf("reader %d came in while a writer waited", i+2)
		}
		if !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("reader %d: %v, want ErrNotAcquired", i+2, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if r, err := readers.Acquire(rctx, key, ttl, locker.Shared()); err == nil {
		r.Release(ctx)
		t.Fatal("a waiting reader came in while a writer waited")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatalf("the writer: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the writer did not get the key within 15s of the last reader's release")
	}
	// The writer's wait ended with its grant: its mark went with it.
	r, err := readers.TryAcquire(ctx, key, ttl, locker.Shared())
	if err != nil {
		t.Fatalf("a reader after the writer's release: %v", err)
	}
	r.Release(ctx)
}

// TestWriterMarkEnds: a waiting writer's mark goes when its wait ends
// without the key, by a cancel (a reader waiting meanwhile gets in) or by
// Close; one that cannot remove it (cut off, as a crash would) leaves a
// mark that lapses by itself at the writer's TTL, not later; a
// TryAcquire leaves none.
func TestWriterMarkEnds(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	readers := openLocker(t, u)
	ctx := context.Background()
	long := locker.WithTTL(time.Minute)

	// wantReaderIn takes and releases a read lock within d.
	wantReaderIn := func(t *testing.T, key string, d time.Duration, after string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		r, err := readers.Acquire(rctx, key, long, locker.Shared())
		if err != nil {
			t.Fatalf("a reader %s: %v", after, err)
		}
		r.Release(ctx)
	}
	// waitingWriter takes key shared, starts a writer in w that waits for
	// it until wctx ends, and returns the read lock once the writer has
	// marked the key.
	waitingWriter := func(t *testing.T, w locker.Locker, wctx context.Context, key string, opts ...locker.Option) (locker.Lock, <-chan error) {
		t.Helper()
		held, err := readers.TryAcquire(ctx, key, long, locker.Shared())
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := w.Acquire(wctx, key, opts...)
			done <- err
		}()
		waitWaitedFor(t, admin, s, key)
		if _, err := readers.TryAcquire(ctx, key, long, locker.Shared()); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("a reader beside a waiting writer: %v, want ErrNotAcquired", err)
		}
		return held, done
	}

	t.Run("cancel", func(t *testing.T) {
		key := uniqueKey(t)
		wctx, cancel := context.WithCancel(ctx)
		held, done := waitingWriter(t, openLocker(t, u), wctx, key, long)
		defer held.Release(ctx)
		woken := make(chan error, 1)
		go func() {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			r, err := readers.Acquire(rctx, key, long, locker.Shared())
			if err == nil {
				r.Release(ctx)
			}
			woken <- err
		}()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled writer: %v", err)
		}
		if err := <-woken; err != nil {
			t.Fatalf("a reader waiting while the writer's wait was cancelled (its mark lives a minute): %v", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		key := uniqueKey(t)
		w, err := locker.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		held, done := waitingWriter(t, w, ctx, key, long)
		defer held.Release(ctx)
		w.Close()
		if err := <-done; !errors.Is(err, locker.ErrClosed) {
			t.Fatalf("the writer whose Locker closed: %v", err)
		}
		wantReaderIn(t, key, 10*time.Second, "after the waiting writer's Locker closed (its mark lives a minute)")
	})
	t.Run("crash", func(t *testing.T) {
		key := uniqueKey(t)
		proxy := testenv.Proxy(t, targetOf(t, raw))
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.DialFunc = dialVia(proxy.Addr)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		w := newLocker(t, pool, &postgres.Options{Schema: s})
		const ttl = 2 * time.Second
		wctx, cancel := context.WithCancel(ctx)
		held, done := waitingWriter(t, w, wctx, key, locker.WithTTL(ttl))
		defer held.Release(ctx)
		proxy.Cut() // the writer can no longer remove its mark
		cutAt := time.Now()
		cancel()
		<-done
		wantReaderIn(t, key, 10*time.Second, "after the cut-off writer's TTL")
		if since := time.Since(cutAt); since < ttl/4 {
			t.Errorf("a reader came in %v after the writer was cut off, before its mark could lapse", since)
		}
	})
	t.Run("try", func(t *testing.T) {
		key := uniqueKey(t)
		held, err := readers.TryAcquire(ctx, key, long, locker.Shared())
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		if _, err := openLocker(t, u).TryAcquire(ctx, key, long); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("a writer's TryAcquire beside a reader: %v", err)
		}
		r, err := readers.TryAcquire(ctx, key, long, locker.Shared())
		if err != nil {
			t.Fatalf("a reader after a writer's refused TryAcquire: %v", err)
		}
		r.Release(ctx)
	})
}
