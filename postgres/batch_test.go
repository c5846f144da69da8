package postgres_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/postgres"
)

// msgCounter counts the messages clients send on the connections it
// wraps, by type: 'S' is a Sync, which ends a round trip (the client
// then waits for the server's ReadyForQuery), 'E' an Execute, 'P' a
// Parse (a statement prepared), 'Q' a simple query.
type msgCounter struct {
	mu sync.Mutex
	n  map[byte]int
}

func (m *msgCounter) counts() map[byte]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.n)
}

// countingConn feeds what a client writes to its msgCounter.
type countingConn struct {
	net.Conn
	m       *msgCounter
	started bool   // the startup message, which has no type byte, is through
	pending []byte // the start of a message not yet whole
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.m.mu.Lock()
	c.pending = append(c.pending, p...)
	for {
		if !c.started {
			// SSLRequest, GSSENCRequest and the startup message: a
			// length, then a code or the protocol version.
			if len(c.pending) < 8 {
				break
			}
			l := int(binary.BigEndian.Uint32(c.pending))
			if len(c.pending) < l {
				break
			}
			code := binary.BigEndian.Uint32(c.pending[4:])
			c.started = code != 80877103 && code != 80877104
			c.pending = c.pending[l:]
			continue
		}
		if len(c.pending) < 5 {
			break
		}
		l := 1 + int(binary.BigEndian.Uint32(c.pending[1:]))
		if len(c.pending) < l {
			break
		}
		if c.m.n == nil {
			c.m.n = map[byte]int{}
		}
		c.m.n[c.pending[0]]++
		c.pending = c.pending[l:]
	}
	c.m.mu.Unlock()
	return c.Conn.Write(p)
}

// expiries returns the expiry of every row in schema's tables whose key
// starts with prefix, by table, key and token.
func expiries(t testing.TB, db *pgxpool.Pool, schema, prefix string) map[string]time.Time {
	t.Helper()
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := db.Query(context.Background(), `
		SELECT 'locks', key, token, expires_at FROM `+s+`.locks WHERE substr(key, 1, length($1::bytea)) = $1::bytea
		UNION ALL
		SELECT 'holds', key, token, expires_at FROM `+s+`.holds WHERE substr(key, 1, length($1::bytea)) = $1::bytea`, []byte(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var table, token string
		var key []byte
		var e time.Time
		if err := rows.Scan(&table, &key, &token, &e); err != nil {
			t.Fatal(err)
		}
		out[table+" "+string(key)+" "+token] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRefreshBatch checks the batched refresh the watchdog uses, on the
// driver itself, over 300 exclusive, shared and permit holds mixed: it is
// one round trip (one Sync, both statements pipelined in it, none
// prepared again); every lock still held is extended, in the holds table
// and in its family's row; another holder of a shared key is not; and
// each lock whose key was released by force is told ErrNotHeld while the
// others succeed, its key left free.
func TestRefreshBatch(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	m := &msgCounter{}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	// One connection: every statement is prepared on it by the warm-up.
	cfg.MaxConns = 1
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, m: m}, nil
	}
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d := postgres.NewDriver(t, pool, s)

	const n = 300
	prefix := uniqueKey(t) + "/"
	var (
		helds  []backend.Held
		keys   []string
		kindOf []backend.Kind
	)
	for i := range n {
		req := backend.Request{Key: fmt.Sprintf("%s%d", prefix, i), Token: fmt.Sprint("t", i), TTL: 10 * time.Second, Weight: 1}
		switch i % 3 {
		case 1:
			req.Kind = backend.Shared
		case 2:
			req.Kind, req.Limit = backend.Permit, 2
		}
		a, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Fatalf("TryAcquire %d: %v", i, err)
		}
		helds, keys, kindOf = append(helds, a.Held), append(keys, req.Key), append(kindOf, req.Kind)
		if req.Kind != backend.Exclusive && i%2 == 0 {
			// Another holder of the key, left out of the batch.
			req.Token = fmt.Sprint("other", i)
			if _, err := d.TryAcquire(ctx, req); err != nil {
				t.Fatalf("TryAcquire of the other holder of %d: %v", i, err)
			}
		}
	}
	batcher := d.(backend.BatchRefresher)
	ttls := func(n int, ttl time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = ttl
		}
		return out
	}
	// The warm-up prepares both statements on the connection.
	for i, err := range batcher.RefreshBatch(ctx, helds[:3], ttls(3, 10*time.Second)) {
		if err != nil {
			t.Fatalf("warm-up refresh of lock %d: %v", i, err)
		}
	}
	// One key of each kind released by force.
	forced := map[int]bool{30: true, 31: true, 32: true}
	for i := range forced {
		if ok, err := d.(backend.Inspector).ForceRelease(ctx, keys[i]); err != nil || !ok {
			t.Fatalf("ForceRelease of %s: %v, %v", keys[i], ok, err)
		}
	}
	before := expiries(t, admin, s, prefix)

	sent := m.counts()
	errs := batcher.RefreshBatch(ctx, helds, ttls(n, time.Minute))
	after := m.counts()
	if syncs, execs, parses, queries := after['S']-sent['S'], after['E']-sent['E'], after['P']-sent['P'], after['Q']-sent['Q']; syncs != 1 || execs != 2 || parses != 0 || queries != 0 {
		t.Errorf("RefreshBatch of %d locks sent %d Syncs, %d Executes, %d Parses, %d simple queries; want one round trip: 1 Sync, 2 Executes, nothing prepared", n, syncs, execs, parses, queries)
	}
	if len(errs) != n {
		t.Fatalf("RefreshBatch returned %d outcomes for %d locks", len(errs), n)
	}
	for i, err := range errs {
		switch {
		case forced[i] && !errors.Is(err, backend.ErrNotHeld):
			t.Errorf("refresh of force-released lock %d (%v): %v, want ErrNotHeld", i, kindOf[i], err)
		case !forced[i] && err != nil:
			t.Errorf("refresh of lock %d (%v): %v", i, kindOf[i], err)
		}
	}

	now := expiries(t, admin, s, prefix)
	moved := func(table string, i int, token string) {
		t.Helper()
		k := table + " " + keys[i] + " " + token
		b, a := before[k], now[k]
		if b.IsZero() || a.IsZero() || a.Sub(b) < 40*time.Second {
			t.Errorf("%s row of lock %d (%v, token %q): expiry %v, then %v; want it a minute on", table, i, kindOf[i], token, b, a)
		}
	}
	for i := range n {
		if forced[i] {
			if tb := readTables(t, admin, s, keys[i]); !tb.empty() {
				t.Errorf("force-released key %d after the refresh: %v, want no row", i, tb)
			}
			continue
		}
		if kindOf[i] == backend.Exclusive {
			moved("locks", i, fmt.Sprint("t", i))
			continue
		}
		moved("holds", i, fmt.Sprint("t", i))
		moved("locks", i, "") // the family's row carries its latest expiry
		if other := "holds " + keys[i] + " " + fmt.Sprint("other", i); i%2 == 0 && !now[other].Equal(before[other]) {
			t.Errorf("the other holder of key %d, left out of the batch: expiry %v, then %v; want it unchanged", i, before[other], now[other])
		}
	}
}
