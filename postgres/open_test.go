package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/postgres"
)

// TestOpenErrors: each URL Open refuses, with an error that names what is
// wrong in it, whether the Locker, pgx or the server found it.
func TestOpenErrors(t *testing.T) {
	raw := serverURL(t)
	host := hostOf(t, raw)
	testenv.WantOpenErrors(t, [][2]string{
		// Malformed URLs.
		{"postgres://" + strings.Split(host, ":")[0] + ":notaport/locker", `invalid port ":notaport"`},
		{"postgres://[::1/locker", "missing ']' in host"},
		{withParams(t, raw, "sslmode", "bogus"), "sslmode is invalid"},
		{withParams(t, raw, "pool_max_conns", "many"), "cannot parse pool_max_conns"},
		// The Locker's own parameters.
		{withParams(t, raw, "schema", "a-b"), `schema "a-b": want a name of letters, digits and _`},
		{withParams(t, raw, "schema", "1st"), `schema "1st"`},
		{withParams(t, raw, "schema", strings.Repeat("s", 64)), "at most 63 bytes"},
		{withParams(t, raw, "schema", `x"; DROP TABLE locks; --`), `schema "x\"; DROP TABLE locks; --"`},
		{withParams(t, raw, "sweep_interval", "0"), "sweep_interval=0s: must be positive"},
		{withParams(t, raw, "sweep_interval", "-1s"), "sweep_interval=-1s: must be positive"},
		{withParams(t, raw, "sweep_interval", "abc"), `sweep_interval="abc": want a duration`},
		{withParams(t, raw, "create_schema", "maybe"), `create_schema="maybe": want true or false`},
		{withParams(t, raw, "ttl", "100us"), "below this backend's minimum"},
		// Parameters pgx does not know go to the server as settings,
		// which it refuses when it knows no such setting, or not the
		// value.
		{withParams(t, raw, "colour", "red"), `unrecognized configuration parameter "colour"`},
		{withParams(t, raw, "statement_timeout", "soon"), `invalid value for parameter "statement_timeout": "soon"`},
		// Who and where.
		{asUser(t, raw, url.User("no_such_role")), `role "no_such_role" does not exist`},
		{strings.Replace(raw, host+"/", host+"/no_such_db_", 1), `database "no_such_db_`},
		{strings.Replace(raw, host+"/", host+"/no_such_db_", 1), "does not exist"},
	})
}

// TestOpenUnreachable: a closed port fails Open at once, naming the
// address, not after the 10 s the checks may take.
func TestOpenUnreachable(t *testing.T) {
	closed := testenv.ClosedAddr(t)
	for _, raw := range []string{
		"postgres://locker@" + closed + "/locker?sslmode=disable",
		"postgresql://locker@" + closed + "/locker", // sslmode=prefer: pgx tries twice
	} {
		start := time.Now()
		testenv.WantOpenErrors(t, [][2]string{{raw, "server unreachable at " + closed}})
		testenv.WantOpenErrors(t, [][2]string{{raw, "connection refused"}})
		if d := time.Since(start); d >= 10*time.Second {
			t.Errorf("Open of a closed port took %v: it waited out the open timeout instead of failing at the refusal", d)
		}
	}
	ctx := context.Background()
	p, err := pgxpool.New(ctx, "postgres://locker@"+closed+"/locker?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	testenv.WantNewError(t, "New over a pool of a closed port", func() (locker.Locker, error) { return postgres.New(p, nil) },
		"server unreachable at "+closed)
}

// TestNewErrors: New refuses bad Options, naming the problem, and returns
// no Locker beside its error.
func TestNewErrors(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	fresh := freshSchema(t, admin, false)
	p := dbPool(t, raw)
	testenv.WantNewError(t, "New(nil, nil)", func() (locker.Locker, error) { return postgres.New(nil, nil) }, "the pool is nil")
	for _, c := range []struct {
		name string
		opts postgres.Options
		want string
	}{
		{"bad schema", postgres.Options{Schema: "lock-tables"}, `schema "lock-tables": want a name of letters, digits and _`},
		{"long schema", postgres.Options{Schema: strings.Repeat("s", 64)}, "at most 63 bytes"},
		{"negative sweep", postgres.Options{SweepInterval: -time.Second}, "sweep interval -1s: must be positive"},
		{"TTL too short", postgres.Options{Config: locker.Config{Defaults: []locker.Option{locker.WithTTL(time.Microsecond)}}}, "below this backend's minimum"},
		{"no create", postgres.Options{Schema: fresh, NoCreateSchema: true}, "run the SQL that `lockctl schema --schema " + fresh + "` prints (postgres.SchemaSQL)"},
	} {
		testenv.WantNewError(t, "New with "+c.name, func() (locker.Locker, error) { return postgres.New(p, &c.opts) }, c.want)
	}
	closed := dbPool(t, raw)
	closed.Close()
	testenv.WantNewError(t, "New over a closed pool", func() (locker.Locker, error) { return postgres.New(closed, nil) }, "closed pool")
	// Nothing was created by the New that was told not to.
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", fresh).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema %s after New with NoCreateSchema: %d of it (%v), want none", fresh, n, err)
	}
}

