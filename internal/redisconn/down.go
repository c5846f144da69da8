package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
)

// A server whose dial failed is down: the requests that follow fail at
// once with a *DownError, without reaching the client library, until a
// check finds the server up again. The check is a dial of our own, made
// by the client's own dial function, so it costs the server one
// connection and logs nothing. It runs inline, in the first request that
// arrives once downMin has passed since the failure, then twice as long
// after each check that fails, up to downMax; a request that gets an
// answer starts the next outage at downMin again.
//
// Why: go-redis logs every failed dial through its process-wide logger,
// on stderr unless the application routed it (see the redis package's
// RouteClientLogs). Left alone, a Locker whose server is down dials it,
// and go-redis logs a line, for every request (every acquire attempt,
// refresh, release and cleanup) until its pool gives up dialing after
// PoolSize (10 per CPU) failures. With the down state the lines of one
// outage are those of the requests in flight when it began, and after
// that the checks dial it at most 60s/downMax times a minute. A request
// turned away meanwhile would have failed all the same, only later: the
// cost is that a server that comes back is used again up to downMax late.
//
// Only a dial that fails marks a server down: a connection refused, an
// unreachable host, a dial that timed out. A server that answers slowly,
// or drops a connection it accepted, is dialled as before. A dial cut
// short by the caller's context says nothing about the server and marks
// nothing.
var (
	downMin = 100 * time.Millisecond
	downMax = 5 * time.Second
)

// DownError is the error of a request that was not sent because its
// server was found down; see the package's down state. Err is the last
// failure, reachable with errors.As (a *net.OpError for a refused
// connection).
type DownError struct {
	Addr  string // the server's host:port, or "" when the client does not say
	Since time.Time
	Err   error
}

func (e *DownError) Error() string {
	server := "server"
	if e.Addr != "" {
		server += " " + e.Addr
	}
	return fmt.Sprintf("%s down since %s, not asked (a request dials it again after a back-off of up to %v): %v",
		server, e.Since.Format(time.TimeOnly), downMax, e.Err)
}

func (e *DownError) Unwrap() error { return e.Err }

// NotSent reports whether err says that a request never left: its server
// was known to be down, so it never reached the client library. Cleaning
// up after such a request is pointless. (A failed dial alone does not
// say as much: the client may have sent the request on a connection that
// broke, and failed to dial for its retry.)
func NotSent(err error) bool {
	var down *DownError
	return errors.As(err, &down)
}

// dialFailed reports whether err is a failed dial: whatever the client
// library, Go's dialers report one as a *net.OpError with Op "dial".
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// guard is a Conn that keeps the down state of the one server behind it.
type guard struct {
	Conn
	addr string
	// check dials the server once, silently, and closes the connection.
	check func(ctx context.Context) error
	now   func() time.Time // the clock; replaced in tests

	down atomic.Pointer[DownError] // non-nil while down
	// backoff is non-zero from a failure until a request gets an answer,
	// so that a request that answers resets it without taking mu.
	backoff  atomic.Bool
	mu       sync.Mutex
	delay    time.Duration // from the last failure to the next check
	next     time.Time     // when a check may run
	checking bool          // a check is in flight: others fail at once
}

// guardGoRedis adds the down state to a Conn over a go-redis client of
// one server (or a Sentinel failover client, whose dial asks the
// Sentinels for the master). Cluster and Ring clients keep track of their
// nodes themselves, so they are left alone.
func guardGoRedis(conn Conn, c goredis.UniversalClient) Conn {
	cl, ok := c.(*goredis.Client)
	if !ok {
		return conn
	}
	o := cl.Options()
	addr := o.Addr
	if addr == "FailoverClient" { // go-redis's name for the master, whichever it is
		addr = ""
	}
	return &guard{Conn: conn, addr: addr, now: time.Now, check: func(ctx context.Context) error {
		c, err := o.Dialer(ctx, o.Network, o.Addr)
		if err != nil {
			return err
		}
		c.Close()
		return nil
	}}
}

