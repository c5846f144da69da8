package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker/backend"
)

// MaxValueLen is the longest value stored with a hold.
const MaxValueLen = 64 << 10

// cleanupTimeout bounds the delete sent after an acquire whose reply was
// lost.
const cleanupTimeout = 2 * time.Second

// busyRetries is how many times TryAcquire tries again at once when the
// key it found taken was free again by the time it asked who holds it.
const busyRetries = 3

// statements are the driver's SQL, with the schema's name in place.
type statements struct {
	take, busy, release, refresh, ttl, mintFence, setValue string
	acquire, releaseHold, refreshHolds, refreshMany        string
	holdTTL, setHoldValue                                  string
	// takePrefix and acquirePrefix begin take and acquire, as the server
	// shows them running (pg_stat_activity.query), in either protocol.
	takePrefix, acquirePrefix string
	inspect, forceRelease     string
	sweepLocks, sweepHolds    string
	unmark, sweepMarks        string
}

func newStatements(schema string) statements {
	s := pgx.Identifier{schema}.Sanitize()
	st := mutexStatements(s)
	st.holdStatements(s)
	st.keyStatements(schema, s)
	return st
}

// mutexStatements are a plain mutex's: its row in locks is its hold. s is
// the schema's name, quoted.
func mutexStatements(s string) statements {
	takePrefix := `INSERT INTO ` + s + `.locks AS l (key, token, value, expires_at)`
	return statements{
		takePrefix: takePrefix,
		// The mutex: one statement, as a raw INSERT is. A row whose
		// expiry has passed is taken over, under its row lock.
		take: takePrefix + `
			VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 microsecond')
			ON CONFLICT (key) DO UPDATE SET token = excluded.token, kind = 0, lim = 0, fence = NULL,
				value = excluded.value, expires_at = excluded.expires_at
			WHERE l.expires_at <= clock_timestamp()
			RETURNING 1`,
		// Who holds a key the take found taken; marks it waited for.
		busy: `UPDATE ` + s + `.locks l SET waiters = true
			WHERE l.key = $1 AND l.expires_at > clock_timestamp()
			RETURNING l.token = '', l.kind, l.lim, (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint`,
		release: `DELETE FROM ` + s + `.locks l WHERE l.key = $1 AND l.token = $2
			RETURNING l.expires_at > clock_timestamp(), CASE WHEN l.waiters THEN pg_notify($3, md5($1::bytea)) END IS NULL`,
		refresh: `UPDATE ` + s + `.locks l SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
			WHERE l.key = $1 AND l.token = $2 AND l.expires_at > clock_timestamp() RETURNING 1`,
		refreshMany: `UPDATE ` + s + `.locks l SET expires_at = clock_timestamp() + v.ttl * interval '1 microsecond'
			FROM unnest($1::bytea[], $2::text[], $3::bigint[]) AS v(key, token, ttl)
			WHERE l.key = v.key AND l.token = v.token AND l.expires_at > clock_timestamp()
			RETURNING l.key, l.token`,
		ttl: `SELECT (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint FROM ` + s + `.locks l
			WHERE l.key = $1 AND l.token = $2 AND l.expires_at > clock_timestamp()`,
		// The fence is minted while the row is ours: an UPDATE that finds
		// the row changed since it read it re-checks the condition on the
		// new row, so no other grant on the key comes between.
		mintFence: `UPDATE ` + s + `.locks l SET fence = coalesce(l.fence, nextval('` + s + `.fences'))
			WHERE l.key = $1 AND l.token = $2 AND l.expires_at > clock_timestamp() RETURNING l.fence`,
		setValue: `UPDATE ` + s + `.locks l SET value = $3
			WHERE l.key = $1 AND l.token = $2 AND l.expires_at > clock_timestamp()
			RETURNING pg_notify($4, md5($1::bytea)) IS NULL`,
	}
}

