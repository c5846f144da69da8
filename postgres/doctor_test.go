package postgres

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/doctortest"
	"github.com/distlock/locker/internal/testenv"
)

// doctorSchema returns a schema name no other test uses, which the test's
// end drops (through dropURL, a role that owns it or a superuser).
func doctorSchema(t *testing.T, dropURL string) string {
	t.Helper()
	name := "doctor_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { doctorExec(t, dropURL, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE") })
	return name
}

// doctorExec runs sql on the server at raw and fails the test on an error.
func doctorExec(t *testing.T, raw, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// doctorURL returns raw with the query parameters kv (name, value, ...)
// added and, if user is not "", that user instead of raw's.
func doctorURL(t *testing.T, raw, user string, kv ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		u.User = url.User(user)
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// TestDiagnoseDevServer: the development server fails no check, and every
// check is made, about the server the URL names; a schema the role may
// create passes, before Open creates it and after.
func TestDiagnoseDevServer(t *testing.T) {
	raw := testenv.Get(t, testenv.PostgresURL)
	host := testenv.Hosts(t, raw)[0]
	schema := doctorSchema(t, raw)
	u := doctorURL(t, raw, "", "schema", schema)
	d := doctortest.Diagnose(t, u)
	if d.Worst() == locker.Fail || d.Backend != "postgres" {
		t.Errorf("a failing finding on the development server, or backend %q: %s", d.Backend, doctortest.Show(d))
	}
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ttl", ""), locker.Pass, "the TTL 30s is within the backend's range")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", host), locker.Pass, "as role locker on database locker; the server is a primary")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "schema", host), locker.Pass, "schema \""+schema+"\" does not exist; role locker may create them, and Open does")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "synchronous_commit", host), locker.Pass, "synchronous_commit is on")
	for _, check := range []string{"replication", "statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "connections", "clock", "rtt"} {
		doctortest.Finding(t, d, check, host)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, d, "statement_timeout", host), locker.Pass, "statement_timeout is 0 (none)")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "connections", host), locker.Pass, "in use")

	l, err := locker.Open(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	d = doctortest.Diagnose(t, "postgresql"+strings.TrimPrefix(u, "postgres"))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "schema", host), locker.Pass, "has the lock tables and functions of version v2, and role locker may use them")
	if d.Backend != "postgresql" {
		t.Errorf("backend %q, want postgresql", d.Backend)
	}
}

// TestDiagnoseSchemaPrivileges: a role that may create nothing fails the
// schema check on a schema that does not exist, saying what to run; on a
// schema an administrator created, it fails until it is granted what the
// fix says, and then passes, and Open works.
func TestDiagnoseSchemaPrivileges(t *testing.T) {
	raw := testenv.Get(t, testenv.PostgresURL)
	admin := testenv.Get(t, testenv.PostgresAdminURL)
	host := testenv.Hosts(t, raw)[0]
	schema := doctorSchema(t, admin)
	noddl := doctorURL(t, raw, "locker_noddl", "schema", schema)

	f := doctortest.Finding(t, doctortest.Diagnose(t, noddl), "schema", host)
	doctortest.WantStatus(t, f, locker.Fail, "schema \""+schema+"\" does not exist, and role locker_noddl may not create them (it needs CREATE on database locker): Open fails")
	if !strings.Contains(f.Fix, "`lockctl schema --schema "+schema+"`") || !strings.Contains(f.Fix, "GRANT USAGE ON SCHEMA") {
		t.Errorf("the fix does not name the SQL to run and the grants: %s", f.Fix)
	}
	if l, err := locker.Open(context.Background(), noddl); err == nil {
		l.Close()
		t.Fatal("Open succeeded where the schema check fails")
	}

	doctorExec(t, admin, SchemaSQL(schema))
	f = doctortest.Finding(t, doctortest.Diagnose(t, noddl), "schema", host)
	doctortest.WantStatus(t, f, locker.Fail, "role locker_noddl may not use schema \""+schema+"\" (no USAGE privilege)")
	q := pgx.Identifier{schema}.Sanitize()
	doctorExec(t, admin, "GRANT USAGE ON SCHEMA "+q+" TO locker_noddl")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, noddl), "schema", host), locker.Fail,
		"but role locker_noddl lacks SELECT on "+q+".locks, INSERT on "+q+".locks")

	// The fix's statements, as it spells them, are enough.
	_, sql, ok := strings.Cut(f.Fix, "grant the role what it needs: ")
	if !ok {
		t.Fatalf("the fix names no grants: %s", f.Fix)
	}
	doctorExec(t, admin, sql)
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, noddl), "schema", host), locker.Pass, "role locker_noddl may use them")
	l, err := locker.Open(context.Background(), noddl)
	if err != nil {
		t.Fatalf("Open after the grants the fix names: %v", err)
	}
	defer l.Close()
	lk, err := l.TryAcquire(context.Background(), "doctor/"+schema, locker.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire after the grants the fix names: %v", err)
	}
	if _, ok := lk.Fence(); !ok {
		t.Error("no fence after the grants the fix names")
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Errorf("Release after the grants the fix names: %v", err)
	}
}

