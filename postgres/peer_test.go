package postgres_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// TestLapsedLeaseTakenOver: a hold whose expiry passed on the server's
// clock is free, whatever its holder believes: another client takes the
// key over; the old holder's Refresh and Release then return ErrNotHeld
// and leave the new holder's lock as it is.
func TestLapsedLeaseTakenOver(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	a, b, c := openLocker(t, u), openLocker(t, u), openLocker(t, u)
	q := pgx.Identifier{s}.Sanitize()
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			key := uniqueKey(t)
			lkA, err := a.Acquire(ctx, key, with(k.hold, locker.WithTTL(time.Minute))...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.TryAcquire(ctx, key, k.conflict...); !errors.Is(err, locker.ErrNotAcquired) {
				t.Fatalf("TryAcquire of a key held for a minute: %v, want ErrNotAcquired", err)
			}
			// The lease lapses on the server's clock; A's own clock says
			// it holds the key for a minute yet.
			if _, err := admin.Exec(ctx, `UPDATE `+q+`.locks SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE key = $1;`, []byte(key)); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.Exec(ctx, `UPDATE `+q+`.holds SET expires_at = clock_timestamp() - interval '1 millisecond' WHERE key = $1`, []byte(key)); err != nil {
				t.Fatal(err)
			}
			lkB, err := b.TryAcquire(ctx, key, with(k.conflict, locker.WithTTL(time.Minute))...)
			if err != nil {
				t.Fatalf("TryAcquire of a key whose holder's lease lapsed: %v", err)
			}
			defer lkB.Release(ctx)
			if err := lkA.Refresh(ctx, time.Minute); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("the lapsed holder's Refresh: %v, want ErrNotHeld", err)
			}
			if err := lkA.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("the lapsed holder's Release: %v, want ErrNotHeld", err)
			}
			if !testenv.Closed(lkA.Lost()) || !errors.Is(lkA.Err(), locker.ErrNotHeld) {
				t.Errorf("the lapsed holder's Lost closed %v, Err %v; want closed, ErrNotHeld", testenv.Closed(lkA.Lost()), lkA.Err())
			}
			// B holds the key still, and its row says so.
			if _, err := c.TryAcquire(ctx, key, k.hold...); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("TryAcquire after the old holder's Release: %v, want ErrNotAcquired (B holds the key)", err)
			}
			h, err := locker.Inspect(ctx, c, key)
			if err != nil || !h.Held || h.Token != lkB.Token() || len(h.Holds) != 1 {
				t.Errorf("Inspect after the old holder's Release: %+v (%v), want B's hold alone", h, err)
			}
			if err := lkB.Refresh(ctx, time.Minute); err != nil {
				t.Errorf("the new holder's Refresh: %v", err)
			}
			if err := lkB.Release(ctx); err != nil {
				t.Errorf("the new holder's Release: %v", err)
			}
			// A lapsed hold whose holder learnt of its loss by a refresh
			// may stay until the sweep: it is free.
			if tb := readTables(t, admin, s, key); tb.live() || len(tb.locks) > 0 {
				t.Errorf("rows after every release: %v, want none but lapsed holds", tb)
			}
		})
	}
}

// TestCancelledWaitLeavesNoRow: an Acquire that waits for a held key and
// is cancelled leaves nothing in the tables once the holder releases.
func TestCancelledWaitLeavesNoRow(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	holder, waiter, next := openLocker(t, u), openLocker(t, u), openLocker(t, u)
	ctx := context.Background()
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			key := uniqueKey(t)
			lk, err := holder.Acquire(ctx, key, with(k.hold, locker.WithTTL(time.Minute))...)
			if err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				lk, err := waiter.Acquire(wctx, key, k.conflict...)
				if err == nil {
					lk.Release(ctx)
					err = errors.New("acquired a held key")
				}
				errc <- err
			}()
			waitWaitedFor(t, admin, s, key)
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled waiter: %v, want context.Canceled", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if tb := readTables(t, admin, s, key); !tb.empty() {
				t.Errorf("rows after the holder's release, its waiter cancelled: %v, want none", tb)
			}
			lk2, err := next.TryAcquire(ctx, key, k.conflict...)
			if err != nil {
				t.Fatalf("TryAcquire after the cancelled wait: %v", err)
			}
			if err := lk2.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// paths are the ways the driver takes a key: a mutex by its INSERT, a
