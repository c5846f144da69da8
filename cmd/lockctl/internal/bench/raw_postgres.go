package bench

// PostgreSQL's raw designs, and what servers.go asks its servers. There
// are two, since PostgreSQL has two ways to lock with no library:
//
//   - "raw": a lease row, the least that a mutex of package postgres
//     can cost: one INSERT that takes the key (or a row whose lease has
//     lapsed) and one DELETE of the row by its key and token, in a table
//     of the Locker's shape (key bytea primary key, token text,
//     expires_at timestamptz), lockctl_bench.raw_locks, created by the
//     first client that finds it missing.
//   - "raw-advisory": a session advisory lock, pg_try_advisory_lock of
//     the key's hashtext and pg_advisory_unlock, on a connection pinned
//     to the client. It writes nothing, so it is the floor of a lock on
//     PostgreSQL; but it lives as long as the session, has no TTL and no
//     fence (package postgres's doc says why it is no mode of the
//     Locker).
//
// Each client has one connection of its own, as the least a client
// process needs, used by one call at a time.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Names of PostgreSQL's raw designs.
const (
	rawPGLease    = "raw"
	rawPGAdvisory = "raw-advisory"
)

// rawPGSchema and rawPGTable hold the lease rows of the "raw" design,
// apart from the Locker's schema, which a run adds nothing to.
const (
	rawPGSchema = "lockctl_bench"
	rawPGTable  = rawPGSchema + ".raw_locks"
)

// rawPGTableSQL creates the table, as a role that may create a schema in
// the database runs it.
const rawPGTableSQL = `CREATE SCHEMA IF NOT EXISTS ` + rawPGSchema + `;
CREATE TABLE IF NOT EXISTS ` + rawPGTable + ` (
	key        bytea PRIMARY KEY,
	token      text NOT NULL,
	expires_at timestamptz NOT NULL
)`

// The lease pair. The INSERT takes over a row whose lease has lapsed, as
// SET NX PX finds an expired key gone; a free key never meets the
// conflict, so that costs nothing uncontended. The DELETE says whether
// the lease was still live: a lapsed one was lost.
const (
	rawPGTake = `INSERT INTO ` + rawPGTable + ` AS l (key, token, expires_at)
		VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond')
		ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
		WHERE l.expires_at <= clock_timestamp()
		RETURNING 1`
	rawPGRelease = `DELETE FROM ` + rawPGTable + ` l WHERE l.key = $1 AND l.token = $2
		RETURNING l.expires_at > clock_timestamp()`
)

// rawPGOwnParams are the query parameters of a postgres:// URL that are
// the locker library's, not pgx's: pgx would send them to the server as
// settings, which it refuses.
var rawPGOwnParams = []string{"ttl", "prefix", "schema", "create_schema", "sweep_interval"}

// rawPGConfig reads a postgres:// or postgresql:// URL as pgx does (host
// list, database, sslmode and the rest), without the library's own
// parameters. Errors name the problem but never echo the URL.
func rawPGConfig(rawURL string) (*pgx.ConnConfig, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		return nil, errors.New("bench: postgres: malformed URL: no scheme:// (want postgres://host:port/database)")
	}
	if s := strings.ToLower(scheme); s != "postgres" && s != "postgresql" {
		return nil, fmt.Errorf("bench: postgres: URL scheme %q is not supported by the raw designs (want postgres:// or postgresql://)", scheme)
	}
	cfg, err := pgx.ParseConfig(rawPGStripParams(rawURL))
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: malformed URL: %s", rawPGParseError(err, rawURL))
	}
	return cfg, nil
}

// rawPGStripParams removes the library's parameters from rawURL's query,
// leaving the rest as it was written.
func rawPGStripParams(rawURL string) string {
	base, query, ok := strings.Cut(rawURL, "?")
	if !ok {
		return rawURL
	}
	query, fragment, _ := strings.Cut(query, "#")
	var kept []string
	for _, kv := range strings.Split(query, "&") {
		if kv == "" {
			continue
		}
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(rawPGOwnParams, k) {
			continue
		}
		kept = append(kept, kv)
	}
	out := base
	if len(kept) > 0 {
		out += "?" + strings.Join(kept, "&")
	}
	if fragment != "" {
		out += "#" + fragment
	}
	return out
}