// TestDiagnoseNoCreate: with create_schema=false a missing schema fails,
// as Open does, and the fix says either way out.
func TestDiagnoseNoCreate(t *testing.T) {
	raw := testenv.Get(t, testenv.PostgresURL)
	schema := doctorSchema(t, raw)
	u := doctorURL(t, raw, "", "schema", schema, "create_schema", "false")
	f := doctortest.Finding(t, doctortest.Diagnose(t, u), "schema", testenv.Hosts(t, raw)[0])
	doctortest.WantStatus(t, f, locker.Fail, "does not exist, and create_schema=false: Open fails")
	if !strings.Contains(f.Fix, "drop create_schema=false") || !strings.Contains(f.Fix, "lockctl schema --schema "+schema) {
		t.Errorf("fix %q", f.Fix)
	}
	if l, err := locker.Open(context.Background(), u); err == nil {
		l.Close()
		t.Fatal("Open succeeded where the schema check fails")
	}
}

// TestDiagnoseSessionSettings: the session's settings, as the URL's
// server parameters set them, are judged: a short statement_timeout
// warns, a lock_timeout of seconds does not, synchronous_commit off warns.
func TestDiagnoseSessionSettings(t *testing.T) {
	raw := testenv.Get(t, testenv.PostgresURL)
	host := testenv.Hosts(t, raw)[0]
	d := doctortest.Diagnose(t, doctorURL(t, raw, "", "statement_timeout", "200", "lock_timeout", "2s",
		"idle_in_transaction_session_timeout", "10s", "synchronous_commit", "off"))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "statement_timeout", host), locker.Warn, "statement_timeout is 200ms: a statement that runs longer is cancelled")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "lock_timeout", host), locker.Pass, "lock_timeout is 2s")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "idle_in_transaction_session_timeout", host), locker.Pass, "harmless")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "synchronous_commit", host), locker.Warn, "a crash of the server loses the last acquisitions")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, doctorURL(t, raw, "", "lock_timeout", "50")), "lock_timeout", host),
		locker.Warn, "lock_timeout is 50ms: a statement that waits longer for a lock")
}

// TestDiagnoseReplica: the replica, a standby, fails (it refuses writes);
// the primary warns that its replica is asynchronous, whether the role
// may see the replica's state or not.
func TestDiagnoseReplica(t *testing.T) {
	primary := testenv.Get(t, testenv.PostgresURL)
	replica := testenv.Get(t, testenv.PostgresReplicaURL)
	admin := testenv.Get(t, testenv.PostgresAdminURL)

	rhost := testenv.Hosts(t, replica)[0]
	d := doctortest.Diagnose(t, replica)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "replication", rhost), locker.Fail, "the server is a standby (pg_is_in_recovery() is true): it refuses every write")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", rhost), locker.Pass, "the server is a standby")

	phost := testenv.Hosts(t, primary)[0]
	f := doctortest.Finding(t, doctortest.Diagnose(t, primary), "replication", phost)
	doctortest.WantStatus(t, f, locker.Warn, "a failover to an asynchronous replica loses the acquisitions it had not yet received")
	if !strings.Contains(f.Detail, "1 replica(s)") || !strings.Contains(f.Detail, "may not see the state") {
		t.Errorf("the primary's replication finding, as role locker: %s", f.Detail)
	}
	// A superuser sees the replica's state.
	f = doctortest.Finding(t, doctortest.Diagnose(t, admin), "replication", phost)
	doctortest.WantStatus(t, f, locker.Warn, "streaming, async); synchronous_standby_names '', synchronous_commit on: every replica is asynchronous")
}