// TestPasswordNeverPrinted: Opens that fail, each with a password in the
// URL, never print it. (The test server trusts every local connection, so
// a wrong password cannot be tried there: pgx never sends it.)
func TestPasswordNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-pw"
	raw := serverURL(t)
	closed := testenv.ClosedAddr(t)
	withPW := func(raw, user string) string { return asUser(t, raw, url.UserPassword(user, secret)) }
	urls := []string{
		withPW(raw, "no_such_role"),
		withPW("postgres://"+closed+"/locker?sslmode=disable", "locker"),
		withParams(t, withPW(raw, "locker"), "colour", "red"),
		withParams(t, withPW(raw, "locker"), "sslmode", "bogus"),
		withParams(t, withPW(raw, "locker"), "pool_max_conns", "many"),
		withParams(t, withPW(raw, "locker"), "schema", "a-b"),
		withParams(t, withPW(raw, "locker"), "schema", "no_such_schema_here", "create_schema", "false"),
		withParams(t, withPW(raw, "locker"), "password", secret, "colour", "red"),
	}
	for _, u := range urls {
		l, err := locker.Open(context.Background(), u)
		if err == nil {
			l.Close()
			t.Errorf("Open(%s) succeeded, want an error", locker.Redact(u))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open of a URL with a password: the error prints it: %v", err)
		}
	}
}

// TestCreateSchemaFalse: with create_schema=false, Open fails on a schema
// that lacks the tables, naming each missing object and the SQL to run,
// and opens once that SQL ran; a schema that lacks one function is named
// with that one alone.
func TestCreateSchemaFalse(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	noCreate := withParams(t, raw, "schema", s, "create_schema", "false")
	q := pgx.Identifier{s}.Sanitize()
	want := []string{`schema "` + s + `" lacks`, q + ".locks", q + ".holds", q + ".fences",
		q + ".acquire_v2(", q + ".release_hold_v2(", q + ".refresh_holds_v2(",
		"create_schema=false", "`lockctl schema --schema " + s + "`", "postgres.SchemaSQL"}
	for _, w := range want {
		testenv.WantOpenErrors(t, [][2]string{{noCreate, w}})
	}
	ctx := context.Background()
	db := dbPool(t, raw)
	if _, err := db.Exec(ctx, postgres.SchemaSQL(s)); err != nil {
		t.Fatal(err)
	}
	lockAndRelease(t, openLocker(t, noCreate), uniqueKey(t))

	if _, err := db.Exec(ctx, "DROP FUNCTION "+q+".release_hold_v2(bytea, text, text)"); err != nil {
		t.Fatal(err)
	}
	testenv.WantOpenErrors(t, [][2]string{{noCreate, "lacks " + q + ".release_hold_v2(bytea,text,text), and create_schema=false"}})
	// Without create_schema=false, Open puts back what is missing.
	lockAndRelease(t, openLocker(t, withParams(t, raw, "schema", s)), uniqueKey(t))
	lockAndRelease(t, openLocker(t, noCreate), uniqueKey(t))
}

// lockAndRelease takes key as a mutex, a fenced mutex, a read lock and a
// semaphore's permit, one after the other, and releases each: what every
// SQL statement of the driver needs of the role.
func lockAndRelease(t *testing.T, l locker.Locker, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, opts := range [][]locker.Option{nil, nil, {locker.Shared()}, {locker.Limit(2)}} {
		lk, err := l.Acquire(ctx, key, opts...)
		if err != nil {
			t.Fatalf("Acquire #%d: %v", i+1, err)
		}
		if i == 0 {
			if _, ok := lk.Fence(); !ok {
				t.Fatal("Fence: none")
			}
		}
		if err := lk.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("Refresh #%d: %v", i+1, err)
		}
		if _, err := lk.TTL(ctx); err != nil {
			t.Fatalf("TTL #%d: %v", i+1, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release #%d: %v", i+1, err)
		}
	}
}