// rawPGParseError is what pgx found wrong with a URL, without the URL,
// which pgx's message quotes (its password masked, as best it can).
func rawPGParseError(err error, rawURL string) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+len("`: "):]
		}
	}
	if _, rest, ok := strings.Cut(rawURL, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		}
	}
	return msg
}

// rawPGDesigns are PostgreSQL's raw designs on the server rawURL names.
func rawPGDesigns(rawURL string) ([]Design, error) {
	cfg, err := rawPGConfig(rawURL)
	if err != nil {
		return nil, err
	}
	return []Design{
		{Backend: "postgres", Name: rawPGLease, Kind: KindRaw, Open: func(ctx context.Context) (Client, error) { return rawOpenPGLease(ctx, cfg) }},
		{Backend: "postgres", Name: rawPGAdvisory, Kind: KindRaw, Open: func(ctx context.Context) (Client, error) { return rawOpenPGAdvisory(ctx, cfg) }},
	}, nil
}

// rawPGConn is a client's one connection, used by one call at a time.
type rawPGConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func rawPGConnect(ctx context.Context, cfg *pgx.ConnConfig, design string) (*rawPGConn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: postgres %s: %s: %w", design, rawPGHost(cfg), err)
	}
	return &rawPGConn{conn: conn}, nil
}

// rawPGHost names the server cfg reaches first, for errors.
func rawPGHost(cfg *pgx.ConnConfig) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return cfg.Host
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// scan runs sql and scans its one row into dest; pgx.ErrNoRows when there
// is none. A connection that broke (a context that ended mid-call closes
// it) stays broken: the client's later calls say so.
func (c *rawPGConn) scan(ctx context.Context, sql string, args []any, dest ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn.IsClosed() {
		return errors.New("bench: postgres: the client's connection was closed")
	}
	return c.conn.QueryRow(ctx, sql, args...).Scan(dest...)
}

func (c *rawPGConn) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.Close(ctx)
}

// ---------------------------------------------------------------------------
// The lease pair.

type rawPGLeaseClient struct {
	c  *rawPGConn
	ns string
}

// rawOpenPGLease connects and creates the table when it is missing.
func rawOpenPGLease(ctx context.Context, cfg *pgx.ConnConfig) (Client, error) {
	c, err := rawPGConnect(ctx, cfg, rawPGLease)
	if err != nil {
		return nil, err
	}
	if err := rawPGEnsureTable(ctx, c.conn); err != nil {
		c.close()
		return nil, err
	}
	return &rawPGLeaseClient{c: c, ns: rawNamespace(rawPGLease)}, nil
}

// rawPGEnsureTable creates the table if the server lacks it, one client
// at a time: concurrent CREATE ... IF NOT EXISTS of one name can fail on
// the catalog's unique index.
func rawPGEnsureTable(ctx context.Context, conn *pgx.Conn) error {
	var found *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::text", rawPGTable).Scan(&found); err != nil {
		return fmt.Errorf("bench: postgres raw: looking for %s (the role needs USAGE on schema %s, and SELECT, INSERT, UPDATE, DELETE on the table): %w",
			rawPGTable, rawPGSchema, err)
	}
	if found != nil {
		return nil
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('lockctl bench ' || $1))", rawPGTable); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, rawPGTableSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("bench: postgres raw: creating %s (the role must be allowed to create schema %s, or an administrator runs: %s): %w",
			rawPGTable, rawPGSchema, strings.Join(strings.Fields(rawPGTableSQL), " "), err)
	}
	return nil
}

func (c *rawPGLeaseClient) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	if err := rawCheckTTL(ttl); err != nil {
		return nil, err
	}
	k, token := []byte(c.ns+key), rawToken()
	var one int
	err := c.c.scan(ctx, rawPGTake, []any{k, token, max(1, ttl.Microseconds())}, &one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, ErrBusy
	case err != nil:
		return nil, err
	}
	return func(ctx context.Context) error {
		var live bool
		err := c.c.scan(ctx, rawPGRelease, []any{k, token}, &live)
		switch {
		case errors.Is(err, pgx.ErrNoRows), err == nil && !live:
			return rawErrNotHeld
		}
		return err
	}, nil
}