// TestDiagnoseUnreachable: a server that does not answer is one failing
// finding about it.
func TestDiagnoseUnreachable(t *testing.T) {
	testenv.Get(t, testenv.PostgresURL) // the servers-required policy applies
	addr := testenv.ClosedAddr(t)
	d := doctortest.Diagnose(t, "postgres://locker@"+addr+"/locker?sslmode=disable")
	var about []locker.Finding
	for _, f := range d.Findings {
		if f.Target != "" {
			about = append(about, f)
		}
	}
	if len(about) != 1 {
		t.Fatalf("want one finding about the server: %s", doctortest.Show(d))
	}
	doctortest.WantStatus(t, about[0], locker.Fail, "server unreachable at "+addr)
	if about[0].Check != "reachable" || about[0].Target != addr || strings.Contains(about[0].Detail, "\n") {
		t.Errorf("finding = %+v, want reachable about %s, on one line", about[0], addr)
	}
}

// TestDiagnoseURLErrors: a URL that Open refuses before it looks at a
// server gets Open's error from Diagnose, word for word; what the server
// refuses (a parameter it does not know) is a finding.
func TestDiagnoseURLErrors(t *testing.T) {
	for _, raw := range []string{
		"postgres://127.0.0.1:1/db?schema=bad-name",
		"postgres://127.0.0.1:1/db?schema=9lives",
		"postgres://127.0.0.1:1/db?sweep_interval=0s",
		"postgres://127.0.0.1:1/db?sweep_interval=soon",
		"postgres://127.0.0.1:1/db?create_schema=maybe",
		"postgres://u:secret@127.0.0.1:1/db?sslmode=bogus",
		"postgres://127.0.0.1:1/db?pool_max_conns=many",
		"postgresql://127.0.0.1:1/db?ttl=0s",
	} {
		l, openErr := locker.Open(context.Background(), raw)
		if openErr == nil {
			l.Close()
			t.Fatalf("Open(%q) succeeded; the case is wrong", raw)
		}
		d, err := locker.Diagnose(context.Background(), raw)
		if err == nil || err.Error() != openErr.Error() {
			t.Errorf("Diagnose(%q) = %s, %v; want Open's error %v", raw, doctortest.Show(d), err, openErr)
		}
		if strings.Contains(openErr.Error(), "secret") {
			t.Errorf("the error shows the password: %v", openErr)
		}
	}
	raw := testenv.Get(t, testenv.PostgresURL)
	d := doctortest.Diagnose(t, doctorURL(t, raw, "", "colour", "blue"))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", testenv.Hosts(t, raw)[0]), locker.Fail, `refuses the connection: `)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", testenv.Hosts(t, raw)[0]), locker.Fail, `"colour"`)
}

// TestDiagnoseTTL: a TTL Open refuses fails, and the server is checked
// all the same.
func TestDiagnoseTTL(t *testing.T) {
	raw := testenv.Get(t, testenv.PostgresURL)
	short := doctorURL(t, raw, "", "ttl", "2ms")
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	d := doctortest.Diagnose(t, short)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ttl", ""), locker.Fail, "TTL 2ms is below")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", testenv.Hosts(t, raw)[0]), locker.Pass, "answers")
}

