package zkclient

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// State is what a Change reports.
type State int

const (
	// StateConnected: a server granted the session, a new one or the same
	// one resumed, on a new connection. Nothing has been sent on that
	// connection yet.
	StateConnected State = iota + 1
	// StateDisconnected: the connection dropped. The session may be alive;
	// the Conn is reconnecting. Requests in flight failed with
	// ErrConnectionClosed (their outcome is unknown); new ones wait for the
	// next connection.
	StateDisconnected
	// StateExpired: a server refused to resume the session, which it has
	// expired, and its ephemeral nodes with it. Watches ended; requests
	// waiting for a connection failed with ErrSessionExpired. The Conn goes
	// on with a new session.
	StateExpired
	// StateAuthFailed: a server refused the credentials of AddAuth. The Conn
	// is unusable from then on.
	StateAuthFailed
)

func (s State) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateDisconnected:
		return "disconnected"
	case StateExpired:
		return "expired"
	case StateAuthFailed:
		return "auth failed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// A Change is a change of the connection's or the session's state.
type Change struct {
	State   State
	Server  string        // the server it concerns, host:port
	Session int64         // StateConnected: the session granted
	Timeout time.Duration // StateConnected: the session timeout granted
}

// Config says how to connect.
type Config struct {
	// Servers are the ensemble's members, host:port, tried in a random
	// order and then in turn.
	Servers []string
	// SessionTimeout is the timeout asked for on every connect. The server
	// grants it clamped to its minSessionTimeout and maxSessionTimeout:
	// StateConnected says what it granted.
	SessionTimeout time.Duration
	// OnChange, if set, is called on every change of state, in order, on
	// the Conn's goroutine: it must not block, wait for a reply, or call
	// Close. For StateConnected it runs before anything is sent on the
	// new connection.
	OnChange func(Change)
	// Dial makes the connections; default net.Dialer's DialContext.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// Logger gets the connection's comings and goings at debug level;
	// default none.
	Logger *slog.Logger
}

// Timing of the connection, as fractions of the session timeout granted.
// The server expires a session it has not heard from for its timeout: a
// client that sends something every third of it stays alive across a
// lost packet or two, and one that has heard nothing for two thirds has
// a third left to find another server before the session can expire.
const (
	closeWait    = 2 * time.Second // for the server's answer to closeSession
	maxBackoff   = time.Second     // between passes over the servers that all failed
	firstBackoff = 10 * time.Millisecond
	stable       = time.Second // a connection that lasts less is followed by a pause
	minAnswer    = time.Second // the shortest wait for the answer to a session request
	bufSize      = 32 << 10
)

// connectTimeout bounds a dial and handshake with one of n servers: the
// session timeout shared among them (as the Java client does), so that a
// slow link still resumes the session (the server keeps it that long) and
// a pass over every server fits in the session's life; at least a second.
func connectTimeout(session time.Duration, n int) time.Duration {
	return max(session/time.Duration(n), time.Second)
}

// answerTimeout bounds the wait for the answer to a session request sent
// on a connection just made, within connect, connectTimeout's bound: an
// eighth of it (at least minAnswer), or three times rtt, the slowest round
// trip the latest connection showed, if that is longer; doubled for each
// of the unanswered requests sent since the last answered one.
//
// Waiting out the whole of connect for every request would let one
// connection that is accepted and never answered hold the session up for
// as long as the server keeps it: a ZooKeeper server that is starting
// accepts connections before it serves them, and one it fails to refuse
// (3.8's NIOServerCnxn.close throws before closing the socket while the
// database is not loaded yet) stays open and silent for good. The next
// request, on a new connection, is answered once the server runs. A link
// slow enough to miss the first bound gets a longer one on each try, up
// to connect; one already seen to be slow (a handshake that took long, a
// connection dropped for silence) gets the bound it needs at once, so that
// it resumes its session at the first try as it did with connect alone.
func answerTimeout(connect, rtt time.Duration, unanswered int) time.Duration {
	d := max(connect/8, minAnswer, 3*rtt)
	for i := 0; i < unanswered && d < connect; i++ {
		d *= 2
	}
	return min(d, connect)
}