// guardRedigo adds the down state to a Conn over a redigo pool. The check
// dials through the pool's own dial function, not the pool, which could
// hand out an idle connection that died with the server.
func guardRedigo(conn Conn, p *redigo.Pool) Conn {
	return &guard{Conn: conn, now: time.Now, check: func(ctx context.Context) error {
		var c redigo.Conn
		var err error
		switch {
		case p.DialContext != nil:
			c, err = p.DialContext(ctx)
		case p.Dial != nil:
			c, err = p.Dial()
		default:
			return errors.New("redigo: the pool has neither Dial nor DialContext")
		}
		if err != nil {
			return err
		}
		c.Close()
		return nil
	}}
}

// admit returns nil when a request may go to the server, or the
// *DownError to fail it with. Once the delay has passed, the first
// request checks the server (concurrent ones fail meanwhile) and goes on
// if it is up.
func (g *guard) admit(ctx context.Context) error {
	d := g.down.Load()
	if d == nil {
		return nil
	}
	if ctx.Err() != nil {
		return d // a check now would fail for the caller's sake, not the server's
	}
	g.mu.Lock()
	if g.checking || g.now().Before(g.next) {
		g.mu.Unlock()
		return d
	}
	g.checking = true
	g.mu.Unlock()
	err := g.check(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checking = false
	if err == nil {
		g.down.CompareAndSwap(d, nil)
		return nil
	}
	// A check cut short by the caller's deadline counts as a failure
	// too: a server that does not accept a connection in that time is
	// of no use to the caller, and counting it keeps the checks rare.
	g.delay = min(2*g.delay, downMax)
	g.next = g.now().Add(g.delay)
	nd := &DownError{Addr: g.addr, Since: d.Since, Err: err}
	g.down.CompareAndSwap(d, nd)
	return nd
}

// observe records the outcome of a request that went to the server.
func (g *guard) observe(ctx context.Context, err error) {
	switch {
	case err == nil || IsServerError(err):
		if g.backoff.Load() {
			g.mu.Lock()
			g.delay = 0
			g.backoff.Store(false)
			g.mu.Unlock()
		}
		if d := g.down.Load(); d != nil {
			g.down.CompareAndSwap(d, nil)
		}
	case dialFailed(err) && ctx.Err() == nil:
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.down.Load() != nil {
			return // another request found it down first
		}
		if g.delay == 0 {
			g.delay = downMin
		} else {
			// Up again by a check, and down at the first dial: the
			// server flaps, or accepts our checks and not the client's.
			g.delay = min(2*g.delay, downMax)
		}
		g.backoff.Store(true)
		g.next = g.now().Add(g.delay)
		g.down.Store(&DownError{Addr: g.addr, Since: g.now(), Err: err})
	}
}

func (g *guard) Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	if err := g.admit(ctx); err != nil {
		return nil, err
	}
	v, err := g.Conn.Eval(ctx, s, keys, args...)
	g.observe(ctx, err)
	return v, err
}

func (g *guard) EvalMany(ctx context.Context, s *Script, calls []Call) []Reply {
	if err := g.admit(ctx); err != nil {
		out := make([]Reply, len(calls))
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	out := g.Conn.EvalMany(ctx, s, calls)
	// One answer is enough to know the server is up.
	var err error
	for _, r := range out {
		if err = r.Err; err == nil || IsServerError(err) {
			break
		}
	}
	g.observe(ctx, err)
	return out
}

func (g *guard) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	if err := g.admit(ctx); err != nil {
		return false, err
	}
	ok, err := g.Conn.SetNX(ctx, key, value, ttl)
	g.observe(ctx, err)
	return ok, err
}

func (g *guard) Subscribe(ctx context.Context) (PubSub, error) {
	if err := g.admit(ctx); err != nil {
		return nil, err
	}
	ps, err := g.Conn.Subscribe(ctx)
	g.observe(ctx, err)
	return ps, err
}

// Servers lets Open's checks reach the server whatever its state, and
// records what they find: a server that failed the eviction check's dial
// at Open is not dialled again by the first requests.
func (g *guard) Servers(ctx context.Context) ([]Server, error) {
	ss, err := g.Conn.Servers(ctx)
	for i, s := range ss {
		ss[i] = guardedServer{s, g}
	}
	return ss, err
}

type guardedServer struct {
	Server
	g *guard
}

func (s guardedServer) ConfigGet(ctx context.Context, name string) (string, error) {
	v, err := s.Server.ConfigGet(ctx, name)
	s.g.observe(ctx, err)
	return v, err
}
