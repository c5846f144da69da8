package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// TestSweep: a Locker deletes, every sweep_interval, the rows of locks and
// holds that lapsed more than a second ago; live rows stay, and so do
// rows that lapsed long ago and were taken over since, while the sweeps
// run.
func TestSweep(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	base := withParams(t, raw, "schema", s)
	// The schema is made, and the rows put in, before the sweeping
	// Locker opens.
	plain := openLocker(t, base)
	q := pgx.Identifier{s}.Sanitize()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// putLapsed puts a mutex's row, or a read lock's family row and one
	// hold, that lapsed long ago.
	putLapsed := func(key string, shared bool) {
		t.Helper()
		if !shared {
			exec(`INSERT INTO `+q+`.locks (key, token, expires_at) VALUES ($1, 'lapsed', clock_timestamp() - interval '1 hour')`, []byte(key))
			return
		}
		exec(`INSERT INTO `+q+`.locks (key, token, kind, expires_at) VALUES ($1, '', 1, clock_timestamp() - interval '1 hour')`, []byte(key))
		exec(`INSERT INTO `+q+`.holds (key, token, weight, fence, expires_at) VALUES ($1, 'lapsed', 1, nextval('`+q+`.fences'), clock_timestamp() - interval '1 hour')`, []byte(key))
	}
	prefix := uniqueKey(t)
	lapsed := []string{prefix + "/lapsed-mutex", prefix + "/lapsed-shared"}
	putLapsed(lapsed[0], false)
	putLapsed(lapsed[1], true)
	// A hold that lapsed beside a live one: the hold goes, the family
	// row stays.
	live, err := plain.Acquire(ctx, prefix+"/live-shared", locker.Shared(), locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO `+q+`.holds (key, token, weight, fence, expires_at) VALUES ($1, 'lapsed', 1, nextval('`+q+`.fences'), clock_timestamp() - interval '1 hour')`, []byte(live.Key()))
	liveMutex, err := plain.Acquire(ctx, prefix+"/live-mutex", locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Keys that lapsed long ago, to be taken over while the sweeps run.
	const n = 100
	var takeover []string
	for i := range n {
		k := fmt.Sprintf("%s/takeover-%d", prefix, i)
		putLapsed(k, i%2 == 1)
		takeover = append(takeover, k)
	}

	sweeper := openLocker(t, withParams(t, base, "sweep_interval", "100ms"))
	testenv.WaitFor(t, 10*time.Second, "the sweep to delete rows that lapsed long ago", func() bool {
		for _, k := range lapsed {
			if !readTables(t, admin, s, k).empty() {
				return false
			}
		}
		return true
	})
	// Take the lapsed keys over, half of them through the sweeping
	// Locker, as mutexes and read locks by turns.
	held := make([]locker.Lock, n)
	var wg sync.WaitGroup
	for i, k := range takeover {
		wg.Go(func() {
			l := plain
			if i%4 < 2 {
				l = sweeper
			}
			var opts []locker.Option
			if i%3 == 0 {
				opts = append(opts, locker.Shared())
			}
			lk, err := l.Acquire(ctx, k, append(opts, locker.WithTTL(time.Minute))...)
			if err != nil {
				t.Errorf("Acquire of lapsed key %d: %v", i, err)
				return
			}
			held[i] = lk
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Two sweeps at least have run since (each deletes a marker).
	for range 2 {
		marker := uniqueKey(t)
		putLapsed(marker, false)
		testenv.WaitFor(t, 10*time.Second, "the sweep to delete a marker row", func() bool {
			return readTables(t, admin, s, marker).empty()
		})
	}
	for i, lk := range held {
		tb := readTables(t, admin, s, lk.Key())
		if !tb.live() {
			t.Errorf("taken-over key %d after the sweeps: %v, want its holder's rows", i, tb)
		}
		if err := lk.Refresh(ctx, time.Minute); err != nil {
			t.Errorf("Refresh of taken-over key %d after the sweeps: %v", i, err)
		}
	}
	if tb := readTables(t, admin, s, live.Key()); len(tb.locks) != 1 || len(tb.holds) != 1 || tb.holds[0].token != live.Token() {
		t.Errorf("live read lock beside a lapsed hold after the sweeps: %v, want its family row and its own hold alone", tb)
	}
	if tb := readTables(t, admin, s, liveMutex.Key()); len(tb.locks) != 1 || tb.locks[0].token != liveMutex.Token() {
		t.Errorf("live mutex after the sweeps: %v, want its row", tb)
	}
	for _, lk := range append(held, live, liveMutex) {
		if err := lk.Release(ctx); err != nil {
			t.Errorf("Release after the sweeps: %v", err)
		}
	}
}