// A Conn is a ZooKeeper session over one connection at a time. Its
// methods may be called from any goroutine.
type Conn struct {
	cfg     Config
	servers []string
	askMs   int32
	log     *slog.Logger
	ctx     context.Context // ended by Close: stops a dial
	cancel  context.CancelFunc
	closing chan struct{} // closed by Close
	done    chan struct{} // closed when run returns
	first   chan struct{} // closed on the first session granted
	closer  sync.Once
	ending  atomic.Bool // Close began: requests are refused, drops not reported
	// closeSent: the closeSession request went out on a connection, so
	// the server hanging up on it ends the session and there is nothing
	// to reconnect for. Until then, a Close between connections waits for
	// the next one to send it.
	closeSent atomic.Bool
	lastErr   atomic.Pointer[error]
	session   atomic.Int64
	granted   atomic.Int64 // ns
	server    atomic.Pointer[string]
	lastSent  atomic.Int64 // unix ns of the latest write

	// wmu orders the sending: xids are handed out, requests queued as
	// pending and written under it, so that pending is in the order of
	// the wire. It is never held while waiting for the server, only for
	// a write.
	wmu     sync.Mutex
	nc      net.Conn // the connection requests go out on; nil while there is none
	dialing net.Conn // a connection being set up, for Close to cut short
	closed  error    // why requests are refused; nil while the Conn is open
	xid     int32
	queued  []*request // sent while there was no connection: for the next one
	auths   []auth     // credentials, sent again on every connection
	wbuf    []byte

	// pmu guards the requests on the wire, in the order they went out:
	// the server answers a session's requests in that order.
	pmu      sync.Mutex
	pending  queue
	authWait []chan error // AddAuth callers awaiting a reply, in order; nil for a resend

	// The session's watches, by path. The connection's goroutine sets,
	// fires and sets them again; Unwatch, on a caller's goroutine, takes
	// one out: wlk guards the maps, and is taken after wmu and pmu, never
	// before.
	wlk      sync.Mutex
	watches  map[string][]chan gozk.Event // data watches
	children map[string][]chan gozk.Event // child watches
	exists   map[string][]chan gozk.Event // exists watches: on a node that did not exist

	// run's own: the connection's goroutine alone uses them.
	passwd   []byte
	lastZxid int64
	curSrv   string
	// rtt is the slowest round trip the latest connection showed: its
	// handshake's, or the silence that ended it. unanswered counts the
	// session requests that got no answer in time since the last one
	// answered. Both set how long the next one is waited for
	// (answerTimeout).
	rtt        time.Duration
	unanswered int
}

type auth struct {
	scheme string
	data   []byte
	wait   chan error // the AddAuth caller, until the first send
}

var errExpired = errors.New("session expired")

// Connect opens a session with one of cfg.Servers and returns once a
// server granted it, or fails when ctx ends first, naming the last reason
// a server could not be reached. The Conn then keeps the session alive,
// reconnecting (to the next server) whenever the connection drops, until
// Close.
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("zk: no servers")
	}
	ms := cfg.SessionTimeout.Milliseconds()
	if ms < 1 || ms > math.MaxInt32 {
		return nil, fmt.Errorf("zk: session timeout %v out of range", cfg.SessionTimeout)
	}
	c := &Conn{
		cfg:      cfg,
		servers:  append([]string(nil), cfg.Servers...),
		askMs:    int32(ms),
		log:      cfg.Logger,
		closing:  make(chan struct{}),
		done:     make(chan struct{}),
		first:    make(chan struct{}),
		watches:  map[string][]chan gozk.Event{},
		children: map[string][]chan gozk.Event{},
		exists:   map[string][]chan gozk.Event{},
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	rand.Shuffle(len(c.servers), func(i, j int) { c.servers[i], c.servers[j] = c.servers[j], c.servers[i] })
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
	select {
	case <-c.first:
		return c, nil
	case <-ctx.Done():
	}
	select {
	case <-c.first: // granted as ctx ended: a session is worth more than an error
		return c, nil
	default:
	}
	why := ctx.Err()
	if e := c.lastErr.Load(); e != nil {
		why = *e
	}
	c.Close()
	return nil, fmt.Errorf("zk: no session with %v: %w", cfg.Servers, why)
}

