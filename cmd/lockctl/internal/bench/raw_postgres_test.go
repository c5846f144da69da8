package bench

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRawPGLease: the lease row lapses at its TTL, on the server's
// clock: a lapsed row is taken over by the next Lock, and its holder's
// late Unlock, finding the row gone or lapsed, reports the lock lost and
// leaves the next holder's alone.
func TestRawPGLease(t *testing.T) {
	rawTestLeaks(t)
	d := rawTestDesign(t, "postgres", envPostgres, "raw")
	c1, c2 := rawTestOpen(t, d), rawTestOpen(t, d)
	key, ctx := rawTestKey(t), context.Background()

	// Taken over once lapsed.
	u1 := rawMustLock(t, c1, key, time.Millisecond)
	var u2 Unlock
	for deadline := time.Now().Add(10 * time.Second); u2 == nil; {
		u, err := c2.Lock(ctx, key, 10*time.Second)
		switch {
		case err == nil:
			u2 = u
		case !errors.Is(err, ErrBusy) || time.Now().After(deadline):
			t.Fatalf("Lock of a key whose lease lapsed: %v", err)
		default:
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := u1(ctx); !errors.Is(err, rawErrNotHeld) {
		t.Fatalf("Unlock of a lease taken over = %v, want rawErrNotHeld", err)
	}
	rawWantBusy(t, c1, key, "after the lapsed holder's Unlock")
	if err := u2(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	// Lapsed, not taken: the Unlock deletes the row and says it was lost.
	u1 = rawMustLock(t, c1, key, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if err := u1(ctx); !errors.Is(err, rawErrNotHeld) {
		t.Fatalf("Unlock of a lapsed lease = %v, want rawErrNotHeld", err)
	}
	if err := rawMustLock(t, c2, key, 10*time.Second)(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	if _, err := c1.Lock(ctx, key, 0); err == nil || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("Lock with ttl 0 = %v, want an error about the ttl", err)
	}
}

// TestRawPGTable: the lease rows live in the raw designs' own table, of
// the Locker's table's shape, not in the Locker's schema; a held key is
// one row, gone after Unlock.
func TestRawPGTable(t *testing.T) {
	rawTestLeaks(t)
	url := serverURL(t, envPostgres)
	d := rawTestDesign(t, "postgres", envPostgres, "raw")
	c := rawTestOpen(t, d)
	key, ctx := rawTestKey(t), context.Background()

	cfg, err := rawPGConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows := func() int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+rawPGTable+" WHERE key = $1", []byte(rawNamespace("raw")+key)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	u := rawMustLock(t, c, key, 10*time.Second)
	if n := rows(); n != 1 {
		t.Fatalf("%d rows for a held key, want 1", n)
	}
	if err := u(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 0 {
		t.Fatalf("%d rows after Unlock, want 0", n)
	}
	var cols string
	err = conn.QueryRow(ctx, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
		FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, rawPGTable).Scan(&cols)
	if err != nil {
		t.Fatal(err)
	}
	if want := "key bytea, token text, expires_at timestamp with time zone"; cols != want {
		t.Errorf("%s has columns %q, want %q", rawPGTable, cols, want)
	}
}

// TestRawPGConfig: a postgres:// URL is pgx's, less the locker library's
// own parameters, which the server would refuse as settings.
func TestRawPGConfig(t *testing.T) {
	cfg, err := rawPGConfig("postgresql://u:pw@h1:5433,h2/app?sslmode=disable&schema=s&ttl=5s&prefix=p/&create_schema=false&sweep_interval=1s&application_name=x")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "h1" || cfg.Port != 5433 || cfg.User != "u" || cfg.Password != "pw" || cfg.Database != "app" || len(cfg.Fallbacks) != 1 {
		t.Errorf("read as host %s:%d user %s database %s, %d fallbacks", cfg.Host, cfg.Port, cfg.User, cfg.Database, len(cfg.Fallbacks))
	}
	if len(cfg.RuntimeParams) != 1 || cfg.RuntimeParams["application_name"] != "x" {
		t.Errorf("server settings %v, want application_name alone", cfg.RuntimeParams)
	}
	for _, tc := range []struct{ url, want string }{
		{"mysql://h/db", `scheme "mysql"`},
		{"h:5432/db", "no scheme"},
		{"postgres://u:secret@h:99999/db", "invalid port"},
		{"postgres://u:secret@h/db?sslmode=bogus", "sslmode is invalid"},
		{"postgres://u:secret@h:%zz/db", "invalid percent-encoded"},
		{"postgres://u:secret@h/db?connect_timeout=abc", "connect_timeout"},
	} {
		ds, err := RawDesigns("postgres", tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RawDesigns(postgres, %q) = %v, %v; want an error containing %q", tc.url, ds, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("RawDesigns(postgres, %q): error %q shows the password", tc.url, err)
		}
		if _, perr := PeerDesigns("postgres", tc.url); perr == nil {
			t.Errorf("PeerDesigns(postgres, %q) took a URL the raw designs refuse", tc.url)
		}
	}
	if ds, err := PeerDesigns("postgres", "postgres://h/db"); ds != nil || err != nil {
		t.Errorf("PeerDesigns(postgres) = %v, %v; want none: no peer library", ds, err)
	}
}

// TestRunPostgres: a short run on PostgreSQL measures the Locker and
// both raw designs where keys do not contend, the Locker alone where
// they do, with no error, and judges the hot key against the raw pair.
func TestRunPostgres(t *testing.T) {
	url := serverURL(t, envPostgres)
	rep, err := Run(context.Background(), Options{URLs: []string{url}, Settings: Settings{
		Scenarios: []string{ScenarioUncontended, ScenarioThroughput, ScenarioHotKey},
		Duration:  100 * time.Millisecond, Clients: []int{2}, Waiters: []int{2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if b := rep.Backends[0]; b.Name != "postgres" || !regexp.MustCompile(`^PostgreSQL \d+(\.\d+)+$`).MatchString(b.Servers) {
		t.Errorf("backend %q, servers %q; want postgres, PostgreSQL and its version", b.Name, b.Servers)
	}
	got := map[string]Result{}
	for _, res := range rep.Results {
		got[res.Scenario+"/"+res.Design] = res
		if res.Ops == 0 || res.Errors != 0 {
			t.Errorf("%s/%s: %d ops, %d errors (%s)", res.Scenario, res.Design, res.Ops, res.Errors, res.FirstError)
		}
	}
	for _, name := range []string{"uncontended/locker", "uncontended/raw", "uncontended/raw-advisory",
		"throughput/locker", "throughput/raw", "throughput/raw-advisory", "hot-key/locker"} {
		if _, ok := got[name]; !ok {
			t.Errorf("no result %s; notes: %q", name, rep.Notes)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d results, want 7: %v", len(got), rep.Results)
	}
	var hot *Target
	for i, tg := range rep.Targets {
		if tg.Backend == "postgres" && tg.Name == "hot key" {
			hot = &rep.Targets[i]
		}
		if tg.Name == "uncontended vs best peer" {
			t.Errorf("a peer target on postgres, which has no peer: %+v", tg)
		}
	}
	if hot == nil || !hot.Measured {
		t.Errorf("hot key target = %+v, want it measured", hot)
	}
}
