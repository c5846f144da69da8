package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
)

func init() {
	locker.RegisterDiagnoser("postgres", diagnose)
	locker.RegisterDiagnoser("postgresql", diagnose)
}

// What diagnose measures and the thresholds it judges by.
const (
	// pingSamples is how many pings measure the round trip (their
	// median), clockSamples how many clock_timestamp() calls measure the
	// server's clock (the one with the shortest round trip).
	pingSamples  = 5
	clockSamples = 3
	// minVersionNum is the oldest server release this backend is meant
	// for, as server_version_num says it.
	minVersionNum = 130000
	// clockGapWarn: client and server clocks further apart than this are
	// not both synchronised.
	clockGapWarn = time.Second
	// shortTimeout: a statement_timeout or lock_timeout below this may
	// cancel acquisitions when the server is merely busy.
	shortTimeout = time.Second
	// connectionsWarnPct: connections in use above this share of
	// max_connections leave little room for a Locker's pool to grow.
	connectionsWarnPct = 90
)

// diagnose is the locker.Diagnoser of postgres:// and postgresql:// URLs.
// It reads them as open does, with open's errors, then connects as open
// does and only reads: the server's version and role (primary or
// standby), its replicas (pg_stat_replication) and synchronous
// replication settings, the lock tables in the URL's schema and the
// role's privileges on them, the session's timeouts, its connections, its
// clock against this process's and the round trip, plus the TTL against
// the backend's range.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	cfg, opts, err := readURL(u)
	if err != nil {
		return nil, err
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	ttl := u.DefaultTTL()
	// The driver's range is static: a driver with no pool tells it.
	fs := []locker.Finding{locker.TTLFinding(&driver{}, ttl)}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	s := inspectServer(ctx, cfg, opts.Schema, u)
	return append(fs, s.findings(ttl, !opts.NoCreateSchema)...), nil
}

// serverFacts is what diagnose learned from the server.
type serverFacts struct {
	target string // host:port
	// err says why the server could not be checked at all.
	err error

	version    string // server_version
	versionNum int    // server_version_num
	role, db   string
	standby    bool // pg_is_in_recovery()

	// Replication, as this session sees it; replErr is set when
	// pg_stat_replication could not be read.
	syncCommit, syncNames string
	replicas              []replica
	replErr               error

	// timeouts are the session's statement_timeout and the others, as
	// every session of this role on this database gets them; timeoutsErr
	// is set when they could not be read.
	timeouts    []timeoutSetting
	timeoutsErr error

	// Connections: max_connections, the slots reserved for superusers
	// (and, from PostgreSQL 16, for pg_use_reserved_connections), and the
	// client connections open now.
	maxConns, reserved, inUse int

	schema schemaFacts

	// The server's clock minus this process's, within ±clockUncertainty;
	// clockErr is set when it could not be read.
	clockOffset, clockUncertainty time.Duration
	clockErr                      error
	rtt                           time.Duration // median of pingSamples pings
	rttErr                        error
}

// replica is a row of pg_stat_replication. State and sync state are nil
// when the role may not see them (it needs pg_read_all_stats, which
// pg_monitor has).
type replica struct {
	name, addr       string
	state, syncState *string
}

// timeoutSetting is one of the session's timeouts.
type timeoutSetting struct {
	name  string
	value time.Duration // 0: none
}

// schemaFacts is what diagnose learned of the lock tables.
type schemaFacts struct {
	name string
	err  error // the tables could not be looked for
	schemaState
	mayCreate bool // the role may create what is missing
}

// timeoutNames are the settings the timeouts finding reads, in order.
var timeoutNames = []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "idle_session_timeout"}