// SessionID returns the current session's id; 0 while a new session is
// being set up after an expiry.
func (c *Conn) SessionID() int64 { return c.session.Load() }

// Server returns the server of the latest connection, host:port.
func (c *Conn) Server() string {
	if s := c.server.Load(); s != nil {
		return *s
	}
	return ""
}

// Granted returns the session timeout the server granted on the latest
// connection.
func (c *Conn) Granted() time.Duration { return time.Duration(c.granted.Load()) }

// Close ends the session (the server deletes its ephemeral nodes at once)
// and the connection. Requests waiting for a reply fail with ErrClosing.
// Between connections, the session is ended on the next one, if a server
// is reached within closeWait; otherwise the server expires it a session
// timeout after it last heard from the client.
func (c *Conn) Close() {
	c.closer.Do(func() {
		c.wmu.Lock()
		open := c.closed == nil && c.session.Load() != 0
		c.wmu.Unlock()
		if open {
			c.ending.Store(true) // from now on, requests fail with ErrClosing
			r, e := begin(opCloseSession)
			r.end(e)
			c.send(r)
			t := time.NewTimer(closeWait)
			select {
			case <-r.done:
			case <-t.C:
			}
			t.Stop()
		}
		c.cancel()
		close(c.closing)
		c.wmu.Lock()
		if c.closed == nil {
			c.closed = gozk.ErrClosing
		}
		for _, nc := range []net.Conn{c.nc, c.dialing} {
			if nc != nil {
				nc.Close()
			}
		}
		q := c.queued
		c.queued = nil
		c.wmu.Unlock()
		for _, r := range q {
			r.complete(gozk.ErrClosing)
		}
		<-c.done
	})
}

func (c *Conn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// run connects, serves the connection until it drops, and connects
// again, until Close.
func (c *Conn) run() {
	defer close(c.done)
	defer c.shutdown()
	failures := 0
	backoff := firstBackoff
	for i := 0; !c.isClosing(); i++ {
		server := c.servers[i%len(c.servers)]
		nc, fr, err := c.connect(server)
		switch {
		case c.isClosing():
			if nc != nil {
				nc.Close()
			}
			return
		case errors.Is(err, errExpired):
			c.expire(server)
			i-- // that server is up: ask it for a new session
			continue
		case errors.Is(err, gozk.ErrAuthFailed):
			c.authFailed(server)
			return
		case err != nil:
			c.log.Debug("zk: no connection", "server", server, "err", err)
			c.lastErr.Store(&err)
			if failures++; failures%len(c.servers) != 0 {
				continue
			}
			// A whole pass failed: what waits for a connection fails too,
			// rather than waiting for as long as the servers are away.
			c.failQueued(gozk.ErrNoServer)
			if !c.pause(rand.N(backoff) + backoff/2) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		failures = 0
		start := time.Now()
		err = c.serve(nc, fr)
		c.drop(nc, server, err)
		switch {
		case errors.Is(err, gozk.ErrAuthFailed):
			c.authFailed(server)
			return
		case c.closeSent.Load():
			<-c.closing
			return
		case time.Since(start) < stable:
			// A server that grants the session and drops it at once
			// would otherwise be dialled in a busy loop.
			if !c.pause(rand.N(backoff) + backoff/2) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
		default:
			backoff = firstBackoff
		}
	}
}

// pause waits d, or until Close: false then.
func (c *Conn) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.closing:
		return false
	}
}

func (c *Conn) notify(ch Change) {
	if c.cfg.OnChange != nil {
		c.cfg.OnChange(ch)
	}
}