// holdStatements set the statements of shared holds and permits (rows in
// holds) and of the grants that go through acquire_v2.
func (st *statements) holdStatements(s string) {
	v := schemaVersion
	acquirePrefix := `SELECT granted, fence, mismatch, held_kind, held_lim, remaining_us FROM ` + s + `.acquire_` + v + `(`
	st.acquire = acquirePrefix + `$1, $2, $3, $4, $5, $6, $7, $8, $9)`
	st.acquirePrefix = acquirePrefix
	st.releaseHold = `SELECT released, was_live FROM ` + s + `.release_hold_` + v + `($1, $2, $3)`
	st.refreshHolds = `SELECT key, token FROM ` + s + `.refresh_holds_` + v + `($1::bytea[], $2::text[], $3::bigint[])`
	// The end of a writer's wait: its mark goes, and the readers it kept
	// out are woken.
	st.unmark = `DELETE FROM ` + s + `.writer_marks m WHERE m.key = $1 AND m.token = $2
		RETURNING pg_notify($3, md5($1::bytea)) IS NULL`
	st.holdTTL = `SELECT (extract(epoch FROM h.expires_at - clock_timestamp()) * 1000000)::bigint FROM ` + s + `.holds h
		WHERE h.key = $1 AND h.token = $2 AND h.expires_at > clock_timestamp()`
	st.setHoldValue = `UPDATE ` + s + `.holds h SET value = $3
		WHERE h.key = $1 AND h.token = $2 AND h.expires_at > clock_timestamp()
		RETURNING pg_notify($4, md5($1::bytea)) IS NULL`
}

// keyStatements set the statements about a key whatever its holds:
// Inspect, ForceRelease and the sweep.
func (st *statements) keyStatements(schema, s string) {
	st.inspect = inspectSQL(schema)
	st.forceRelease = `WITH l AS (DELETE FROM ` + s + `.locks l WHERE l.key = $1 RETURNING l.expires_at > clock_timestamp() AS live),
			h AS (DELETE FROM ` + s + `.holds h WHERE h.key = $1 RETURNING 1)
		SELECT coalesce((SELECT bool_or(l.live) FROM l), false), pg_notify($2, md5($1::bytea)) IS NULL, (SELECT count(*) FROM h)`
	// Rows whose expiry passed a while ago: their keys were not asked
	// for since. Re-checked under each row's lock, so a row taken or
	// extended meanwhile stays.
	st.sweepLocks = `DELETE FROM ` + s + `.locks l WHERE l.key IN (SELECT o.key FROM ` + s + `.locks o
			WHERE o.expires_at < clock_timestamp() - interval '1 second' LIMIT 1000)
		AND l.expires_at < clock_timestamp() - interval '1 second'`
	st.sweepHolds = `DELETE FROM ` + s + `.holds h WHERE (h.key, h.token) IN (SELECT o.key, o.token FROM ` + s + `.holds o
			WHERE o.expires_at < clock_timestamp() - interval '1 second' LIMIT 1000)
		AND h.expires_at < clock_timestamp() - interval '1 second'`
	st.sweepMarks = `DELETE FROM ` + s + `.writer_marks m WHERE (m.key, m.token) IN (SELECT o.key, o.token FROM ` + s + `.writer_marks o
			WHERE o.expires_at < clock_timestamp() - interval '1 second' LIMIT 1000)
		AND m.expires_at < clock_timestamp() - interval '1 second'`
}

type driver struct {
	pool    *pgxpool.Pool
	owned   bool // the pool was opened by the Locker, which closes it
	schema  string
	channel string // where releases and new values are notified
	sql     statements
	log     *slog.Logger
	listen  *listener

	// wantFence says that a lock of this Locker was asked for its fence:
	// from then on every exclusive acquisition mints one in its round trip
	// (acquire_v2) rather than in a round trip of its own when asked.
	wantFence atomic.Bool

	stopSweep chan struct{}
	swept     sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:          "postgres",
		Fencing:       true,
		WakeOnRelease: true,
		Shared:        true,
		Permits:       true,
		MaxValueLen:   MaxValueLen,
		// The server's timestamps are in microseconds, and every attempt
		// reads the expiry on the server's clock: a lapsed row is free at
		// once. A waiter learns of an expiry by its own next attempt,
		// which it makes when the holder's remaining TTL has passed.
		MinTTL:      time.Millisecond,
		ExpirySlack: 100 * time.Millisecond,
	}
}