// TestRoleWithoutDDL: a role that may not create the schema gets an error
// saying so, and what to run and grant; once an administrator ran
// SchemaSQL and granted what that error lists (and nothing else: the
// functions' EXECUTE is revoked from PUBLIC first), the role's Lockers
// work, every kind of hold, waiting, the watchdog, inspection, forced
// release and the sweep included.
func TestRoleWithoutDDL(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	noddl := withParams(t, asUser(t, raw, url.User("locker_noddl")), "schema", s)
	for _, w := range []string{
		`schema "` + s + `" lacks`,
		`role "locker_noddl" may not create them`,
		"have an administrator run the SQL that `lockctl schema --schema " + s + " --grant locker_noddl` prints (postgres.SchemaSQL, postgres.GrantSQL)",
	} {
		testenv.WantOpenErrors(t, [][2]string{{noddl, w}})
	}

	ctx := context.Background()
	if _, err := admin.Exec(ctx, postgres.SchemaSQL(s)); err != nil {
		t.Fatal(err)
	}
	// The schema is there, but not the role's yet.
	q := pgx.Identifier{s}.Sanitize()
	testenv.WantOpenErrors(t, [][2]string{{noddl, `role "locker_noddl" may not use schema "` + s + `" (no USAGE privilege): have an administrator run GRANT USAGE ON SCHEMA ` + q}})
	for _, grant := range []string{
		"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA " + q + " FROM PUBLIC",
		// What the error lists.
		"GRANT USAGE ON SCHEMA " + q + " TO locker_noddl",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + q + " TO locker_noddl",
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + q + " TO locker_noddl",
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + q + " TO locker_noddl",
	} {
		if _, err := admin.Exec(ctx, grant); err != nil {
			t.Fatalf("%s: %v", grant, err)
		}
	}
	fast := withParams(t, noddl, "sweep_interval", "100ms")
	l, other := openLocker(t, fast), openLocker(t, noddl)
	key := uniqueKey(t)
	lockAndRelease(t, l, key)

	// Waiting, woken by the release's notice; the watchdog's batched
	// refresh of shared holds; Inspect and ForceRelease.
	lk, err := l.Acquire(ctx, key, locker.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		lk, err := other.Acquire(wctx, key, locker.WithTTL(30*time.Second))
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	waitWaitedFor(t, admin, s, key)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter, as locker_noddl: %v", err)
	}
	sh, err := l.Acquire(ctx, key, locker.Shared(), locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The watchdog refreshes it at a third of its TTL.
	first := holdExpiry(t, admin, s, key, sh.Token())
	testenv.WaitFor(t, 10*time.Second, "the watchdog to refresh a shared hold of locker_noddl", func() bool {
		return holdExpiry(t, admin, s, key, sh.Token()).After(first)
	})
	if h, err := locker.Inspect(ctx, other, key); err != nil || !h.Held || h.Token != sh.Token() {
		t.Fatalf("Inspect as locker_noddl: %+v, %v", h, err)
	}
	if ok, err := locker.ForceRelease(ctx, other, key); err != nil || !ok {
		t.Fatalf("ForceRelease as locker_noddl: %v, %v", ok, err)
	}
	// The sweep deletes a row that lapsed long ago.
	old := uniqueKey(t)
	if _, err := admin.Exec(ctx, "INSERT INTO "+q+".locks (key, token, expires_at) VALUES ($1, 'old', clock_timestamp() - interval '1 hour')", []byte(old)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the sweep of locker_noddl to delete a lapsed row", func() bool {
		return readTables(t, admin, s, old).empty()
	})
}