// TestDiagnoseRules: the judgements of what no development server shows
// (a synchronous replica, one whose state is hidden, a full server, a
// distant clock, an old release), on facts as inspectServer gathers them.
func TestDiagnoseRules(t *testing.T) {
	str := func(s string) *string { return &s }
	base := func() *serverFacts {
		return &serverFacts{target: "db:5432", version: "15.18", versionNum: 150018, role: "app", db: "app",
			syncCommit: "on", maxConns: 100, reserved: 3, inUse: 10, clockUncertainty: time.Millisecond}
	}
	sync1 := replica{name: "s1", addr: "10.0.0.2", state: str("streaming"), syncState: str("sync")}
	async1 := replica{name: "a1", addr: "10.0.0.3", state: str("streaming"), syncState: str("async")}
	hidden := replica{name: "h1"}
	for _, tc := range []struct {
		name   string
		change func(s *serverFacts)
		want   locker.Status
		detail string
	}{
		{"standby", func(s *serverFacts) { s.standby = true }, locker.Fail, "refuses every write"},
		{"alone", func(s *serverFacts) {}, locker.Pass, "no replica streams from this server"},
		{"alone, waiting for a standby", func(s *serverFacts) { s.syncNames = "s1" }, locker.Fail, "every acquisition, refresh and release hangs"},
		{"alone, synchronous_commit local", func(s *serverFacts) { s.syncNames, s.syncCommit = "s1", "local" }, locker.Pass, "no failover can lose"},
		{"asynchronous", func(s *serverFacts) { s.replicas = []replica{async1} }, locker.Warn, "every replica is asynchronous"},
		{"synchronous", func(s *serverFacts) { s.syncNames, s.replicas = "s1", []replica{sync1} }, locker.Pass, "every replica is synchronous"},
		{"quorum", func(s *serverFacts) {
			s.syncNames, s.replicas = "ANY 1 (s1, s2)", []replica{{name: "s2", state: str("streaming"), syncState: str("quorum")}}
		}, locker.Pass, "every replica is synchronous"},
		{"synchronous and asynchronous", func(s *serverFacts) { s.syncNames, s.replicas = "s1", []replica{async1, sync1} }, locker.Pass,
			"commits wait for s1 at 10.0.0.2; fail over only to a synchronous replica, since promoting a1 at 10.0.0.3 (asynchronous)"},
		{"sync standby, commits local", func(s *serverFacts) { s.syncNames, s.syncCommit, s.replicas = "s1", "local", []replica{sync1} }, locker.Warn,
			"every replica is asynchronous"},
		{"hidden, no synchronous names", func(s *serverFacts) { s.replicas = []replica{hidden} }, locker.Warn, "no commit waits for a replica: they are asynchronous"},
		{"hidden, synchronous names", func(s *serverFacts) { s.syncNames, s.replicas = "h1", []replica{hidden} }, locker.Warn, "may not see the state of h1"},
	} {
		s := base()
		tc.change(s)
		doctortest.WantStatus(t, s.replication(), tc.want, tc.detail)
	}

	s := base()
	s.inUse = 95
	doctortest.WantStatus(t, s.connections(), locker.Warn, "95 of max_connections 100 in use (95%)")
	s.inUse = 90
	doctortest.WantStatus(t, s.connections(), locker.Pass, "(90%)")

	s.clockOffset = 3 * time.Second
	doctortest.WantStatus(t, s.clock(), locker.Warn, "3s ahead of this machine's")
	s.clockOffset, s.clockUncertainty = -1500*time.Millisecond, time.Second // within what the round trip cannot tell
	doctortest.WantStatus(t, s.clock(), locker.Pass, "1.5s behind this machine's (±1s): informational")

	s.version, s.versionNum = "12.20", 120020
	doctortest.WantStatus(t, s.reachable(), locker.Warn, "PostgreSQL 12.20 is older than 13")
	s.version, s.versionNum = "13.0", 130000
	doctortest.WantStatus(t, s.reachable(), locker.Pass, "PostgreSQL 13.0 answers")

	s.timeouts = []timeoutSetting{{"statement_timeout", 999 * time.Millisecond}, {"lock_timeout", time.Second},
		{"idle_in_transaction_session_timeout", 50 * time.Millisecond}, {"idle_session_timeout", time.Minute}}
	fs := s.timeoutFindings()
	for i, want := range []locker.Status{locker.Warn, locker.Pass, locker.Pass, locker.Pass} {
		doctortest.WantStatus(t, fs[i], want, s.timeouts[i].name+" is ")
	}
}