func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	close(d.stopSweep)
	d.swept.Wait()
	d.listen.close()
	if d.owned {
		d.pool.Close()
	}
	return nil
}

func micros(d time.Duration) int64 { return d.Microseconds() }

func fromMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// TryAcquire takes the key: an exclusive hold with one INSERT (its fence
// minted when asked for, MintFence), or through acquire_v2 for a waiting
// Acquire (which marks the key when readers keep it out) or once a lock
// of this Locker was asked for its fence (it then mints it); a shared or
// permit hold through acquire_v2, which mints its fence too.
func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if req.Kind != backend.Exclusive || req.Waiting || d.wantFence.Load() {
		return d.acquireHold(ctx, req)
	}
	for range busyRetries {
		start := time.Now()
		var taken bool
		pid, err := d.onConn(ctx, func(c *pgxpool.Conn) error {
			rows, err := c.Query(ctx, d.sql.take, []byte(req.Key), req.Token, nullable(req.Value), micros(req.TTL))
			if err != nil {
				return err
			}
			taken = rows.Next()
			rows.Close()
			return rows.Err()
		})
		if err != nil {
			return backend.Acquisition{}, d.abandon(req, err, pid)
		}
		if taken {
			return backend.Acquisition{Held: &held{d: d, key: req.Key, token: req.Token, ttl: req.TTL}, Start: start}, nil
		}
		var family bool
		var kind int16
		var lim int32
		var remaining int64
		err = d.pool.QueryRow(ctx, d.sql.busy, []byte(req.Key)).Scan(&family, &kind, &lim, &remaining)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // released or lapsed meanwhile: try again
		case err != nil:
			return backend.Acquisition{}, d.wrap(err)
		case family && backend.Kind(kind) == backend.Permit:
			return backend.Acquisition{}, &backend.Mismatch{HeldKind: backend.Permit, HeldLimit: int(lim), Kind: req.Kind}
		}
		return backend.Acquisition{}, &backend.Busy{Remaining: fromMicros(max(remaining, 0))}
	}
	return backend.Acquisition{}, &backend.Busy{}
}

// acquireHold calls acquire_v2: a shared or permit hold, or an exclusive
// one with its fence or for a waiting Acquire. A waiting writer that
// shared holds keep out marks the key (writer_marks), so that no new
// reader comes in until it has had the key: its Busy's Withdraw takes
// the mark back when the wait ends (package locker tries again within a
// third of the TTL meanwhile, which keeps the mark alive), and a writer
// that crashed leaves it to lapse at its TTL.
func (d *driver) acquireHold(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	start := time.Now()
	var granted, mismatch bool
	var fence *int64
	var heldKind *int16
	var heldLim *int32
	var remaining *int64
	pid, err := d.onConn(ctx, func(c *pgxpool.Conn) error {
		return c.QueryRow(ctx, d.sql.acquire, []byte(req.Key), req.Token, int16(req.Kind), int32(req.Limit),
			int32(req.Weight), nullable(req.Value), micros(req.TTL), req.Kind == backend.Exclusive && d.wantFence.Load(), req.Waiting).
			Scan(&granted, &fence, &mismatch, &heldKind, &heldLim, &remaining)
	})
	if err != nil {
		if req.Waiting && req.Kind == backend.Exclusive {
			// The attempt may have marked the key, and this error ends
			// the wait.
			d.unmark(context.WithoutCancel(ctx), req.Key, req.Token)
		}
		return backend.Acquisition{}, d.abandon(req, err, pid)
	}
	switch {
	case mismatch:
		return backend.Acquisition{}, &backend.Mismatch{HeldKind: backend.Kind(deref(heldKind)), HeldLimit: int(deref(heldLim)),
			Kind: req.Kind, Limit: req.Limit}
	case !granted:
		busy := &backend.Busy{Remaining: fromMicros(max(deref(remaining), 0))}
		if req.Waiting && req.Kind == backend.Exclusive && heldKind != nil && backend.Kind(*heldKind) == backend.Shared {
			busy.Withdraw = func(ctx context.Context) { d.unmark(ctx, req.Key, req.Token) }
		}
		return backend.Acquisition{}, busy
	}
	h := &held{d: d, key: req.Key, token: req.Token, ttl: req.TTL, kind: req.Kind}
	a := backend.Acquisition{Held: h, Start: start}
	switch {
	case fence == nil:
	case req.Kind == backend.Exclusive:
		// Reported when asked for (MintFence), without a round trip: an
		// exclusive grant notifies no one, and package locker's Election
		// announces a grant that came without its fence.
		h.fence = uint64(*fence)
	default:
		a.Fence, a.Fenced = uint64(*fence), true
	}
	return a, nil
}

