package faulttest_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/distlock/locker/internal/faulttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"

	"github.com/distlock/locker/etcd"
	_ "github.com/distlock/locker/postgres"
	_ "github.com/distlock/locker/redis"
	_ "github.com/distlock/locker/redlock"
	_ "github.com/distlock/locker/zookeeper"
)

var (
	seedFlag     = flag.Uint64("faulttest.seed", 0, "seed of the runs' decisions; 0 draws one (a failure prints it)")
	durationFlag = flag.Duration("faulttest.duration", 0, "how long each backend runs under faults; 0: $"+tortureEnv+" or each backend's default")
)

// tortureEnv, when set to a duration, lengthens every backend's run, as
// -faulttest.duration does (make torture sets it).
const tortureEnv = "LOCKER_TORTURE_DURATION"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backendCase is one backend's run: its defaults sized for `make test` on a
// loaded two-core machine under -race.
type backendCase struct {
	name     string
	duration time.Duration
	config   func(t *testing.T) faulttest.Config
}

var backends = []backendCase{
	{"memory", 8 * time.Second, func(t *testing.T) faulttest.Config {
		store := memory.NewStore()
		return faulttest.Config{
			Open: func(context.Context) (*faulttest.Client, error) {
				c := memory.NewClient(&memory.Options{Store: store})
				return &faulttest.Client{Locker: c.Locker, Crash: c.Crash}, nil
			},
			TTLs: []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second},
		}
	}},
	// Pooled connections, each delayed on its own: refreshes of one lock
	// reach the server out of order.
	{"redis", 22 * time.Second, func(t *testing.T) faulttest.Config {
		return faulttest.Config{
			Open:       faulttest.Proxied(testenv.Get(t, testenv.RedisURL)),
			TTLs:       []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second},
			MaxLatency: 100 * time.Millisecond,
			PerConn:    true,
		}
	}},
	// Delays mostly within the per-node timeout (100 ms by default), so
	// that votes succeed often enough, some beyond.
	{"redlock", 22 * time.Second, func(t *testing.T) faulttest.Config {
		return faulttest.Config{
			Open:       faulttest.Proxied(testenv.Get(t, testenv.RedlockURL)),
			TTLs:       []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second},
			MaxLatency: 150 * time.Millisecond,
			PerConn:    true,
		}
	}},
	// One connection per session (one session per TTL): whole
	// connections delayed and cut. TTLs are session timeouts, at least
	// the server's minSessionTimeout.
	{"zookeeper", 22 * time.Second, func(t *testing.T) faulttest.Config {
		return faulttest.Config{
			Open:       faulttest.Proxied(testenv.Get(t, testenv.ZooKeeperURL)),
			TTLs:       []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second},
			MaxLatency: 300 * time.Millisecond,
		}
	}},
	// One connection; leases in whole seconds, at least the server's
	// minimum.
	{"etcd", 22 * time.Second, func(t *testing.T) faulttest.Config {
		url := testenv.Get(t, testenv.EtcdURL)
		return faulttest.Config{
			Describe:   describeEtcd(url),
			Open:       faulttest.Proxied(url),
			TTLs:       []time.Duration{2 * time.Second, 3 * time.Second, 5 * time.Second},
			MaxLatency: 300 * time.Millisecond,
		}
	}},
	// A pool of connections, each delayed on its own as for Redis, and
	// the connection that LISTENs for releases; the tables in a schema of
	// their own.
	{"postgres", 22 * time.Second, func(t *testing.T) faulttest.Config {
		raw := testenv.Get(t, testenv.PostgresURL)
		return faulttest.Config{
			Describe:   describePostgres(raw, pgSchema),
			Open:       faulttest.Proxied(pgURL(t, raw)),
			TTLs:       []time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second},
			MaxLatency: 100 * time.Millisecond,
			PerConn:    true,
		}
	}},
}

// pgSchema holds the PostgreSQL run's tables, apart from other tests'.
const pgSchema = "faulttest"

