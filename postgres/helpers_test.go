package postgres_test

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// TestMain checks for leaked goroutines, and hands the examples their
// server: they read DATABASE_URL, as pgx's own examples do, which is set
// here to the test server's URL. An example cannot skip, so without a
// server (and without LOCKER_REQUIRE_SERVERS=1) the examples are left out
// of the run, as the tests skip.
func TestMain(m *testing.M) {
	flag.Parse()
	if raw := os.Getenv(testenv.PostgresURL); raw != "" {
		os.Setenv("DATABASE_URL", raw)
	} else if !testenv.Required() {
		if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
			f.Value.Set("^Example")
			fmt.Fprintf(os.Stderr, "%s is not set: the examples, which need the server, are left out\n", testenv.PostgresURL)
		}
	}
	goleak.VerifyTestMain(m)
}

// serverURL returns the primary's URL as role locker, without the
// Locker's own parameters: pgx takes it as it is.
func serverURL(t testing.TB) string {
	t.Helper()
	return testenv.Get(t, testenv.PostgresURL)
}

// withParams returns raw with the query parameters kv (name, value,
// name, value, ...) set.
func withParams(t testing.TB, raw string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// asUser returns raw with its user (and password) replaced.
func asUser(t testing.TB, raw string, user *url.Userinfo) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.User = user
	return u.String()
}

// hostOf returns the host:port of raw.
func hostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// dbPool returns a pool on raw, closed when the test ends.
func dbPool(t testing.TB, raw string) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.New(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// adminPool returns a pool on the primary as superuser postgres, closed
// when the test ends.
func adminPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return dbPool(t, testenv.Get(t, testenv.PostgresAdminURL))
}

// unsafeName keeps what a schema name may hold.
var unsafeName = regexp.MustCompile(`[^a-z0-9_]+`)

// freshSchema returns the name of a schema no one used, which the
// superuser drops, with everything in it, when the test ends: after the
// Lockers opened later in the test are closed. upper puts capitals in it,
// which SQL must quote.
func freshSchema(t testing.TB, admin *pgxpool.Pool, upper bool) string {
	t.Helper()
	var b [5]byte
	rand.Read(b[:])
	name := unsafeName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	name = "t_" + strings.Trim(name, "_") + "_" + hex.EncodeToString(b[:])
	if upper {
		name = "T_" + strings.ToUpper(name[2:])
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the test's schema %s: %v", name, err)
		}
	})
	return name
}

// openLocker opens raw and closes the Locker when the test ends.
func openLocker(t testing.TB, raw string) locker.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := locker.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// newLocker returns a Locker over p from New, closed when the test ends.
func newLocker(t testing.TB, p *pgxpool.Pool, opts *postgres.Options) locker.Locker {
	t.Helper()
	l, err := postgres.New(p, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// dialVia returns a pgx DialFunc that dials the address addr returns,
// whatever address pgx asks for.
func dialVia(addr func() string) func(ctx context.Context, network, _ string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr())
	}
}

// targetOf returns the server address of a pgx connection string.
func targetOf(t testing.TB, raw string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

var seq atomic.Int64

// uniqueKey returns a key no other test, and no other run, uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s/%d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// keyHash is what the release of key notifies: md5 of the key, in hex.
func keyHash(key string) string {
	h := md5.Sum([]byte(key))
	return hex.EncodeToString(h[:])
}

// tables reads key's rows in schema's tables as they are now.
type tables struct {
	locks []lockRow // the key's row in locks, if any
	holds []holdRow // its rows in holds, in grant order
}

type lockRow struct {
	token   string
	kind    int16
	live    bool
	waiters bool
}

type holdRow struct {
	token string
	live  bool
}

func readTables(t testing.TB, db *pgxpool.Pool, schema, key string) tables {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := pgx.Identifier{schema}.Sanitize()
	var tb tables
	rows, err := db.Query(ctx, `SELECT token, kind, expires_at > clock_timestamp(), waiters FROM `+s+`.locks WHERE key = $1`, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r lockRow
		if err := rows.Scan(&r.token, &r.kind, &r.live, &r.waiters); err != nil {
			t.Fatal(err)
		}
		tb.locks = append(tb.locks, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows, err = db.Query(ctx, `SELECT token, expires_at > clock_timestamp() FROM `+s+`.holds WHERE key = $1 ORDER BY fence`, []byte(key))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var h holdRow
		if err := rows.Scan(&h.token, &h.live); err != nil {
			t.Fatal(err)
		}
		tb.holds = append(tb.holds, h)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return tb
}

// empty reports whether the key has no row in either table.
func (tb tables) empty() bool { return len(tb.locks) == 0 && len(tb.holds) == 0 }

// live reports whether a row of the key has not lapsed: whether it is
// taken.
func (tb tables) live() bool {
	for _, l := range tb.locks {
		if l.live {
			return true
		}
	}
	for _, h := range tb.holds {
		if h.live {
			return true
		}
	}
	return false
}

func (tb tables) String() string {
	return fmt.Sprintf("locks %+v, holds %+v", tb.locks, tb.holds)
}

// waitWaitedFor waits until key's row says a request found it taken: a
// waiter has made its attempt and waits.
func waitWaitedFor(t testing.TB, db *pgxpool.Pool, schema, key string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "a waiter to find "+key+" taken", func() bool {
		tb := readTables(t, db, schema, key)
		return len(tb.locks) == 1 && tb.locks[0].waiters
	})
}

// A kind is the options of one kind of hold, and of a request that
// conflicts with it.
type kind struct {
	name     string
	hold     []locker.Option
	conflict []locker.Option
}

// kinds are a mutex, a read lock (which a writer waits for), a writer
// that a reader waits for, and a semaphore of one permit.
var kinds = []kind{
	{"exclusive", nil, nil},
	{"shared", []locker.Option{locker.Shared()}, nil},
	{"writer-reader", nil, []locker.Option{locker.Shared()}},
	{"permit", []locker.Option{locker.Limit(1)}, []locker.Option{locker.Limit(1)}},
}

// with returns opts followed by more.
func with(opts []locker.Option, more ...locker.Option) []locker.Option {
	return append(append([]locker.Option{}, opts...), more...)
}