// mutex with its fence by acquire_v2 (once a lock of the Locker was asked
// for its fence), a shared hold and a permit by acquire_v2.
var paths = []struct {
	name   string
	fenced bool
	opts   []locker.Option
}{
	{"mutex", false, nil},
	{"fenced-mutex", true, nil},
	{"shared", false, []locker.Option{locker.Shared()}},
	{"permit", false, []locker.Option{locker.Limit(2)}},
}

// askForFences makes l mint each exclusive hold's fence with its grant
// from now on, as it does once one of its locks was asked for its fence.
func askForFences(t testing.TB, l locker.Locker) {
	t.Helper()
	ctx := context.Background()
	lk, err := l.TryAcquire(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lk.Fence(); !ok {
		t.Fatal("Fence: none")
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestContextEndsOnTheWire: an acquire whose context ends while its
// statement waits on the server leaves no row once the statement is
// through. An administrator's transaction holds the key's row lock (the
// row of a lapsed holder, free to take over), so that the statement
// waits; the context ends; then the transaction commits, and the
// statement, unless it was stopped, takes the key over.
//
// pgx answers the end of a context by closing the connection after a
// cancel request, sent on a connection of its own, which stops the
// statement: "cancelled" commits once the statement has stopped. Where
// that request does not reach the server, or reaches it only after the
// row lock was released (here: new connections are refused from the
// moment the context ends; the pool has a second one open, which the
// driver's cleanup uses), the statement goes on, and the cleanup must
// still leave nothing behind: "cancel-lost" commits once the cleanup has
// either returned or waits for the row too, behind the statement.
func TestContextEndsOnTheWire(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	next := openLocker(t, withParams(t, raw, "schema", s))
	for _, cancelLost := range []bool{false, true} {
		variant := map[bool]string{false: "cancelled", true: "cancel-lost"}[cancelLost]
		for _, p := range paths {
			t.Run(variant+"/"+p.name, func(t *testing.T) {
				var refuse atomic.Bool
				pool := gatedPool(t, raw, 2, &refuse)
				l := newLocker(t, pool, &postgres.Options{Schema: s})
				if p.fenced {
					askForFences(t, l)
				}
				testContextEndsOnTheWire(t, admin, s, l, next, p.opts, cancelLost, &refuse)
			})
		}
	}
}

func testContextEndsOnTheWire(t *testing.T, admin *pgxpool.Pool, s string, l, next locker.Locker, opts []locker.Option, cancelLost bool, refuse *atomic.Bool) {
	ctx := context.Background()
	q := pgx.Identifier{s}.Sanitize()
	key := uniqueKey(t)
	if _, err := admin.Exec(ctx, `INSERT INTO `+q+`.locks (key, token, expires_at) VALUES ($1, 'lapsed', clock_timestamp() - interval '1 hour')`, []byte(key)); err != nil {
		t.Fatal(err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var txPID int32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM `+q+`.locks WHERE key = $1 FOR UPDATE`, []byte(key)).Scan(&txPID); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		lk, err := l.TryAcquire(actx, key, opts...)
		if err == nil {
			lk.Release(ctx)
			err = errors.New("acquired a key whose row is locked")
		}
		errc <- err
	}()
	// waiting returns the backends that wait for a lock pid holds or
	// waits for ahead of them.
	waiting := func(pid int32) []int32 {
		rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, pid)
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	var blocked int32
	testenv.WaitFor(t, 10*time.Second, "the acquire's statement to wait for the row lock", func() bool {
		pids := waiting(txPID)
		if len(pids) > 0 {
			blocked = pids[0]
		}
		return blocked != 0
	})
	active := func(pid int32) bool {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'`, pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	refuse.Store(cancelLost)
	cancel()
	var (
		returned bool
		aerr     error
	)
	ret := func() bool {
		if !returned {
			select {
			case aerr = <-errc:
				returned = true
			default:
			}
		}
		return returned
	}
	if cancelLost {
		testenv.WaitFor(t, 10*time.Second, "the cleanup to return or to wait for the row", func() bool {
			return ret() || len(waiting(blocked)) > 0
		})
	} else {
		testenv.WaitFor(t, 10*time.Second, "the cancel request to stop the statement", func() bool { return !active(blocked) })
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the acquire to return", ret)
	if !errors.Is(aerr, context.Canceled) {
		t.Fatalf("TryAcquire whose context ended on the wire: %v, want context.Canceled", aerr)
	}
	testenv.WaitFor(t, 10*time.Second, "the abandoned statement to be through", func() bool { return !active(blocked) })
	if tb := readTables(t, admin, s, key); tb.live() {
		t.Fatalf("rows after an acquire whose context ended on the wire: %v, want none live (TryAcquire returned %v)", tb, aerr)
	}
	lk, err := next.TryAcquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire after the abandoned acquire: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// gatedPool returns a pool on raw with n connections open, whose new
// connections are refused while refuse is set. Closed when the test
// ends.
func gatedPool(t testing.TB, raw string, n int32, refuse *atomic.Bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MinConns, cfg.MaxConns = n, n
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, errors.New("the test refuses new connections")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	testenv.WaitFor(t, 10*time.Second, "the pool to open its connections", func() bool { return pool.Stat().TotalConns() == n })
	return pool
}

// TestLostReply: an acquire the server applied but whose reply is lost
// (the connection breaks on the way back) leaves no row: the driver
// deletes what it may have taken, over a new connection, before it
// returns the error.
func TestLostReply(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	target := targetOf(t, raw)
	ctx := context.Background()
	next := openLocker(t, withParams(t, raw, "schema", s))
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			proxy := testenv.Proxy(t, target)
			// Connections go through the proxy until it cuts them; the
			// cleanup's new connection goes to the server directly, as
			// once a broken network is back.
			var via atomic.Value
			via.Store(proxy.Addr())
			cfg, err := pgxpool.ParseConfig(raw)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			cfg.ConnConfig.DialFunc = dialVia(func() string { return via.Load().(string) })
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			l := newLocker(t, pool, &postgres.Options{Schema: s})
			if p.fenced {
				askForFences(t, l)
			}
			// Each statement's first use on a connection prepares it, in
			// a round trip of its own: done before replies are held.
			warm, err := l.TryAcquire(ctx, uniqueKey(t), p.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if err := warm.Release(ctx); err != nil {
				t.Fatal(err)
			}
			key := uniqueKey(t)
			proxy.HoldReplies(true)
			defer proxy.HoldReplies(false)
			errc := make(chan error, 1)
			go func() {
				lk, err := l.TryAcquire(ctx, key, p.opts...)
				if err == nil {
					lk.Release(ctx)
					err = errors.New("acquired without the reply")
				}
				errc <- err
			}()
			testenv.WaitFor(t, 10*time.Second, "the server to apply the acquire", func() bool {
				tb := readTables(t, admin, s, key)
				return len(tb.holds) > 0 || (len(tb.locks) == 1 && tb.locks[0].token != "")
			})
			via.Store(target)
			proxy.Cut()
			err = <-errc
			if err == nil || errors.Is(err, locker.ErrNotAcquired) {
				t.Fatalf("TryAcquire whose reply was lost: %v, want the connection's error", err)
			}
			if strings.Contains(err.Error(), "cleanup") {
				t.Errorf("TryAcquire whose reply was lost: %v, want the cleanup to succeed", err)
			}
			if tb := readTables(t, admin, s, key); !tb.empty() {
				t.Errorf("rows after an acquire whose reply was lost: %v, want none", tb)
			}
			lk, err := next.TryAcquire(ctx, key, p.opts...)
			if err != nil {
				t.Fatalf("TryAcquire after the lost reply: %v", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
