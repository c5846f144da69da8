package postgres_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// The raw baselines' table: the Locker's table's shape (key, token,
// expiry), in a schema of its own.
const (
	benchRawSchema = "bench_raw"
	benchRawTable  = benchRawSchema + ".locks"
)

// benchRawTake and benchRawRelease are the raw lease pair: the least
// a lock held as a row with an expiry costs. The INSERT takes over a row
// whose lease lapsed (a free key never meets the conflict); the DELETE
// says whether the lease was still live.
const (
	benchRawTake = `INSERT INTO ` + benchRawTable + ` AS l (key, token, expires_at)
		VALUES ($1, $2, clock_timestamp() + interval '30 seconds')
		ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
		WHERE l.expires_at <= clock_timestamp()
		RETURNING 1`
	benchRawRelease = `DELETE FROM ` + benchRawTable + ` l WHERE l.key = $1 AND l.token = $2
		RETURNING l.expires_at > clock_timestamp()`
)

// benchPool is a pool on the test server, closed when b ends, with the
// raw baselines' table in place.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	ctx := context.Background()
	p, err := pgxpool.New(ctx, testenv.Get(b, testenv.PostgresURL))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	// One creator at a time: concurrent CREATE ... IF NOT EXISTS of one
	// name can fail on the catalog's unique index.
	err = pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('locker bench_raw'))"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+benchRawSchema+`;
			CREATE TABLE IF NOT EXISTS `+benchRawTable+` (key bytea PRIMARY KEY, token text NOT NULL, expires_at timestamptz NOT NULL)`)
		return err
	})
	if err != nil {
		b.Fatalf("creating %s: %v", benchRawTable, err)
	}
	return p
}

// benchKey is a key no other run of the benchmarks uses.
func benchKey(name string) string { return "bench/" + name + "/" + rand.Text() }

// benchRawOp is the raw lease pair on key through p: INSERT, then
// DELETE by key and token. It fails where the key was taken or the row
// gone.
func benchRawOp(p *pgxpool.Pool, key string) func(context.Context) error {
	k, n := []byte(key), 0
	return func(ctx context.Context) error {
		n++
		token := fmt.Sprint(n)
		var one int
		if err := p.QueryRow(ctx, benchRawTake, k, token).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errors.New("raw: key taken")
			}
			return err
		}
		var live bool
		err := p.QueryRow(ctx, benchRawRelease, k, token).Scan(&live)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return errors.New("raw: release found the row gone")
		case err == nil && !live:
			return errors.New("raw: release found the lease lapsed")
		}
		return err
	}
}

// benchAdvisoryOp is the raw advisory pair on key, on a connection of
// p's pinned until b ends: pg_try_advisory_lock of the key's hashtext,
// then pg_advisory_unlock. It fails where the key was taken.
func benchAdvisoryOp(b *testing.B, p *pgxpool.Pool, key string) func(context.Context) error {
	b.Helper()
	conn, err := p.Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Release)
	return func(ctx context.Context) error {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return errors.New("raw-advisory: key taken")
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtext($1))", key).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return errors.New("raw-advisory: the lock was gone at unlock")
		}
		return nil
	}
}

// benchLocker is a Locker on p, closed when b ends.
func benchLocker(b *testing.B, p *pgxpool.Pool) locker.Locker {
	b.Helper()
	l, err := postgres.New(p, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	return l
}

// BenchmarkAcquireRelease compares one holder acquiring and releasing a
// free key through a Locker with the raw primitives on the same pool:
//
//   - "raw": the lease pair, an INSERT of the row, then its DELETE by key
//     and token, in a table of the Locker's shape; what package postgres
//     does for a mutex whose fence is not asked for, less the release's
//     check for waiters to notify, and less the Locker's own code;
//   - "raw-advisory": a session advisory lock and its unlock on a pinned
//     connection, which writes nothing (see the package doc, Advisory
//     locks, for why it is the baseline and not a mode);
//   - "locker": a Locker on the same pool, the watchdog off, and
//     "locker-autorefresh" with it on, as an application uses it;
//   - "fenced": a Locker whose holders ask for the fence every time (the
//     first mints it in a round trip of its own; from then on the Locker
//     mints with each acquisition, in acquire_v2).
//
// Compare ops/s between sub-benchmarks: locker/raw is what the Locker
// costs over the least a lease row costs.
func BenchmarkAcquireRelease(b *testing.B) {
	p := benchPool(b)
	noRefresh := locker.WithAutoRefresh(false)
	b.Run("raw", func(b *testing.B) {
		op := benchRawOp(p, benchKey("raw"))
		benchkit.Loop(b, func(ctx context.Context, _ int) error { return op(ctx) })
	})
	b.Run("raw-advisory", func(b *testing.B) {
		op := benchAdvisoryOp(b, p, benchKey("raw-advisory"))
		benchkit.Loop(b, func(ctx context.Context, _ int) error { return op(ctx) })
	})
	b.Run("locker", func(b *testing.B) {
		benchkit.AcquireRelease(b, benchLocker(b, p), benchKey("locker"), noRefresh)
	})
	b.Run("locker-autorefresh", func(b *testing.B) {
		benchkit.AcquireRelease(b, benchLocker(b, p), benchKey("locker-autorefresh"))
	})
	b.Run("fenced", func(b *testing.B) {
		op := benchkit.AcquireFenceReleaseOp(benchLocker(b, p), benchKey("fenced"), noRefresh)
		benchkit.Loop(b, func(ctx context.Context, _ int) error { return op(ctx) })
	})
}

// BenchmarkTurns is BenchmarkAcquireRelease's designs taking turns one
// operation at a time (benchkit.Interleave), so that the machine's noise
// hits them alike: read "locker/raw", "open/raw" and "fenced/raw", the
// Locker's throughput relative to the lease pair, and
// "raw-advisory/raw", what a lock that writes nothing saves. "open" is a
// Locker opened from a URL, with a pool of its own, as an application
// opens it.
func BenchmarkTurns(b *testing.B) {
	p := benchPool(b)
	o, err := locker.Open(context.Background(), testenv.Get(b, testenv.PostgresURL))
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	noRefresh := locker.WithAutoRefresh(false)
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: benchRawOp(p, benchKey("turns-raw"))},
		benchkit.Design{Name: "raw-advisory", Op: benchAdvisoryOp(b, p, benchKey("turns-raw-advisory"))},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(benchLocker(b, p), benchKey("turns-locker"), noRefresh)},
		benchkit.Design{Name: "open", Op: benchkit.AcquireReleaseOp(o, benchKey("turns-open"), noRefresh)},
		benchkit.Design{Name: "fenced", Op: benchkit.AcquireFenceReleaseOp(benchLocker(b, p), benchKey("turns-fenced"), noRefresh)},
	)
}

// BenchmarkHandoff measures release-to-next-acquire latency and fairness
// with 2 and 8 waiters on one key, each with a pool and a Locker of its
// own (as processes would have), woken by the NOTIFY of the release.
// A handoff costs about the release's DELETE, the notice's delivery and
// the next holder's INSERT: compare its p50 with BenchmarkAcquireRelease's
// raw (a DELETE and an INSERT).
func BenchmarkHandoff(b *testing.B) {
	url := testenv.Get(b, testenv.PostgresURL)
	for _, waiters := range []int{2, 8} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				return locker.Open(ctx, url)
			}, benchKey(fmt.Sprintf("handoff-%d", waiters)), locker.WithAutoRefresh(false))
		})
	}
}