// TestSchemaCreatedAtOnce: Lockers opening at the same moment on a schema
// that does not exist yet all succeed, and share their locks.
func TestSchemaCreatedAtOnce(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	const n = 4
	ls := make([]locker.Locker, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			ls[i], errs[i] = locker.Open(ctx, u)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Open #%d of %d at once on a fresh schema: %v", i+1, n, errs[i])
			continue
		}
		t.Cleanup(func() { ls[i].Close() })
	}
	if t.Failed() {
		return
	}
	ctx := context.Background()
	key := uniqueKey(t)
	lk, err := ls[0].TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls[1:] {
		if _, err := l.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
			t.Errorf("TryAcquire of a key another Locker of the schema holds: %v, want ErrNotAcquired", err)
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaSQL: SchemaSQL is idempotent: run again over tables in use,
// it keeps their rows and the sequence, and the held locks stay held. Its
// default is DefaultSchema, and a name with capitals is quoted, so that
// it is the schema Open uses.
func TestSchemaSQL(t *testing.T) {
	if got, want := postgres.SchemaSQL(""), postgres.SchemaSQL(postgres.DefaultSchema); got != want {
		t.Errorf("SchemaSQL(\"\") differs from SchemaSQL(DefaultSchema)")
	}
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, true)
	if !strings.Contains(postgres.SchemaSQL(s), `CREATE SCHEMA IF NOT EXISTS "`+s+`";`) {
		t.Errorf("SchemaSQL(%q) does not quote the name", s)
	}
	ctx := context.Background()
	db := dbPool(t, raw)
	for range 2 {
		if _, err := db.Exec(ctx, postgres.SchemaSQL(s)); err != nil {
			t.Fatalf("SchemaSQL run again: %v", err)
		}
	}
	l := openLocker(t, withParams(t, raw, "schema", s, "create_schema", "false"))
	key := uniqueKey(t)
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	f1, _ := lk.Fence()
	sh, err := l.Acquire(ctx, key+"/shared", locker.Shared())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, postgres.SchemaSQL(s)); err != nil {
		t.Fatalf("SchemaSQL run over tables in use: %v", err)
	}
	for _, held := range []locker.Lock{lk, sh} {
		if err := held.Refresh(ctx, time.Minute); err != nil {
			t.Errorf("Refresh of %s after SchemaSQL ran again: %v", held.Key(), err)
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk2, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if f2, _ := lk2.Fence(); f2 <= f1 {
		t.Errorf("fence after SchemaSQL ran again: %d, not above the one before, %d", f2, f1)
	}
}

// holdExpiry returns the expiry of the hold of token on key, on the
// server's clock.
func holdExpiry(t testing.TB, db *pgxpool.Pool, schema, key, token string) time.Time {
	t.Helper()
	var e time.Time
	err := db.QueryRow(context.Background(), "SELECT expires_at FROM "+pgx.Identifier{schema}.Sanitize()+".holds WHERE key = $1 AND token = $2",
		[]byte(key), token).Scan(&e)
	if err != nil {
		t.Fatalf("the expiry of hold %s of %s: %v", token, key, err)
	}
	return e
}

// TestOpenChecksPrivileges: a role, made for the test, that may log in and
// nothing else, opens a schema an administrator created: Open fails
// naming the privilege it lacks and the GRANTs to run, with no grant and
// with USAGE on the schema alone; once GrantSQL's statements ran, it
// opens, and its locks work.
func TestOpenChecksPrivileges(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	ctx := context.Background()
	var b [4]byte
	rand.Read(b[:])
	role := "locker_priv_" + hex.EncodeToString(b[:])
	r := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+r+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, sql := range []string{"DROP OWNED BY " + r, "DROP ROLE " + r} {
			if _, err := admin.Exec(context.Background(), sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	s := freshSchema(t, admin, false)
	if _, err := admin.Exec(ctx, postgres.SchemaSQL(s)); err != nil {
		t.Fatal(err)
	}
	u := withParams(t, asUser(t, raw, url.User(role)), "schema", s)
	q := pgx.Identifier{s}.Sanitize()
	testenv.WantOpenErrors(t, [][2]string{
		{u, `role "` + role + `" may not use schema "` + s + `" (no USAGE privilege): have an administrator run GRANT USAGE ON SCHEMA ` + q + ` TO ` + r + `; GRANT SELECT, INSERT, UPDATE, DELETE ON`},
	})
	if _, err := admin.Exec(ctx, "GRANT USAGE ON SCHEMA "+q+" TO "+r); err != nil {
		t.Fatal(err)
	}
	testenv.WantOpenErrors(t, [][2]string{
		{u, `role "` + role + `" lacks SELECT on ` + q + `.locks, INSERT on ` + q + `.locks`},
		{u, `USAGE on ` + q + `.fences, which the lock tables need: have an administrator run GRANT USAGE ON SCHEMA`},
	})
	if _, err := admin.Exec(ctx, postgres.GrantSQL(s, role)); err != nil {
		t.Fatal(err)
	}
	l := openLocker(t, u)
	key := uniqueKey(t)
	lockAndRelease(t, l, key)
	lk, err := l.TryAcquire(ctx, key, locker.Shared())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lk.Fence(); !ok {
		t.Error("a shared hold without its fence")
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