// connect dials server, opens or resumes the session on it (adopt), and
// opens the connection to requests (open). The dial and the handshake
// share connectTimeout; the answer to the session request is waited for
// no longer than answerTimeout.
func (c *Conn) connect(server string) (net.Conn, *frameReader, error) {
	timeout := connectTimeout(c.cfg.SessionTimeout, len(c.servers))
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	nc, err := c.dial(ctx, server)
	if err != nil {
		return nil, nil, err
	}
	deadline, _ := ctx.Deadline() // the dial and the handshake share the timeout
	if d := time.Now().Add(answerTimeout(timeout, c.rtt, c.unanswered)); d.Before(deadline) {
		deadline = d
	}
	fr, resp, err := c.handshake(nc, deadline)
	c.wmu.Lock()
	c.dialing = nil // from here Close finds the connection in c.nc, or open finds Close
	c.wmu.Unlock()
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	c.adopt(server, resp)
	if err := c.open(nc, timeout); err != nil {
		return nil, nil, err
	}
	return nc, fr, nil
}

// dial connects to server and keeps the connection where Close can cut its
// handshake short.
func (c *Conn) dial(ctx context.Context, server string) (net.Conn, error) {
	dial := c.cfg.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", server)
	if err != nil {
		return nil, dialErr(err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed != nil {
		nc.Close()
		return nil, c.closed
	}
	c.dialing = nc
	return nc, nil
}

// adopt takes the session the server granted on server: its id, password
// and timeout. Watches set in another session (one that ended unseen) end.
func (c *Conn) adopt(server string, resp connectResponse) {
	old := c.session.Load()
	c.session.Store(resp.session)
	c.passwd = resp.passwd
	granted := time.Duration(resp.timeout) * time.Millisecond
	c.granted.Store(int64(granted))
	c.server.Store(&server)
	c.curSrv = server
	if old != resp.session {
		c.endWatches(gozk.ErrSessionExpired, gozk.StateExpired)
	}
	c.log.Debug("zk: connected", "server", server, "session", fmt.Sprintf("%#x", resp.session), "timeout", granted, "resumed", old == resp.session)
	c.notify(Change{State: StateConnected, Server: server, Session: resp.session, Timeout: granted})
	select {
	case <-c.first:
	default:
		close(c.first)
	}
}

// open makes nc the connection requests go out on, sending first, in one
// write: the credentials, the watches set in the session, then what waited
// for a connection. It fails only when Close came first.
func (c *Conn) open(nc net.Conn, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed != nil {
		nc.Close()
		return c.closed
	}
	e := encoder{b: c.wbuf[:0]}
	var waits []chan error
	for i := range c.auths {
		a := &c.auths[i]
		encodeAuth(&e, a.scheme, a.data)
		waits = append(waits, a.wait)
		a.wait = nil
	}
	c.encodeSetWatches(&e)
	c.pmu.Lock()
	c.authWait = append(c.authWait, waits...)
	for _, r := range c.queued {
		c.pending.push(r)
		e.b = append(e.b, r.frame...)
		if r.op == opCloseSession {
			c.closeSent.Store(true)
		}
	}
	c.pmu.Unlock()
	clear(c.queued)
	c.queued = c.queued[:0]
	c.wbuf = e.b[:0]
	if len(e.b) > 0 {
		// Nothing reads the connection yet to notice a server that stopped
		// reading it: the write has a deadline of its own.
		c.lastSent.Store(time.Now().UnixNano())
		nc.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := nc.Write(e.b); err != nil {
			nc.Close() // serve fails at once, and drop fails what is pending
		}
		nc.SetWriteDeadline(time.Time{})
	}
	c.nc = nc
	return nil
}

// handshake sends the connect request and reads the server's answer,
// both by deadline, and keeps the round trip, or the request's going
// unanswered, for the next one's bound (answerTimeout).
func (c *Conn) handshake(nc net.Conn, deadline time.Time) (*frameReader, connectResponse, error) {
	nc.SetDeadline(deadline)
	req := connectRequest{lastZxid: c.lastZxid, timeout: c.askMs, session: c.session.Load(), passwd: c.passwd}
	sent := time.Now()
	c.lastSent.Store(sent.UnixNano())
	fr := newFrameReader(nc)
	resp, err := requestSession(nc, fr, &req)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.unanswered++
		return nil, resp, fmt.Errorf("%w (waited %v)", err, time.Since(sent).Round(time.Millisecond))
	}
	if err != nil {
		return nil, resp, err
	}
	c.rtt, c.unanswered = time.Since(sent), 0
	if resp.timeout <= 0 {
		if req.session != 0 {
			return nil, resp, errExpired
		}
		return nil, resp, errors.New("the server refused a new session")
	}
	nc.SetDeadline(time.Time{})
	return fr, resp, nil
}

// encodeSetWatches appends the packets that set the session's data,
// exists and child watches on a new connection. The server fires at once
// those whose node changed after the last zxid this client saw (an exists
// watch, those whose node exists now).
func (c *Conn) encodeSetWatches(e *encoder) {
	c.wlk.Lock()
	defer c.wlk.Unlock()
	if len(c.watches)+len(c.children)+len(c.exists) == 0 {
		return
	}
	var data, exist, child []string
	size := 0
	flush := func() {
		at := e.begin(xidSetWatches, opSetWatches)
		e.int64(c.lastZxid)
		e.strings(data)
		e.strings(exist)
		e.strings(child)
		e.end(at)
		data, exist, child, size = data[:0], exist[:0], child[:0], 0
	}
	add := func(batch *[]string, p string) {
		if size+4+len(p) > maxSetWatches && size > 0 {
			flush()
		}
		*batch = append(*batch, p)
		size += 4 + len(p)
	}
	for p := range c.watches {
		add(&data, p)
	}
	for p := range c.exists {
		add(&exist, p)
	}
	for p := range c.children {
		add(&child, p)
	}
	flush()
}

// serve reads the connection until it fails, pinging the server whenever
// nothing was sent for a third of the session timeout, and giving up on
// it when nothing came for two thirds.
func (c *Conn) serve(nc net.Conn, fr *frameReader) error {
	timeout := time.Duration(c.granted.Load())
	recvTimeout, pingEvery := timeout*2/3, timeout/3
	lastRecv := time.Now()
	// A deadline is only ever earlier than due (lastRecv and the last
	// send only move forward), so it is set again only once reached.
	deadline := func() time.Time {
		recv, ping := lastRecv.Add(recvTimeout), time.Unix(0, c.lastSent.Load()).Add(pingEvery)
		if ping.Before(recv) {
			return ping
		}
		return recv
	}
	nc.SetReadDeadline(deadline())
	for {
		b, err := fr.next()
		if err == nil {
			lastRecv = time.Now()
			if err := c.dispatch(b); err != nil {
				return err
			}
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		now := time.Now()
		if silence := now.Sub(lastRecv); silence >= recvTimeout {
			// The link may be that slow rather than the server gone: the
			// next handshake waits long enough for an answer over it.
			c.rtt = max(c.rtt, silence)
			return fmt.Errorf("nothing received for %v", silence.Round(time.Millisecond))
		}
		if now.Sub(time.Unix(0, c.lastSent.Load())) >= pingEvery {
			c.ping(nc)
		}
		next := deadline()
		if soon := now.Add(pingEvery / 8); next.Before(soon) {
			// The ping waits for a write under way: look again a little
			// later, or at the receive deadline if that comes first.
			next = soon
			if recv := lastRecv.Add(recvTimeout); recv.Before(next) {
				next = recv
			}
		}
		nc.SetReadDeadline(next)
	}
}

// ping sends a ping on nc, unless a write is under way (which keeps the
// session alive as well, and may be stuck on a server that stopped
// reading: the receive timeout handles that).
func (c *Conn) ping(nc net.Conn) {
	if !c.wmu.TryLock() {
		return
	}
	defer c.wmu.Unlock()
	if c.nc != nc {
		return
	}
	var b [12]byte
	e := encoder{b: b[:0]}
	e.end(e.begin(xidPing, opPing))
	c.lastSent.Store(time.Now().UnixNano())
	if _, err := nc.Write(e.b); err != nil {
		nc.Close()
	}
}

// dispatch handles one packet from the server.
func (c *Conn) dispatch(b []byte) error {
	d := decoder{b: b}
	xid := d.int32()
	zxid := d.int64()
	code := d.int32()
	if d.err != nil {
		return d.err
	}
	switch xid {
	case xidNotification:
		return c.notification(&d)
	case xidPing:
		return nil
	case xidSetWatches:
		c.setWatchesReply(code)
		return nil
	case xidAuth:
		return c.authReply(code)
	}
	return c.reply(xid, zxid, code, &d)
}

// setWatchesReply handles the answer to the watches set again on a new
// connection: on a failure the server holds none of them, so each is told
// that it will not fire.
func (c *Conn) setWatchesReply(code int32) {
	if code != 0 {
		c.log.Debug("zk: setting watches again failed", "err", codeError(code))
		c.endWatches(codeError(code), gozk.StateSyncConnected)
	}
}

// authReply hands the server's answer to the oldest auth awaiting one.
func (c *Conn) authReply(code int32) error {
	c.pmu.Lock()
	var w chan error
	ok := len(c.authWait) > 0
	if ok {
		w = c.authWait[0]
		c.authWait = c.authWait[1:]
	}
	c.pmu.Unlock()
	if !ok {
		return fmt.Errorf("%w: an auth reply no auth asked for", ErrProtocol)
	}
	err := codeError(code)
	if w != nil {
		w <- err
	}
	if err != nil {
		return gozk.ErrAuthFailed
	}
	return nil
}

// reply completes the request awaiting the reply d holds the body of:
// the oldest pending one, which must have its xid.
func (c *Conn) reply(xid int32, zxid int64, code int32, d *decoder) error {
	c.pmu.Lock()
	r := c.pending.peek()
	if r != nil && r.xid == xid {
		c.pending.pop()
	}
	c.pmu.Unlock()
	if r == nil || r.xid != xid {
		return fmt.Errorf("%w: a reply to request %d, which is not the next one awaiting its reply", ErrProtocol, xid)
	}
	r.zxid, r.session = zxid, c.session.Load()
	err := codeError(code)
	if err == nil {
		if r.decode(d); d.err != nil {
			r.complete(errMalformed)
			return d.err
		}
		// A reply that contradicts its request ends the connection as
		// a malformed one does: the stream is not to be trusted.
		if err := r.contradiction(); err != nil {
			r.complete(err)
			return err
		}
	}
	// Only a reply that matched its request counts as seen: a server
	// refuses a client that claims a later zxid than it has.
	if zxid > c.lastZxid {
		c.lastZxid = zxid
	}
	if r.watch != nil {
		c.setWatch(r, err)
	}
	r.complete(err)
	return nil
}

// setWatch records the watch a request set, if its reply says the server
// set it: a read's on success; an exists request's also on ErrNoNode,
// which the server answers with a watch for the node's creation.
func (c *Conn) setWatch(r *request, err error) {
	var ws map[string][]chan gozk.Event
	switch {
	case err == nil && r.op == opGetChildren2:
		ws = c.children
	case err == nil:
		ws = c.watches // an exists watch on a node that exists is a data watch
	case r.op == opExists && errors.Is(err, gozk.ErrNoNode):
		ws = c.exists
	default:
		return
	}
	c.wlk.Lock()
	ws[r.watchPath] = append(ws[r.watchPath], r.watch)
	c.wlk.Unlock()
}

// errMalformed is the outcome of a request whose reply did not decode:
// unknown, as for a reply lost with the connection.
var errMalformed = fmt.Errorf("%w: %w", gozk.ErrConnectionClosed, ErrProtocol)

// notification delivers a watch event to the watches it fires, as the
// Java client does: a node created, deleted or changed fires the data and
// exists watches on its path; a child created or deleted the child
// watches; and a deletion both (the server sends one event for the two).
func (c *Conn) notification(d *decoder) error {
	typ := d.int32()
	state := d.int32()
	path := d.string()
	if d.err != nil {
		return d.err
	}
	ev := gozk.Event{Type: gozk.EventType(typ), State: gozk.State(state), Path: path, Server: c.curSrv}
	c.wlk.Lock()
	defer c.wlk.Unlock()
	if typ == evNodeCreated || typ == evNodeDeleted || typ == evNodeDataChanged {
		fire(c.watches, ev)
		fire(c.exists, ev)
	}
	if typ == evNodeDeleted || typ == evNodeChildrenChanged {
		fire(c.children, ev)
	}
	return nil // no other kind of watch is set
}

// fire sends ev to the watches of ws on its path, which it removes: a
// watch fires once. Its channel has room for the one event. c.wlk is
// held.
func fire(ws map[string][]chan gozk.Event, ev gozk.Event) {
	for _, w := range ws[ev.Path] {
		w <- ev
	}
	delete(ws, ev.Path)
}

// endWatches tells every watch that it will not fire.
func (c *Conn) endWatches(err error, state gozk.State) {
	c.wlk.Lock()
	defer c.wlk.Unlock()
	for _, ws := range []map[string][]chan gozk.Event{c.watches, c.children, c.exists} {
		for p, chs := range ws {
			for _, w := range chs {
				w <- gozk.Event{Type: gozk.EventNotWatching, State: state, Path: p, Err: err, Server: c.curSrv}
			}
		}
		clear(ws)
	}
}

// drop ends a connection: what awaits a reply on it fails, with an
// unknown outcome.
func (c *Conn) drop(nc net.Conn, server string, cause error) {
	nc.Close()
	c.wmu.Lock()
	if c.nc == nc {
		c.nc = nil
	}
	c.wmu.Unlock()
	// No request goes into pending from here on, until the next connect.
	c.pmu.Lock()
	rs := c.pending.drain()
	ws := c.authWait
	c.authWait = nil
	c.pmu.Unlock()
	lost := gozk.ErrConnectionClosed
	if c.ending.Load() || c.isClosing() {
		lost = gozk.ErrClosing
	}
	for _, r := range rs {
		r.complete(lost)
	}
	for _, w := range ws {
		if w != nil {
			w <- lost
		}
	}
	if lost == gozk.ErrClosing {
		return
	}
	if !errors.Is(cause, io.EOF) {
		c.log.Debug("zk: connection dropped", "server", server, "err", cause)
	}
	c.notify(Change{State: StateDisconnected, Server: server})
}

// expire takes in that the server expired the session.
func (c *Conn) expire(server string) {
	c.log.Debug("zk: session expired", "server", server, "session", fmt.Sprintf("%#x", c.session.Load()))
	c.session.Store(0)
	c.passwd = nil
	c.notify(Change{State: StateExpired, Server: server})
	c.endWatches(gozk.ErrSessionExpired, gozk.StateExpired)
	c.failQueued(gozk.ErrSessionExpired)
}

// authFailed makes the Conn refuse every request: its credentials do not
// work on any connection.
func (c *Conn) authFailed(server string) {
	c.log.Debug("zk: authentication failed", "server", server)
	c.wmu.Lock()
	if c.closed == nil {
		c.closed = gozk.ErrAuthFailed
	}
	c.wmu.Unlock()
	c.notify(Change{State: StateAuthFailed, Server: server})
	c.failQueued(gozk.ErrAuthFailed)
}

// failQueued fails the requests waiting for a connection, and tells the
// AddAuth callers waiting for one (their credentials are kept for the
// next connection).
func (c *Conn) failQueued(err error) {
	c.wmu.Lock()
	q := c.queued
	c.queued = nil
	for i := range c.auths {
		if w := c.auths[i].wait; w != nil {
			w <- err
			c.auths[i].wait = nil
		}
	}
	c.wmu.Unlock()
	for _, r := range q {
		r.complete(err)
	}
}

// shutdown fails whatever is left once run ends.
func (c *Conn) shutdown() {
	c.wmu.Lock()
	if c.closed == nil {
		c.closed = gozk.ErrClosing
	}
	for i := range c.auths {
		if w := c.auths[i].wait; w != nil {
			w <- c.closed
			c.auths[i].wait = nil
		}
	}
	c.wmu.Unlock()
	c.failQueued(gozk.ErrClosing)
	c.pmu.Lock()
	rs := c.pending.drain()
	ws := c.authWait
	c.authWait = nil
	c.pmu.Unlock()
	for _, r := range rs {
		r.complete(gozk.ErrClosing)
	}
	for _, w := range ws {
		if w != nil {
			w <- gozk.ErrClosing
		}
	}
	c.endWatches(gozk.ErrClosing, gozk.StateDisconnected)
}

// send hands requests to the connection, in one write, in the order
// given: the server answers them in that order. Without a connection
// they wait for the next one; on a closed Conn they fail at once.
func (c *Conn) send(rs ...*request) {
	c.wmu.Lock()
	if c.closed != nil || c.ending.Load() && rs[0].op != opCloseSession {
		err := c.closed
		if err == nil {
			err = gozk.ErrClosing
		}
		c.wmu.Unlock()
		for _, r := range rs {
			r.complete(err)
		}
		return
	}
	for _, r := range rs {
		c.xid++
		if c.xid <= 0 {
			c.xid = 1 // negative xids are reserved
		}
		r.xid = c.xid
		binary.BigEndian.PutUint32(r.frame[4:], uint32(r.xid))
	}
	nc := c.nc
	if nc == nil {
		c.queued = append(c.queued, rs...)
		c.wmu.Unlock()
		return
	}
	c.pmu.Lock()
	for _, r := range rs {
		c.pending.push(r)
		if r.op == opCloseSession {
			c.closeSent.Store(true)
		}
	}
	c.pmu.Unlock()
	b := rs[0].frame
	if len(rs) > 1 {
		b = c.wbuf[:0]
		for _, r := range rs {
			b = append(b, r.frame...)
		}
		c.wbuf = b[:0]
	}
	c.lastSent.Store(time.Now().UnixNano())
	if _, err := nc.Write(b); err != nil {
		nc.Close() // the reading side fails what is pending
	}
	c.wmu.Unlock()
}

// frameReader reads packets, keeping a partial one across a read deadline.
type frameReader struct {
	r    io.Reader
	buf  []byte
	s, e int // buf[s:e] is read and not yet returned
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: r, buf: make([]byte, bufSize)}
}

// next returns the next packet's bytes, valid until the following call.
func (f *frameReader) next() ([]byte, error) {
	if len(f.buf) > bufSize && f.e-f.s <= bufSize {
		f.buf = append(make([]byte, 0, bufSize), f.buf[f.s:f.e]...)[:bufSize]
		f.e -= f.s
		f.s = 0
	}
	for {
		if have := f.e - f.s; have >= 4 {
			n := int64(int32(binary.BigEndian.Uint32(f.buf[f.s:])))
			if n < 0 || n > maxFrame {
				return nil, fmt.Errorf("%w: a packet of %d bytes", ErrProtocol, n)
			}
			if need := 4 + int(n); have >= need {
				p := f.buf[f.s+4 : f.s+need]
				f.s += need
				return p, nil
			} else if need > len(f.buf)-f.s {
				f.room(need)
			}
		} else if f.s > 0 && len(f.buf)-f.s < 4 {
			f.room(4)
		}
		k, err := f.r.Read(f.buf[f.e:])
		f.e += k
		if err != nil && k == 0 {
			return nil, err
		}
	}
}

// room moves the unread bytes to the front of the buffer, growing it to
// hold need bytes.
func (f *frameReader) room(need int) {
	buf := f.buf
	if need > len(buf) {
		buf = make([]byte, max(need, 2*len(buf)))
	}
	f.e = copy(buf, f.buf[f.s:f.e])
	f.s = 0
	f.buf = buf
}

// queue is a FIFO of requests.
type queue struct {
	rs   []*request
	head int
}

func (q *queue) push(r *request) {
	if q.head > 0 && q.head >= len(q.rs)/2 {
		// Reuse the front, so that a queue never empty does not grow.
		n := copy(q.rs, q.rs[q.head:])
		clear(q.rs[n:])
		q.rs, q.head = q.rs[:n], 0
	}
	q.rs = append(q.rs, r)
}

func (q *queue) peek() *request {
	if q.head == len(q.rs) {
		return nil
	}
	return q.rs[q.head]
}

func (q *queue) pop() {
	q.rs[q.head] = nil
	q.head++
}

func (q *queue) drain() []*request {
	rs := append([]*request(nil), q.rs[q.head:]...)
	clear(q.rs)
	q.rs, q.head = q.rs[:0], 0
	return rs
}