func (c *rawPGLeaseClient) Close() error { return c.c.close() }

// ---------------------------------------------------------------------------
// The session advisory lock.

// rawPGAdvisoryClient takes session advisory locks on its connection. A
// session may take an advisory lock it holds again (the server counts
// them), so the client remembers what it holds: a held key is busy for
// its holder too, as on every other design, and an Unlock releases only
// the acquisition that returned it. Keys are hashed to 32 bits
// (hashtext), so two keys may share a lock, as with any advisory-lock
// scheme of text keys; among a run's few keys that does not happen in
// practice.
type rawPGAdvisoryClient struct {
	c    *rawPGConn
	ns   string
	mu   sync.Mutex
	held map[string]uint64 // key: the acquisition holding it
	next uint64
}

func rawOpenPGAdvisory(ctx context.Context, cfg *pgx.ConnConfig) (Client, error) {
	c, err := rawPGConnect(ctx, cfg, rawPGAdvisory)
	if err != nil {
		return nil, err
	}
	return &rawPGAdvisoryClient{c: c, ns: rawNamespace(rawPGAdvisory), held: map[string]uint64{}}, nil
}

// Lock ignores ttl: an advisory lock lives as long as the session.
func (c *rawPGAdvisoryClient) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	key = c.ns + key
	c.mu.Lock()
	_, busy := c.held[key]
	c.mu.Unlock()
	if busy {
		return nil, ErrBusy
	}
	var ok bool
	if err := c.c.scan(ctx, "SELECT pg_try_advisory_lock(hashtext($1))", []any{key}, &ok); err != nil {
		return nil, err
	}
	if !ok {
		return nil, ErrBusy
	}
	c.mu.Lock()
	c.next++
	id := c.next
	c.held[key] = id
	c.mu.Unlock()
	return func(ctx context.Context) error { return c.unlock(ctx, key, id) }, nil
}

func (c *rawPGAdvisoryClient) unlock(ctx context.Context, key string, id uint64) error {
	c.mu.Lock()
	if c.held[key] != id {
		c.mu.Unlock()
		return rawErrNotHeld
	}
	delete(c.held, key)
	c.mu.Unlock()
	var ok bool
	if err := c.c.scan(ctx, "SELECT pg_advisory_unlock(hashtext($1))", []any{key}, &ok); err != nil {
		return err
	}
	if !ok {
		return rawErrNotHeld // the session ended and took the lock with it
	}
	return nil
}

// Close ends the session, and with it every lock it holds.
func (c *rawPGAdvisoryClient) Close() error { return c.c.close() }

// ---------------------------------------------------------------------------
// Server versions

// serverPostgres asks every server rawURL names for its version, as the
// server reports it when a session starts ("PostgreSQL 15.8"): the
// URL's hosts, each on its own, with the URL's user, database and TLS.
func serverPostgres(ctx context.Context, rawURL string) string {
	cfg, err := rawPGConfig(rawURL)
	if err != nil {
		return ""
	}
	// pgx lists a host once per TLS mode it may try (sslmode=prefer
	// tries TLS, then plain): one server per distinct host and port.
	type server struct {
		name  string
		tries []*pgconn.FallbackConfig
	}
	var servers []*server
	all := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	for _, f := range all {
		name := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))
		i := slices.IndexFunc(servers, func(s *server) bool { return s.name == name })
		if i < 0 {
			servers = append(servers, &server{name: name})
			i = len(servers) - 1
		}
		servers[i].tries = append(servers[i].tries, f)
	}
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = s.name
	}
	return serverSummary(serverAskAll(ctx, hosts, func(ctx context.Context, host string) string {
		s := servers[slices.Index(hosts, host)]
		c := cfg.Copy()
		c.Host, c.Port, c.TLSConfig, c.Fallbacks = s.tries[0].Host, s.tries[0].Port, s.tries[0].TLSConfig, s.tries[1:]
		// Any server will do, a standby too: the version is all we ask.
		c.ValidateConnect = nil
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			return ""
		}
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			conn.Close(cctx)
		}()
		v, _, _ := strings.Cut(conn.PgConn().ParameterStatus("server_version"), " ")
		if v == "" {
			return ""
		}
		return "PostgreSQL " + v
	}))
}