// inspectServer connects as open's pool does, on one connection of its
// own, and reads what the findings judge.
func inspectServer(ctx context.Context, cfg *pgxpool.Config, schema string, u *locker.URL) *serverFacts {
	s := &serverFacts{schema: schemaFacts{name: schema}}
	hosts := serverHosts(cfg.ConnConfig)
	s.target = strings.Join(hosts, ",")
	c, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", openTimeout)
		}
		msg := oneLine(scrub(err, u.URL).Error())
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
			s.err = fmt.Errorf("the server at %s refuses the connection: %s", s.target, msg)
		} else {
			s.err = fmt.Errorf("server unreachable at %s: %s", s.target, msg)
		}
		return s
	}
	defer c.Close(context.WithoutCancel(ctx))
	if len(hosts) > 1 {
		s.target = c.PgConn().Conn().RemoteAddr().String()
	}
	err = c.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
			current_user, current_database(), pg_is_in_recovery(),
			current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
			current_setting('max_connections')::int,
			current_setting('superuser_reserved_connections')::int + coalesce(current_setting('reserved_connections', true), '0')::int,
			(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).
		Scan(&s.version, &s.versionNum, &s.role, &s.db, &s.standby, &s.syncCommit, &s.syncNames, &s.maxConns, &s.reserved, &s.inUse)
	if err != nil {
		s.err = fmt.Errorf("the server at %s answers, but not to a query of its settings: %w", s.target, err)
		return s
	}
	s.replicas, s.replErr = readReplicas(ctx, c)
	s.timeouts, s.timeoutsErr = readTimeouts(ctx, c)
	s.schema = readSchema(ctx, c, schema, s.standby)
	s.rtt, s.rttErr = medianRTT(ctx, c)
	s.clockOffset, s.clockUncertainty, s.clockErr = clockOffset(ctx, c)
	return s
}