// unmark removes the writer mark of token on key, if there is one, and
// wakes the readers it kept out. When that fails the mark lapses by
// itself, within the writer's TTL.
func (d *driver) unmark(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if _, err := d.pool.Exec(ctx, d.sql.unmark, []byte(key), token, d.channel); err != nil {
		d.log.Debug("postgres: removing a writer's mark failed; it lapses within the writer's TTL", "key", key, "err", err)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// nullable is v, or nil (SQL NULL) when empty.
func nullable(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v
}

// onConn runs f on a connection of the pool. When f fails and the
// connection is closed for it (a context that ended while the request was
// on the wire, a connection lost), it returns the server process that may
// still be running f's statement, for abandon; 0 otherwise.
func (d *driver) onConn(ctx context.Context, f func(c *pgxpool.Conn) error) (pid uint32, err error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	if err = f(c); err != nil && c.Conn().IsClosed() {
		pid = c.Conn().PgConn().PID()
	}
	return pid, err
}

// abandon undoes an acquisition whose reply was lost or whose context
// ended mid-request: it may have been applied, or be applied yet. A
// request pgx never sent, or one the server refused (an error from the
// server: the statement was rolled back), needs nothing undone.
//
// The statement may still run on the server after its client gave up on
// it, waiting for the key's row lock: a delete issued now would not see
// it, and it would take the key after the delete. So the server process
// that ran it (pid, when its connection was closed) is terminated first,
// and waited for, before the delete by the token.
func (d *driver) abandon(req backend.Request, err error, pid uint32) error {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	if pgconn.SafeToRetry(err) || errors.As(err, &pgErr) || errors.As(err, &connectErr) {
		return d.wrap(err)
	}
	err = d.wrap(err)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if pid != 0 {
		if cerr := d.endBackend(ctx, pid); cerr != nil {
			return fmt.Errorf("%w (and the server process that ran the request, %d, could not be stopped, so the lock may be taken after all and block others for up to %v: %v)",
				err, pid, req.TTL, cerr)
		}
	}
	h := &held{d: d, key: req.Key, token: req.Token, kind: req.Kind}
	if cerr := h.Release(ctx); cerr != nil && !errors.Is(cerr, backend.ErrNotHeld) {
		return fmt.Errorf("%w (and the cleanup of a possibly taken lock failed, so it may block others for up to %v: %v)", err, req.TTL, cerr)
	}
	return err
}

// endBackend terminates server process pid, if it still runs a statement,
// and waits until it has gone: its transaction is then committed or
// rolled back for good. A role may terminate its own sessions.
//
// Only a process running one of the driver's acquisitions is terminated:
// through a pooler, the process id a connection reports is the pooler's
// own, and may name an unrelated server process.
func (d *driver) endBackend(ctx context.Context, pid uint32) error {
	var running bool
	err := d.pool.QueryRow(ctx, `SELECT coalesce(bool_or(pg_terminate_backend(a.pid)), false)
		FROM pg_stat_activity a WHERE a.pid = $1 AND a.state <> 'idle'
		AND (starts_with(a.query, $2) OR starts_with(a.query, $3))`,
		int32(pid), d.sql.takePrefix, d.sql.acquirePrefix).Scan(&running)
	if err != nil || !running {
		return err
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		var alive bool
		if err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = $1)`, int32(pid)).Scan(&alive); err != nil {
			return err
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still running after %v", cleanupTimeout)
		case <-time.After(wait):
		}
	}
}

// wrap names the backend in an error from pgx, unless the context ended:
// those are returned as they are, for package locker to recognize.
func (d *driver) wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("postgres: %w", err)
}

type held struct {
	d     *driver
	key   string
	token string
	ttl   time.Duration // as taken, for Refresh(ctx, 0)
	kind  backend.Kind
	// fence is an exclusive hold's, minted with its grant (acquire_v2);
	// 0 when it was taken without one.
	fence uint64
}

var (
	_ backend.FenceMinter    = (*held)(nil)
	_ backend.ValueSetter    = (*held)(nil)
	_ backend.BatchRefresher = (*driver)(nil)
	_ backend.Notifier       = (*driver)(nil)
	_ backend.Observer       = (*driver)(nil)
	_ backend.Inspector      = (*driver)(nil)
)

// MintFence implements backend.FenceMinter for an exclusive hold taken
// without one. From now on the Locker's exclusive acquisitions mint
// theirs in their own round trip.
func (h *held) MintFence(ctx context.Context) (uint64, error) {
	if h.fence != 0 {
		return h.fence, nil
	}
	h.d.wantFence.Store(true)
	var f int64
	err := h.d.pool.QueryRow(ctx, h.d.sql.mintFence, []byte(h.key), h.token).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, backend.ErrNotHeld
	}
	if err != nil {
		return 0, h.d.wrap(err)
	}
	return uint64(f), nil
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl == 0 {
		ttl = h.ttl
	}
	if h.kind != backend.Exclusive {
		return h.d.RefreshBatch(ctx, []backend.Held{h}, []time.Duration{ttl})[0]
	}
	tag, err := h.d.pool.Exec(ctx, h.d.sql.refresh, []byte(h.key), h.token, micros(ttl))
	if err != nil {
		return h.d.wrap(err)
	}
	if tag.RowsAffected() != 1 {
		return backend.ErrNotHeld
	}
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	q := h.d.sql.ttl
	if h.kind != backend.Exclusive {
		q = h.d.sql.holdTTL
	}
	var us int64
	err := h.d.pool.QueryRow(ctx, q, []byte(h.key), h.token).Scan(&us)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, backend.ErrNotHeld
	}
	if err != nil {
		return 0, h.d.wrap(err)
	}
	return fromMicros(max(us, 0)), nil
}

func (h *held) Release(ctx context.Context) error {
	var found, live bool
	var err error
	if h.kind == backend.Exclusive {
		// No row back: not ours. The second column only sends the notice.
		var notified bool
		err = h.d.pool.QueryRow(ctx, h.d.sql.release, []byte(h.key), h.token, h.d.channel).Scan(&live, &notified)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	} else {
		err = h.d.pool.QueryRow(ctx, h.d.sql.releaseHold, []byte(h.key), h.token, h.d.channel).Scan(&found, &live)
	}
	switch {
	case err != nil:
		return h.d.wrap(err)
	case !found || !live:
		// Gone, or lapsed (its row is gone now too).
		return backend.ErrNotHeld
	}
	return nil
}

// SetValue implements backend.ValueSetter, and notifies observers.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	q := h.d.sql.setValue
	if h.kind != backend.Exclusive {
		q = h.d.sql.setHoldValue
	}
	tag, err := h.d.pool.Exec(ctx, q, []byte(h.key), h.token, nullable(value), h.d.channel)
	if err != nil {
		return h.d.wrap(err)
	}
	if tag.RowsAffected() != 1 {
		return backend.ErrNotHeld
	}
	return nil
}

// RefreshBatch extends many locks in one round trip: exclusive holds in
// one UPDATE, shared and permit holds in one call of refresh_holds_v2, the
// two pipelined.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	var ex, sh refreshArgs
	for i, l := range locks {
		h := l.(*held)
		ttl := ttls[i]
		if ttl == 0 {
			ttl = h.ttl
		}
		if h.kind == backend.Exclusive {
			ex.add(h, ttl)
		} else {
			sh.add(h, ttl)
		}
	}
	b := &pgx.Batch{}
	ex.queue(b, d.sql.refreshMany)
	sh.queue(b, d.sql.refreshHolds)
	done, err := sendRefreshes(ctx, d.pool, b, len(locks))
	errs := make([]error, len(locks))
	for i, l := range locks {
		h := l.(*held)
		switch {
		case err != nil:
			errs[i] = d.wrap(err)
		case !done[lockRef{h.key, h.token}]:
			errs[i] = backend.ErrNotHeld
		}
	}
	return errs
}

// lockRef names a hold: its key and token.
type lockRef struct{ key, token string }

// refreshArgs are the parallel arrays of one refresh statement.
type refreshArgs struct {
	keys   [][]byte
	tokens []string
	ttls   []int64
}

func (r *refreshArgs) add(h *held, ttl time.Duration) {
	r.keys, r.tokens, r.ttls = append(r.keys, []byte(h.key)), append(r.tokens, h.token), append(r.ttls, micros(ttl))
}

// queue adds sql over r's arrays to b, if r has any lock.
func (r *refreshArgs) queue(b *pgx.Batch, sql string) {
	if len(r.keys) > 0 {
		b.Queue(sql, r.keys, r.tokens, r.ttls)
	}
}

// sendRefreshes sends b, whose statements return the (key, token) of each
// hold they extended, and returns those holds, or the first error.
func sendRefreshes(ctx context.Context, pool *pgxpool.Pool, b *pgx.Batch, n int) (map[lockRef]bool, error) {
	done := make(map[lockRef]bool, n)
	read := func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var k []byte
			var t string
			if err := rows.Scan(&k, &t); err != nil {
				return err
			}
			done[lockRef{string(k), t}] = true
		}
		return rows.Err()
	}
	br := pool.SendBatch(ctx, b)
	var err error
	for range b.Len() {
		rows, qerr := br.Query()
		if qerr == nil {
			qerr = read(rows)
		}
		if qerr != nil && err == nil {
			err = qerr
		}
	}
	if cerr := br.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return done, err
}

// Watch implements backend.Notifier: waiters are woken by the release of
// a key they found taken (the take marked its row waited for).
func (d *driver) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.listen.watch(ctx, key, nil)
}

// Observe implements backend.Observer: releases and new values are
// notified; a grant is announced by the new holder's SetValue (package
// locker's Election does), and an expiry is not notified.
func (d *driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return d.listen.watch(ctx, key, func(ctx context.Context) {
		// Mark the key's row waited for, so that its release notifies.
		d.pool.Exec(ctx, d.sql.busy, []byte(key))
	})
}

// sweep deletes, every interval, rows that lapsed and were not asked for
// since, so that keys used once do not accumulate.
func (d *driver) sweep(interval time.Duration) {
	defer d.swept.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-d.stopSweep:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		for _, q := range []string{d.sql.sweepLocks, d.sql.sweepHolds, d.sql.sweepMarks} {
			if _, err := d.pool.Exec(ctx, q); err != nil {
				d.log.Debug("postgres: sweeping lapsed locks failed; the next sweep tries again", "err", err)
			}
		}
		cancel()
	}
}