// TestFault runs the randomized fault test on every backend; see package
// faulttest. -faulttest.seed replays a run's decisions,
// -faulttest.duration (or $LOCKER_TORTURE_DURATION) runs longer.
func TestFault(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	duration := *durationFlag
	if v := os.Getenv(tortureEnv); duration == 0 && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", tortureEnv, v, err)
		}
		duration = d
	}
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) {
			t.Cleanup(func() { // after the leak check below
				if t.Failed() {
					t.Logf("seed %d: replay with go test -race -run 'TestFault/^%s$' ./internal/faulttest/ -faulttest.seed=%d", seed, bc.name, seed)
				}
			})
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			cfg := bc.config(t)
			cfg.Seed = seed
			cfg.Duration = bc.duration
			if duration > 0 {
				cfg.Duration = duration
			}
			cfg.Logf = t.Logf
			start := time.Now()
			rep, err := faulttest.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s in %v: %s", bc.name, time.Since(start).Round(time.Millisecond), rep.Summary())
			for _, v := range rep.Violations {
				t.Error(v)
			}
		})
	}
}

// describeEtcd lists a key's queue entries with their create revisions,
// leases and the leases' remaining TTLs (the default namespace).
func describeEtcd(rawURL string) func(ctx context.Context, key string) string {
	return func(ctx context.Context, key string) string {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{strings.TrimPrefix(rawURL, "etcd://")}, DialTimeout: 5 * time.Second})
		if err != nil {
			return err.Error()
		}
		defer cli.Close()
		prefix := etcd.DefaultNamespace + "/" + strings.ReplaceAll(strings.ReplaceAll(key, "%", "%25"), "/", "%2F") + "/"
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return err.Error()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d entries under %s at revision %d:", len(r.Kvs), prefix, r.Header.Revision)
		for _, kv := range r.Kvs {
			ttl := "?"
			if lr, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil {
				ttl = fmt.Sprintf("%ds", lr.TTL)
			}
			fmt.Fprintf(&b, " [%s create %d lease %x ttl %s]", strings.TrimPrefix(string(kv.Key), prefix), kv.CreateRevision, kv.Lease, ttl)
		}
		return b.String()
	}
}

// pgURL returns rawURL, $LOCKER_TEST_POSTGRES_URL, with the run's schema.
func pgURL(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("$%s: %v", testenv.PostgresURL, err)
	}
	q := u.Query()
	q.Set("schema", pgSchema)
	u.RawQuery = q.Encode()
	return u.String()
}

// describePostgres lists a key's row in schema's locks table and its rows
// in holds, lapsed ones too, with their remaining TTLs on the server's
// clock (negative once lapsed).
func describePostgres(rawURL, schema string) func(ctx context.Context, key string) string {
	return func(ctx context.Context, key string) string {
		conn, err := pgx.Connect(ctx, rawURL)
		if err != nil {
			return err.Error()
		}
		defer conn.Close(context.WithoutCancel(ctx))
		s := pgx.Identifier{schema}.Sanitize()
		var b strings.Builder
		var (
			token, kind string
			fence       *int64
			remaining   float64
			waiters     bool
		)
		err = conn.QueryRow(ctx, `SELECT token, kind || '/' || lim, fence, waiters,
				extract(epoch FROM expires_at - clock_timestamp())::float8
			FROM `+s+`.locks WHERE key = $1`, []byte(key)).Scan(&token, &kind, &fence, &waiters, &remaining)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			b.WriteString("no row in locks;")
		case err != nil:
			return err.Error()
		default:
			fmt.Fprintf(&b, "locks: token %q kind/limit %s fence %v waited for %v ttl %.3fs;", token, kind, fenceText(fence), waiters, remaining)
		}
		rows, err := conn.Query(ctx, `SELECT token, weight, fence, extract(epoch FROM expires_at - clock_timestamp())::float8
			FROM `+s+`.holds WHERE key = $1 ORDER BY fence`, []byte(key))
		if err != nil {
			return b.String() + " holds: " + err.Error()
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var weight int32
			var hfence int64
			if err := rows.Scan(&token, &weight, &hfence, &remaining); err != nil {
				return b.String() + " holds: " + err.Error()
			}
			fmt.Fprintf(&b, " [hold %q weight %d fence %d ttl %.3fs]", token, weight, hfence, remaining)
			n++
		}
		if err := rows.Err(); err != nil {
			return b.String() + " holds: " + err.Error()
		}
		fmt.Fprintf(&b, " %d rows in holds", n)
		return b.String()
	}
}

func fenceText(f *int64) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprint(*f)
}
