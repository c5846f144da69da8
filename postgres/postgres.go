package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/openhook"
)

func init() {
	locker.Register("postgres", open)
	locker.Register("postgresql", open)
}

// Options configures New. The zero value is usable.
type Options struct {
	// Config is passed to locker.New.
	Config locker.Config
	// Schema holds the lock tables. Lockers that share locks must use the
	// same schema. Default: DefaultSchema.
	Schema string
	// NoCreateSchema: Open and New do not create missing tables but fail,
	// naming the SQL to run (SchemaSQL), as for a role that may not.
	NoCreateSchema bool
	// SweepInterval is how often the Locker deletes rows that lapsed a
	// while ago and were not asked for since (a crashed holder's, keys
	// used once). Default: DefaultSweepInterval.
	SweepInterval time.Duration
}

// DefaultSweepInterval is Options.SweepInterval's default.
const DefaultSweepInterval = time.Minute

// openTimeout bounds the checks New makes against the server.
const openTimeout = 10 * time.Second

// schemaName is what a schema may be called: an identifier of at most 63
// bytes (PostgreSQL's limit), which is also the name of the channel that
// notifies releases.
var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// CheckSchemaName returns the error New and Open return for a schema name
// they refuse, nil for one they accept: letters, digits and _, not
// starting with a digit, at most 63 bytes (PostgreSQL's limit on names,
// since the schema's name is also its notification channel's).
func CheckSchemaName(name string) error {
	if !schemaName.MatchString(name) {
		return fmt.Errorf("postgres: schema %q: want a name of letters, digits and _ (not first), at most 63 bytes", name)
	}
	return nil
}

// New returns a Locker over the application's own pool, which it does not
// close. It creates the lock tables when they are missing and the role may
// (Options.NoCreateSchema says not to), and fails if the server cannot be
// reached within 10 seconds.
//
// Waiters are woken through a connection of their own that LISTENs,
// dialled from p's configuration: it must reach the server itself, not a
// pooler in transaction mode, where LISTEN does not work (waiters then
// wake at the holder's expiry only).
func New(p *pgxpool.Pool, opts *Options) (locker.Locker, error) {
	if p == nil {
		return nil, errors.New("postgres: New: the pool is nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return newLocker(ctx, p, false, opts)
}

func newLocker(ctx context.Context, p *pgxpool.Pool, owned bool, opts *Options) (locker.Locker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if err := CheckSchemaName(o.Schema); err != nil {
		return nil, err
	}
	if o.SweepInterval < 0 {
		return nil, fmt.Errorf("postgres: sweep interval %v: must be positive", o.SweepInterval)
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = DefaultSweepInterval
	}
	if err := p.Ping(ctx); err != nil {
		cfg := p.Config().ConnConfig
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server answered, and refused: a role, a database or
			// a setting it does not know, a password it does not take.
			return nil, fmt.Errorf("postgres: the server at %s:%d refuses the connection: %w", cfg.Host, cfg.Port, err)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", openTimeout)
		}
		return nil, fmt.Errorf("postgres: server unreachable at %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	if err := ensureSchema(ctx, p, o.Schema, !o.NoCreateSchema); err != nil {
		return nil, err
	}
	log := o.Config.ResolvedLogger()
	d := &driver{pool: p, owned: owned, schema: o.Schema, channel: o.Schema, sql: newStatements(o.Schema),
		log: log, stopSweep: make(chan struct{})}
	d.listen = newListener(p.Config().ConnConfig, d.channel, log)
	if err := locker.CheckConfig(d, &o.Config); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	d.swept.Add(1)
	go d.sweep(o.SweepInterval)
	return locker.New(d, &o.Config), nil
}

// Parameters of postgres:// URLs that are the Locker's, not pgx's.
var ownParams = []string{"schema", "create_schema", "sweep_interval"}

// open handles postgres:// and postgresql:// URLs: pgx's connection
// strings (host, port, database, user, password, sslmode, pool_max_conns
// and the rest: every parameter the Locker does not take is pgx's or the
// server's), plus ttl, prefix, schema, create_schema and sweep_interval.
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	cfg, opts, err := readURL(u)
	if err != nil {
		return nil, err
	}
	if dial := openhook.Dial(ctx); dial != nil {
		cfg.ConnConfig.DialFunc = dial
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", scrub(err, u.URL))
	}
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	l, err := newLocker(octx, pool, true, &opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return l, nil
}

// readURL reads a postgres:// URL as open and diagnose do: the Locker's
// parameters into Options, the rest into pgx's pool configuration. Its
// errors are for a URL that cannot be read; it connects to nothing.
func readURL(u *locker.URL) (*pgxpool.Config, Options, error) {
	schema, _ := u.Param("schema")
	if schema != "" {
		if err := CheckSchemaName(schema); err != nil {
			return nil, Options{}, err
		}
	}
	create, err := u.BoolParam("create_schema", true)
	if err != nil {
		return nil, Options{}, err
	}
	sweep, err := u.DurationParam("sweep_interval", DefaultSweepInterval)
	if err != nil {
		return nil, Options{}, err
	}
	if sweep <= 0 {
		return nil, Options{}, fmt.Errorf("invalid query parameter sweep_interval=%v: must be positive", sweep)
	}
	// The rest is pgx's: the Locker's own parameters go, the others are
	// pgx's to judge (an unknown one is a server setting, which the server
	// refuses at connect if it knows no such setting).
	conn := *u.URL
	q := conn.Query()
	for k := range q {
		if slices.Contains(ownParams, k) || k == "ttl" || k == "prefix" {
			q.Del(k)
			continue
		}
		u.Param(k)
	}
	if err := u.CheckParams(); err != nil {
		return nil, Options{}, err
	}
	conn.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(conn.String())
	if err != nil {
		return nil, Options{}, fmt.Errorf("postgres: %s: %w", locker.Redact(u.String()), scrub(err, &conn))
	}
	return cfg, Options{Config: u.Config, Schema: schema, NoCreateSchema: !create, SweepInterval: sweep}, nil
}

// scrub keeps the URL's password out of an error from pgx.
func scrub(err error, u *url.URL) error {
	if u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
