package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// listen returns a connection that LISTENs on schema's channel, closed
// when the test ends.
func listen(t testing.TB, raw, schema string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if _, err := c.Exec(ctx, "LISTEN "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return c
}

// nextNotice returns the payload of c's next notice.
func nextNotice(t testing.TB, c *pgx.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.WaitForNotification(ctx)
	if err != nil {
		t.Fatalf("waiting for a notice: %v", err)
	}
	return n.Payload
}

// wantNextNotice checks that the next notice on c is want: notices on a
// channel arrive in the order their transactions committed, so one sent
// after an operation comes after any the operation sent.
func wantNextNotice(t testing.TB, c *pgx.Conn, want, after string) {
	t.Helper()
	if got := nextNotice(t, c); got != want {
		t.Fatalf("the first notice after %s is %q, want %q", after, got, want)
	}
}

// sentinel sends payload on channel from a connection of db.
func sentinel(t testing.TB, db *pgxpool.Pool, channel, payload string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
		t.Fatal(err)
	}
}

// TestNotifyOnlyWhenWaited: a release notifies the schema's channel, with
// md5 of the key, only when a request found the key taken since it was
// granted: a release nobody waited for sends nothing (the sentinel sent
// after it is the first notice), one after a failed TryAcquire sends the
// key's hash, once.
func TestNotifyOnlyWhenWaited(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	l, other := openLocker(t, u), openLocker(t, u)
	c := listen(t, raw, s)
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			key := uniqueKey(t)
			lk, err := l.Acquire(ctx, key, k.hold...)
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Refresh(ctx, time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			sentinel(t, admin, s, "after the release nobody waited for")
			wantNextNotice(t, c, "after the release nobody waited for", "a release nobody waited for")

			lk, err = l.Acquire(ctx, key, k.hold...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := other.TryAcquire(ctx, key, k.conflict...); !errors.Is(err, locker.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wantNextNotice(t, c, keyHash(key), "a release after a failed TryAcquire")
			sentinel(t, admin, s, "after the release waited for")
			wantNextNotice(t, c, "after the release waited for", "the release's own notice")
		})
	}
}

// TestReleaseWakesWaiter: a blocked Acquire gets the key as soon as the
// holder releases it, woken by the release's notice: the holder's TTL is
// 30 s and the waiter gives up after 10, so a waiter that waited for the
// expiry fails. The schema's name has capitals, which the channel's
// LISTEN must quote as pg_notify names it.
func TestReleaseWakesWaiter(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	for _, upper := range []bool{false, true} {
		name := map[bool]string{false: "lower", true: "capitals"}[upper]
		t.Run(name, func(t *testing.T) {
			s := freshSchema(t, admin, upper)
			u := withParams(t, raw, "schema", s)
			holder, waiter := openLocker(t, u), openLocker(t, u)
			for _, k := range kinds {
				t.Run(k.name, func(t *testing.T) {
					key := uniqueKey(t)
					lk, err := holder.Acquire(context.Background(), key, with(k.hold, locker.WithTTL(30*time.Second))...)
					if err != nil {
						t.Fatal(err)
					}
					w := startWaiter(t, waiter, key, k.conflict)
					waitWaitedFor(t, admin, s, key)
					if err := lk.Release(context.Background()); err != nil {
						t.Fatal(err)
					}
					w.wait(t)
				})
			}
		})
	}
}

// A waiter is an Acquire in the background that gives up after 10 s.
type waiter struct {
	done chan struct{}
	lk   locker.Lock
	err  error
}

func startWaiter(t testing.TB, l locker.Locker, key string, opts []locker.Option) *waiter {
	w := &waiter{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	go func() {
		defer close(w.done)
		defer cancel()
		w.lk, w.err = l.Acquire(ctx, key, with(opts, locker.WithTTL(30*time.Second))...)
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
		if w.lk != nil {
			w.lk.Release(context.Background())
		}
	})
	return w
}

// wait checks that the waiter got the key.
func (w *waiter) wait(t testing.TB) {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatalf("the waiter, whose holder released the key: %v (it waits for the holder's 30 s TTL, not for the release's notice?)", w.err)
	}
}

// TestListenerReconnects: when the connection a Locker listens on
// breaks (the server ends its backend), the Locker dials it again, and
// its waiters still get the key at the release: the release's notice if
// the connection listens again by then ("after-relisten"), or the look
// every waiter takes once it does, if the notice was sent while it was
// down ("during-outage").
func TestListenerReconnects(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	holder, waiterL := openLocker(t, u), openLocker(t, u)
	ctx := context.Background()
	// The listening connection of waiterL: the only one on the schema's
	// channel, as holder never waits.
	listener := func() int32 {
		var pid int32
		err := admin.QueryRow(ctx, "SELECT pid FROM pg_stat_activity WHERE query = $1 AND state = 'idle'",
			"LISTEN "+pgx.Identifier{s}.Sanitize()).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	for _, relisten := range []bool{true, false} {
		name := map[bool]string{true: "after-relisten", false: "during-outage"}[relisten]
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			lk, err := holder.Acquire(ctx, key, locker.WithTTL(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			w := startWaiter(t, waiterL, key, nil)
			waitWaitedFor(t, admin, s, key)
			var old int32
			testenv.WaitFor(t, 10*time.Second, "the waiter's Locker to listen", func() bool { old = listener(); return old != 0 })
			var ok bool
			if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", old).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d): %v, %v", old, ok, err)
			}
			if relisten {
				testenv.WaitFor(t, 10*time.Second, "the Locker to listen again", func() bool {
					pid := listener()
					return pid != 0 && pid != old
				})
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w.wait(t)
		})
	}
}