// serverHosts returns the host:port of every server cfg names, in order,
// without the repeats that sslmode=prefer's fallbacks make.
func serverHosts(cfg *pgx.ConnConfig) []string {
	hosts := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, f := range cfg.Fallbacks {
		if h := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

func readReplicas(ctx context.Context, c *pgx.Conn) ([]replica, error) {
	rows, err := c.Query(ctx, `SELECT coalesce(application_name, ''), coalesce(host(client_addr), ''), state, sync_state
		FROM pg_stat_replication ORDER BY application_name, client_addr`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (replica, error) {
		var rp replica
		err := r.Scan(&rp.name, &rp.addr, &rp.state, &rp.syncState)
		return rp, err
	})
}

func readTimeouts(ctx context.Context, c *pgx.Conn) ([]timeoutSetting, error) {
	rows, err := c.Query(ctx, `SELECT name, setting::bigint, coalesce(unit, '') FROM pg_settings WHERE name = ANY ($1)`, timeoutNames)
	if err != nil {
		return nil, err
	}
	got := map[string]time.Duration{}
	for rows.Next() {
		var name, unit string
		var v int64
		if err := rows.Scan(&name, &v, &unit); err != nil {
			return nil, err
		}
		per := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[unit]
		if per == 0 {
			return nil, fmt.Errorf("setting %s is in unit %q, which is not a unit of time", name, unit)
		}
		got[name] = time.Duration(v) * per
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var out []timeoutSetting
	for _, name := range timeoutNames {
		if v, ok := got[name]; ok { // idle_session_timeout is new in PostgreSQL 14
			out = append(out, timeoutSetting{name, v})
		}
	}
	return out, nil
}

// readSchema looks for the lock tables, and for what the role may do
// with them or, when they are missing, whether it may create them.
func readSchema(ctx context.Context, c *pgx.Conn, schema string, standby bool) schemaFacts {
	st, err := readSchemaState(ctx, c, schema)
	// SchemaSQL begins with CREATE SCHEMA IF NOT EXISTS, which needs
	// CREATE on the database even where the schema exists.
	return schemaFacts{name: schema, err: err, schemaState: st,
		mayCreate: !standby && st.dbCreate && (!st.exists || st.schemaCreate)}
}

// medianRTT times pingSamples pings, each one round trip.
func medianRTT(ctx context.Context, c *pgx.Conn) (time.Duration, error) {
	rtts := make([]time.Duration, pingSamples)
	for i := range rtts {
		start := time.Now()
		if err := c.Ping(ctx); err != nil {
			return 0, err
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// clockOffset estimates how far the server's clock is ahead of ours from
// the clock_timestamp() call with the shortest round trip: the server
// read its clock somewhere within that round trip, so the estimate, taken
// at its middle, is within half of it.
func clockOffset(ctx context.Context, c *pgx.Conn) (offset, uncertainty time.Duration, err error) {
	best := time.Duration(-1)
	for range clockSamples {
		var server time.Time
		t0 := time.Now()
		if err := c.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&server); err != nil {
			return 0, 0, err
		}
		rtt := time.Since(t0)
		if best < 0 || rtt < best {
			best = rtt
			mid := t0.Add(rtt / 2).Round(0) // wall clock: the server's is one
			offset = server.Sub(mid)
		}
	}
	return offset, best / 2, nil
}

// findings judges what inspectServer learned. create says whether Open
// creates missing tables (create_schema).
func (s *serverFacts) findings(ttl time.Duration, create bool) []locker.Finding {
	if s.err != nil {
		return []locker.Finding{{Check: "reachable", Status: locker.Fail, Target: s.target,
			Detail: s.err.Error() + ": no lock can be taken or kept",
			Fix:    "start the server, or correct the URL: its host, port, database, user, password, sslmode, or a parameter that the server does not know as a setting"}}
	}
	fs := []locker.Finding{s.reachable(), s.replication(), s.synchronousCommit(), s.schemaFinding(create)}
	fs = append(fs, s.timeoutFindings()...)
	fs = append(fs, s.connections(), s.clock())
	if s.rttErr != nil {
		fs = append(fs, locker.Finding{Check: "rtt", Status: locker.Warn, Target: s.target,
			Detail: "cannot time a ping: " + s.rttErr.Error(), Fix: "run the check again; if it persists, see the server's log"})
	} else {
		fs = append(fs, locker.RTTFinding(s.target, s.rtt, ttl, fmt.Sprintf("median of %d pings", pingSamples)))
	}
	return fs
}

func (s *serverFacts) reachable() locker.Finding {
	f := locker.Finding{Check: "reachable", Target: s.target}
	role := "a primary (accepts writes)"
	if s.standby {
		role = "a standby (in recovery, read-only)"
	}
	f.Detail = fmt.Sprintf("PostgreSQL %s answers, as role %s on database %s; the server is %s", s.version, s.role, s.db, role)
	if s.versionNum < minVersionNum {
		f.Status = locker.Warn
		f.Detail += fmt.Sprintf("; PostgreSQL %s is older than 13, the oldest release this backend is meant for: locks may work, but no test of this backend runs on it", strings.Fields(s.version + " ?")[0])
		f.Fix = "upgrade the server to PostgreSQL 13 or later"
	}
	return f
}

// replication judges what a failover can do to the locks: rows and
// sequence values that the primary granted but an asynchronous replica
// had not received are lost when that replica is promoted.
func (s *serverFacts) replication() locker.Finding {
	f := locker.Finding{Check: "replication", Target: s.target}
	settings := fmt.Sprintf("synchronous_standby_names %s, synchronous_commit %s", quoteSetting(s.syncNames), s.syncCommit)
	const lost = "a failover to an asynchronous replica loses the acquisitions it had not yet received, so a held lock can be granted again, and fences the old primary handed out can be handed out again"
	const asyncFix = "make the replicas synchronous (synchronous_standby_names naming them, synchronous_commit on or remote_apply), and fail over only to a synchronous one; or pass Lock.Fence() to the protected resource all the same and accept the risk"
	switch {
	case s.standby:
		f.Status = locker.Fail
		f.Detail = "the server is a standby (pg_is_in_recovery() is true): it refuses every write, so no lock can be acquired, refreshed or released on it"
		f.Fix = "point the URL at the primary; with several hosts in the URL, add target_session_attrs=read-write so that the client picks the primary"
		return f
	case s.replErr != nil:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("cannot read pg_stat_replication (%v); %s: if an asynchronous replica can be promoted, %s", s.replErr, settings, lost)
		f.Fix = "grant the role pg_monitor to let it see the replicas; " + asyncFix
		return f
	}
	waits := s.syncNames != "" && s.syncCommit != "off" && s.syncCommit != "local"
	if len(s.replicas) == 0 {
		f.Detail = "no replica streams from this server (" + settings + "): no failover can lose acquisitions"
		if waits {
			f.Status = locker.Fail
			f.Detail = "no replica streams from this server, but " + settings + ": every commit waits for a synchronous standby that is not there, so every acquisition, refresh and release hangs"
			f.Fix = "start the standbys synchronous_standby_names names, or empty it"
		}
		return f
	}
	var names, sync, async, hidden []string
	for _, r := range s.replicas {
		name := r.name
		if name == "" {
			name = "(no application_name)"
		}
		if r.addr != "" {
			name += " at " + r.addr
		}
		switch {
		case r.syncState == nil:
			hidden = append(hidden, name)
			names = append(names, name)
			continue
		case (*r.syncState == "sync" || *r.syncState == "quorum") && waits:
			sync = append(sync, name)
		default:
			async = append(async, name)
		}
		names = append(names, fmt.Sprintf("%s (%s, %s)", name, deref(r.state), *r.syncState))
	}
	f.Detail = fmt.Sprintf("%d replica(s) stream from this server: %s; %s", len(s.replicas), strings.Join(names, ", "), settings)
	switch {
	case len(hidden) > 0:
		f.Status = locker.Warn
		f.Detail += fmt.Sprintf("; role %s may not see the state of %s (that needs pg_read_all_stats, which pg_monitor has)", s.role, strings.Join(hidden, ", "))
		if !waits {
			f.Detail += ", but with these settings no commit waits for a replica: they are asynchronous, and " + lost
			f.Fix = asyncFix
		} else {
			f.Detail += ": if one of them is asynchronous, " + lost
			f.Fix = "grant the role pg_monitor and check again; " + asyncFix
		}
	case len(sync) == 0:
		f.Status = locker.Warn
		f.Detail += ": every replica is asynchronous, and " + lost
		f.Fix = asyncFix
	case len(async) > 0:
		f.Detail += fmt.Sprintf(": commits wait for %s; fail over only to a synchronous replica, since promoting %s (asynchronous) can lose acquisitions and repeat fences", strings.Join(sync, ", "), strings.Join(async, ", "))
	default:
		f.Detail += ": every replica is synchronous, so a commit (an acquisition, a fence) is on a replica before the client hears of it, and a failover to one of them loses none"
	}
	return f
}

// synchronousCommit judges what a crash of the server itself does to the
// locks: with synchronous_commit off, a commit is acknowledged before it
// is flushed.
func (s *serverFacts) synchronousCommit() locker.Finding {
	f := locker.Finding{Check: "synchronous_commit", Target: s.target}
	switch s.syncCommit {
	case "off":
		f.Status = locker.Warn
		f.Detail = "synchronous_commit is off for this role's sessions: a commit is acknowledged before it is on disk, so a crash of the server loses the last acquisitions (up to three times wal_writer_delay) while their holders believe they hold them, and the restarted server grants those locks again"
		f.Fix = "set synchronous_commit to on for the lock role (ALTER ROLE ... SET synchronous_commit = on) or the server"
	default:
		f.Detail = fmt.Sprintf("synchronous_commit is %s: a commit is on disk before the client hears of it, so a restart of the server keeps every acquisition", s.syncCommit)
	}
	return f
}

// schemaFinding judges the lock tables: there, and usable by the role;
// missing, and whether Open creates them.
func (s *serverFacts) schemaFinding(create bool) locker.Finding {
	sf := s.schema
	f := locker.Finding{Check: "schema", Target: s.target}
	sql := fmt.Sprintf("have an administrator run the SQL that `lockctl schema --schema %s` prints (postgres.SchemaSQL), then %s", sf.name, grants(sf.name, s.role))
	switch {
	case sf.err != nil:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("cannot look for the lock tables in schema %q: %v", sf.name, sf.err)
		f.Fix = "see the error; the role needs USAGE on the schema to find the tables"
	case sf.exists && !sf.usage:
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("role %s may not use schema %q (no USAGE privilege): Open fails, and so would every acquisition", s.role, sf.name)
		f.Fix = grants(sf.name, s.role)
	case len(sf.missing) > 0 && s.standby:
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("%s, and a standby cannot create them: Open fails", sf.lacks())
		f.Fix = "point the URL at the primary (see the replication finding)"
	case len(sf.missing) > 0 && !create:
		f.Status = locker.Fail
		f.Detail = sf.lacks() + ", and create_schema=false: Open fails"
		f.Fix = sql
		if sf.mayCreate {
			f.Fix = fmt.Sprintf("drop create_schema=false, so that Open creates them (role %s may), or %s", s.role, sql)
		}
	case len(sf.missing) > 0 && !sf.mayCreate:
		f.Status = locker.Fail
		why := fmt.Sprintf("role %s may not create them (it needs CREATE on database %s", s.role, s.db)
		if sf.exists {
			why += " and on the schema"
		}
		why += ")"
		f.Detail = fmt.Sprintf("%s, and %s: Open fails", sf.lacks(), why)
		f.Fix = sql
	case len(sf.missing) > 0:
		f.Detail = fmt.Sprintf("%s; role %s may create them, and Open does (once; the SQL is what `lockctl schema --schema %s` prints)", sf.lacks(), s.role, sf.name)
	case len(sf.lacking) > 0:
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("schema %q has the lock tables of version %s, but role %s lacks %s: the statements that need them fail", sf.name, schemaVersion, s.role, strings.Join(sf.lacking, ", "))
		f.Fix = grants(sf.name, s.role)
	default:
		f.Detail = fmt.Sprintf("schema %q has the lock tables and functions of version %s, and role %s may use them", sf.name, schemaVersion, s.role)
	}
	return f
}

// lacks says what of the schema is missing: all of it, or which objects.
func (sf schemaFacts) lacks() string {
	if !sf.exists {
		return fmt.Sprintf("schema %q does not exist", sf.name)
	}
	return fmt.Sprintf("schema %q lacks %s", sf.name, strings.Join(sf.missing, ", "))
}

// grants is the SQL that gives role what it needs on the schema's objects.
func grants(schema, role string) string {
	return "grant the role what it needs: " + oneLineSQL(grantSQL(schema, role))
}

// timeoutFindings says what each of the session's timeouts does to the
// Locker's statements. Every statement the Locker sends stands alone and
// takes a row lock for no longer than itself, so only a short
// statement_timeout or lock_timeout can cut one short: when the server is
// busy, or a key's row is locked by another client's statement.
func (s *serverFacts) timeoutFindings() []locker.Finding {
	if s.timeoutsErr != nil {
		return []locker.Finding{{Check: "timeouts", Status: locker.Warn, Target: s.target,
			Detail: "cannot read the session's timeouts: " + s.timeoutsErr.Error(), Fix: "check that the role may read pg_settings"}}
	}
	var fs []locker.Finding
	for _, t := range s.timeouts {
		f := locker.Finding{Check: t.name, Target: s.target}
		if t.value == 0 {
			f.Detail = t.name + " is 0 (none)"
		} else {
			f.Detail = fmt.Sprintf("%s is %v", t.name, t.value)
		}
		switch t.name {
		case "statement_timeout", "lock_timeout":
			what := "a statement that runs longer is cancelled"
			if t.name == "lock_timeout" {
				what = "a statement that waits longer for a lock (a key's row, locked by another client's acquisition or release) is cancelled"
			}
			switch {
			case t.value == 0:
				f.Detail += ": the Locker's statements, each one short, are never cancelled by the server; the caller's context bounds them"
			case t.value < shortTimeout:
				f.Status = locker.Warn
				f.Detail += ": " + what + ", and on a busy server an acquisition, refresh or release can take that long: it then fails with an error (an acquisition is undone, a refresh retried until the lock's validity ends)"
				f.Fix = fmt.Sprintf("raise %s to a few seconds or more for the lock role (ALTER ROLE ... SET %s = '5s'), or set it to 0 and let the callers' contexts bound the waits", t.name, t.name)
			default:
				f.Detail += ": " + what + "; the Locker's statements are far shorter unless the server stalls, and a refresh that fails is retried"
			}
		case "idle_in_transaction_session_timeout":
			f.Detail += ": harmless, since the Locker leaves no transaction open between statements"
		case "idle_session_timeout":
			if t.value == 0 {
				f.Detail += ": idle connections stay open"
			} else {
				f.Detail += ": the server closes connections idle that long; the pool replaces them, and the connection that listens for releases is dialled again (waiters meanwhile try again when the holder's TTL has passed), so locks stay safe, at the cost of reconnections"
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// connections judges how full the server is: a Locker's pool opens
// connections as its load needs them, and one more listens for releases.
func (s *serverFacts) connections() locker.Finding {
	f := locker.Finding{Check: "connections", Target: s.target}
	pct := 100 * s.inUse / max(s.maxConns, 1)
	f.Detail = fmt.Sprintf("%d of max_connections %d in use (%d%%), %d of them reserved for superusers", s.inUse, s.maxConns, pct, s.reserved)
	if pct > connectionsWarnPct {
		f.Status = locker.Warn
		f.Detail += ": a Locker whose pool must grow, or whose listening connection must be dialled again, may be refused (too many clients already), and its acquisitions and refreshes then fail"
		f.Fix = "raise max_connections, lower the clients' pool_max_conns, or put a pooler in front (in transaction mode only for the pool: the listening connection must reach the server itself)"
	}
	return f
}

// clock judges the gap between the server's clock and this process's.
// Leases expire by the server's clock and a holder counts its validity on
// its own, but both count durations from their own readings, so a steady
// gap does no harm; a large one says that one of the clocks is not
// synchronised, and such a clock is stepped when it is set right: a step
// of the server's clock forward expires every lease early.
func (s *serverFacts) clock() locker.Finding {
	f := locker.Finding{Check: "clock", Target: s.target}
	if s.clockErr != nil {
		f.Status = locker.Warn
		f.Detail = "cannot read the server's clock: " + s.clockErr.Error()
		f.Fix = "run the check again; if it persists, see the server's log"
		return f
	}
	gap := s.clockOffset
	ahead := "ahead of"
	if gap < 0 {
		gap, ahead = -gap, "behind"
	}
	f.Detail = fmt.Sprintf("the server's clock is %v %s this machine's (±%v)", gap.Round(time.Microsecond), ahead, s.clockUncertainty.Round(time.Microsecond))
	if gap-s.clockUncertainty > clockGapWarn {
		f.Status = locker.Warn
		f.Detail += fmt.Sprintf(": more than %v apart, so at least one of the clocks is not synchronised. Only durations matter to the locks (leases expire by the server's clock, holders count their validity by their own), so the gap itself is harmless; but an unsynchronised clock drifts, and is stepped when it is set right: the server's stepped forward expires every lease early, while its holders still count on it", clockGapWarn)
		f.Fix = "synchronise both clocks (chrony or ntpd, slewing rather than stepping), and check again: a gap that changes between runs is a clock that drifts"
	} else {
		f.Detail += ": informational, since only durations matter to the locks (leases expire by the server's clock, holders count their validity by their own); a gap that changes between runs is a clock that drifts"
	}
	return f
}

// oneLine joins the lines of a pgx error that lists every address it
// tried, one per line, for a finding's one line.
func oneLine(msg string) string {
	return strings.ReplaceAll(strings.ReplaceAll(msg, ":\n\t", ": "), "\n\t", "; ")
}

// quoteSetting shows a setting's value in quotes, so that an empty one shows.
func quoteSetting(v string) string {
	return "'" + v + "'"
}
