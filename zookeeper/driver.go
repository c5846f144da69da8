package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
)

const (
	// defaultBase is the node under which locks live when the URL names none.
	defaultBase = "/locker"
	// setupTimeout bounds opening a session.
	setupTimeout = 5 * time.Second
	// cleanupTimeout bounds the delete of our node that an acquisition
	// which failed or was cancelled makes before it returns; after that,
	// the delete goes on in the background.
	cleanupTimeout = 2 * time.Second
	// maxAttempts bounds retries of one step: creates whose reply was
	// lost, parents collected under us, sessions that expired while queued.
	maxAttempts = 5
)

// sessionIdle is how long a session that holds nothing stays open (30s;
// tests shorten it).
var sessionIdle atomic.Int64

func init() { sessionIdle.Store(int64(30 * time.Second)) }

// errRequeue: our queue node vanished while we waited (its session expired,
// or someone deleted it); queue again.
var errRequeue = errors.New("zookeeper: the queue node vanished")

// hooks let tests observe the recipe; nil in production.
type hooks struct {
	beforeCreate func(prefix string)            // a protected create is about to be sent
	recovered    func(path string)              // a create whose reply was lost was found again
	watching     func(self, pred string)        // a waiter set its watch
	listed       func(self string, n int)       // a waiter listed the queue (n children)
	pipelined    func(self string)              // the listing sent behind the create was used
	first        func(self string)              // the first node ever in its key node took the lock unlisted
	decide       func()                         // a request's goroutine is about to say whose its outcome is
	gaveUp       func()                         // a caller stopped waiting for its request's outcome
	checking     func(ttl time.Duration, n int) // a multi of n checks goes out over the session of ttl
}

var testHooks atomic.Pointer[hooks]

type driver struct {
	servers []string // nil with New: the one session is the user's
	base    string
	acl     []zk.ACL
	auth    []byte // "user:password" for digest authentication, or nil
	log     *slog.Logger
	caps    backend.Capabilities
	fixed   *session // with New: the user's session, the only one
	done    chan struct{}

	mu       sync.Mutex
	closed   bool
	sessions map[time.Duration]*session // the session new locks of each TTL go to
	retired  map[*session]bool          // sessions taking no new locks, until closed
	wg       sync.WaitGroup             // session setups, idle closes, cleanups
}

func newDriver(log *slog.Logger) *driver {
	return &driver{log: log, done: make(chan struct{}), sessions: map[time.Duration]*session{}, retired: map[*session]bool{}}
}

func (d *driver) newSession(key time.Duration, owned bool) *session {
	return &session{
		d:         d,
		owned:     owned,
		key:       key,
		timeout:   key,
		ready:     make(chan struct{}),
		connected: make(chan struct{}),
		cur:       newEpoch(),
		helds:     map[*held]*epoch{},
		done:      make(chan struct{}),
	}
}

func (d *driver) Capabilities() backend.Capabilities { return d.caps }

// goBackground counts one more background goroutine, unless closed.
func (d *driver) goBackground() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

// session returns the session whose timeout is ttl (to the millisecond),
// opening it if needed, with one reference counted for the caller.
func (d *driver) session(ctx context.Context, ttl time.Duration) (*session, error) {
	key := ttl.Truncate(time.Millisecond)
	if s := d.fixed; s != nil {
		if key != s.timeout {
			return nil, fmt.Errorf("%w: TTL %v: every lock of this Locker lives in the session it was given, whose timeout is %v (Options.SessionTimeout)", backend.ErrInvalidTTL, ttl, s.timeout)
		}
		s.ref()
		return s, nil
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, backend.ErrClosed
	}
	s := d.sessions[key]
	if s != nil && s.isRetired() {
		delete(d.sessions, key)
		d.retired[s] = true
		s = nil
	}
	if s == nil {
		s = d.newSession(key, true)
		d.sessions[key] = s
		d.wg.Add(1)
		go d.setup(s)
	}
	s.ref() // under d.mu, so that closeIdle cannot take it away meanwhile
	d.mu.Unlock()
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.unref()
		return nil, ctx.Err()
	}
	if s.setupErr != nil {
		s.unref()
		return nil, s.setupErr
	}
	return s, nil
}

// setup opens s, or forgets it if that fails; ready says when it is done.
func (d *driver) setup(s *session) {
	defer d.wg.Done()
	err := d.openSession(s)
	if err != nil {
		d.mu.Lock()
		if d.sessions[s.key] == s {
			delete(d.sessions, s.key)
		}
		delete(d.retired, s)
		d.mu.Unlock()
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
	}
	s.setupErr = err
	close(s.ready)
}

// closeIdle closes s if it is still unused.
func (d *driver) closeIdle(s *session) {
	d.mu.Lock()
	s.mu.Lock()
	if s.refs > 0 || s.closed || d.closed || (d.sessions[s.key] != s && !d.retired[s]) {
		s.mu.Unlock()
		d.mu.Unlock()
		return
	}
	if d.sessions[s.key] == s {
		delete(d.sessions, s.key)
	}
	delete(d.retired, s)
	s.mu.Unlock()
	d.wg.Add(1)
	d.mu.Unlock()
	defer d.wg.Done()
	s.close()
}

func (d *driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	var all []*session
	for _, s := range d.sessions {
		all = append(all, s)
	}
	for s := range d.retired {
		all = append(all, s)
	}
	if d.fixed != nil {
		all = append(all, d.fixed)
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-s.ready // a setup in progress sees d.done and gives up
			s.close()
		}()
	}
	wg.Wait()
	d.wg.Wait()
	return nil
}

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	return d.acquire(ctx, req, false)
}

// Acquire implements backend.Waiter: it queues and waits for its turn.
func (d *driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	return d.acquire(ctx, req, true)
}

func (d *driver) acquire(ctx context.Context, req backend.Request, wait bool) (backend.Acquisition, error) {
	s, err := d.session(ctx, req.TTL)
	if err != nil {
		return backend.Acquisition{}, err
	}
	parent := d.base + "/" + encodeKey(req.Key)
	for attempt := 1; ; attempt++ {
		ep, err := s.current()
		if err == nil {
			var acq backend.Acquisition
			if acq, err = d.queue(ctx, s, ep, parent, req, wait); err == nil {
				return acq, nil // the lock keeps the session's reference
			}
		}
		// A session that expired while we queued took our node with it:
		// queue again in the session that replaced it. One that was
		// granted another timeout takes no new locks: queue again in a
		// session of our own, whose setup checks what the server grants.
		fresh := regranted(err)
		requeue := fresh || errors.Is(err, errRequeue) || errors.Is(err, errSessionExpired) || errors.Is(err, zk.ErrSessionExpired)
		if !requeue || attempt == maxAttempts || ctx.Err() != nil {
			s.unref()
			return backend.Acquisition{}, d.describe(err, req.Key)
		}
		if fresh {
			s.unref()
			if s, err = d.session(ctx, req.TTL); err != nil {
				return backend.Acquisition{}, err
			}
		}
	}
}

// queue makes one attempt: create our node, then take the lock or, when
// waiting, wait for our turn. On failure it leaves nothing behind.
func (d *driver) queue(ctx context.Context, s *session, ep *epoch, parent string, req backend.Request, wait bool) (backend.Acquisition, error) {
	guid := newGUID()
	node, err := d.create(ctx, s, ep, parent, guid)
	if err != nil {
		return backend.Acquisition{}, err
	}
	acq, err := d.await(ctx, s, ep, parent, node, guid, req, wait)
	if err != nil {
		d.remove(ctx, s, ep, node.path)
		return backend.Acquisition{}, err
	}
	return acq, nil
}

// remove deletes our node after a failed or cancelled acquisition: at once
// if it can, within cleanupTimeout, so that the node is gone when the
// caller learns of the failure; in the background otherwise.
func (d *driver) remove(ctx context.Context, s *session, ep *epoch, path string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err := s.call(ctx, ep, func() error { return s.conn.Delete(path, -1) }, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, errSessionExpired) && !errors.Is(err, errSessionClosed) {
		s.cleanup(path)
	}
}

// ambiguous reports whether a request that failed with err may still have
// been applied: its reply was lost, or the caller stopped waiting for it.
func ambiguous(err error) bool {
	var ee *epochError
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrClosing) || errors.As(err, &ee)
}

// ourNode is the node an acquisition queued.
type ourNode struct {
	path  string
	czxid int64 // the fence, when known from the create's reply
	owner int64 // the session that owns it, likewise
	known bool

	// children is the listing of the queue sent right behind the create
	// on the same connection, so taken after it; listed says it is there.
	children []string
	listed   bool
	sent     time.Time // when the create was sent
}

// listing is the outcome of a pipelined Children request.
type listing struct {
	children []string
	err      error
	sent     bool
}

// create makes our ephemeral sequential node under parent, its name
// carrying guid. A create whose reply was lost to a dropped connection may
// have been applied: the node is then looked for by its guid before
// another is created.
func (d *driver) create(ctx context.Context, s *session, ep *epoch, parent, guid string) (ourNode, error) {
	var lastErr error
	list := true
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return ourNode{}, err // nothing sent, nothing to undo
		}
		node, err := d.sendCreate(ctx, s, ep, parent, guid, list)
		switch {
		case err == nil:
			return node, nil
		case errors.Is(err, zk.ErrNoNode):
			// The key node does not exist, or was collected as an empty
			// container just now. A key node we make has no child yet:
			// our node will most likely be its first, which holds the
			// lock without a listing (see await).
			made, perr := d.ensureParent(ctx, s, ep, parent)
			if perr != nil {
				return ourNode{}, perr
			}
			list = !made
		case errors.Is(err, zk.ErrConnectionClosed):
			found, ferr := d.find(ctx, s, ep, parent, guid)
			if ferr != nil {
				s.cleanupGUID(parent, guid)
				return ourNode{}, fmt.Errorf("%w (and looking for a node it may have created: %w)", err, ferr)
			}
			if found != "" {
				if h := testHooks.Load(); h != nil && h.recovered != nil {
					h.recovered(found)
				}
				return ourNode{path: found}, nil
			}
		case errors.Is(err, zk.ErrNoServer):
			// Not sent: no server could be reached. Try again.
		default:
			return ourNode{}, err
		}
		lastErr = err
	}
	// A create whose reply was lost may still show up.
	s.cleanupGUID(parent, guid)
	return ourNode{}, lastErr
}

// sendCreate sends the protected create of our node under parent and, if
// list, the listing of the queue right behind it, once the create is on
// the wire: the server answers the listing after the create, so an
// uncontended acquisition waits for one round trip, not two.
func (d *driver) sendCreate(ctx context.Context, s *session, ep *epoch, parent, guid string, list bool) (ourNode, error) {
	prefix := lockPrefix(parent, guid)
	var node ourNode
	err := s.call(ctx, ep, func() error {
		if h := testHooks.Load(); h != nil && h.beforeCreate != nil {
			h.beforeCreate(prefix)
		}
		w := s.wire.watchCreate(prefix)
		stop := make(chan struct{})
		var lc <-chan listing
		if list {
			lc = listBehind(s, parent, w, stop)
		}
		node.sent = time.Now()
		p, err := s.conn.Create(prefix, nil, zk.FlagEphemeralSequential, d.acl)
		close(stop)
		node.czxid, node.owner, node.known = s.wire.done(w)
		node.path = p
		if lc != nil {
			if l := <-lc; l.sent && l.err == nil && err == nil {
				node.children, node.listed = l.children, true
			}
		}
		return err
	}, func(err error) {
		// The caller gave up first; undo whatever the create did: at
		// once if the delete goes through (a cancelled caller waits for
		// that in s.call), else in the background.
		switch {
		case err == nil:
			if derr := s.conn.Delete(node.path, -1); derr != nil && !errors.Is(derr, zk.ErrNoNode) {
				s.cleanup(node.path)
			}
		case errors.Is(err, zk.ErrConnectionClosed):
			s.cleanupGUID(parent, guid)
		}
	})
	if err != nil {
		return ourNode{}, err // node is not ours to read if the caller gave up
	}
	return node, nil
}

// listBehind lists the children of parent once the create that w follows
// is on the wire, or reports nothing sent if stop closes first.
func listBehind(s *session, parent string, w *created, stop <-chan struct{}) <-chan listing {
	lc := make(chan listing, 1)
	go func() {
		select {
		case <-w.sent:
			c, _, err := s.conn.Children(parent)
			lc <- listing{children: c, err: err, sent: true}
		case <-stop:
			lc <- listing{}
		}
	}()
	return lc
}

// find returns the path of the child of parent whose name carries guid, or "".
func (d *driver) find(ctx context.Context, s *session, ep *epoch, parent, guid string) (string, error) {
	var children []string
	err := s.call(ctx, ep, func() error {
		c, _, err := s.conn.Children(parent)
		children = c
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	for _, c := range children {
		if n, ok := parseLockNode(c); ok && n.guid == guid {
			return parent + "/" + c, nil
		}
	}
	return "", nil
}

// ensureParent creates the key node and any missing node above it, as
// containers: the server deletes a container once its last child is gone,
// so keys that are no longer used do not accumulate. made says that this
// call created the key node.
func (d *driver) ensureParent(ctx context.Context, s *session, ep *epoch, parent string) (made bool, err error) {
	mk := func(p string) (bool, error) {
		err := s.call(ctx, ep, func() error {
			_, err := s.conn.CreateContainer(p, nil, zk.FlagContainer, d.acl)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNodeExists) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("create %s: %w", p, err)
		}
		return true, nil
	}
	made, err = mk(parent)
	if !errors.Is(err, zk.ErrNoNode) {
		return made, err
	}
	for _, p := range ancestors(parent) {
		if made, err = mk(p); err != nil {
			return false, err
		}
	}
	return made, nil
}

// await lists the queue until our node is the lowest (the lock is ours),
// watching only the node just before ours in between: a release wakes
// only the next waiter, never all of them. Without wait it returns a Busy
// at once if another node is ahead.
func (d *driver) await(ctx context.Context, s *session, ep *epoch, parent string, node ourNode, guid string, req backend.Request, wait bool) (backend.Acquisition, error) {
	self := node.path[len(parent)+1:]
	if n, ok := parseLockNode(self); ok && n.seq == 0 && node.known {
		// The first node ever created in its key node: sequence numbers
		// count every child created or deleted there before, so none
		// is ahead of it. The lock is ours from the create.
		if h := testHooks.Load(); h != nil && h.first != nil {
			h.first(node.path)
		}
		return d.grant(s, ep, node, req, node.sent)
	}
	for {
		children, start, pipelined, err := d.listQueue(ctx, s, ep, parent, &node)
		if err = d.settle(ctx, ep, err); errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return backend.Acquisition{}, err
		}
		if h := testHooks.Load(); h != nil && h.listed != nil {
			h.listed(node.path, len(children))
		}
		q := order(children, self, guid)
		for _, o := range q.orphans {
			s.cleanup(parent + "/" + o)
		}
		switch {
		case !q.self && pipelined:
			continue // not in a listing that should have it: list again to be sure
		case !q.self:
			return backend.Acquisition{}, errRequeue
		case q.lowest:
			return d.grant(s, ep, node, req, start)
		case !wait:
			return backend.Acquisition{}, &backend.Busy{}
		}
		if err := d.watchPred(ctx, s, ep, node.path, parent+"/"+q.pred); !errors.Is(err, errAgain) {
			return backend.Acquisition{}, err
		}
	}
}

// listQueue lists the queue under parent: the listing sent behind the
// create (pipelined), once, if there is one; otherwise a listing sent now,
// which also reads our node where the create's reply was not seen. start
// is no later than the sending of the requests the listing follows.
func (d *driver) listQueue(ctx context.Context, s *session, ep *epoch, parent string, node *ourNode) (children []string, start time.Time, pipelined bool, err error) {
	if node.listed && node.known {
		// Listed behind the create: the lock's time runs from before
		// the create was sent.
		node.listed = false
		if h := testHooks.Load(); h != nil && h.pipelined != nil {
			h.pipelined(node.path)
		}
		return node.children, node.sent, true, nil
	}
	start = time.Now()
	var c []string
	var stat *zk.Stat
	err = s.call(ctx, ep, d.list(s, parent, node.path, node.known, &c, &stat), nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, start, false, errRequeue // the key node went, and our node with it
	}
	if err != nil {
		return nil, start, false, err // c and stat are not ours to read if the caller gave up
	}
	if !node.known {
		node.czxid, node.owner, node.known = stat.Czxid, stat.EphemeralOwner, true
	}
	return c, start, false, nil
}

// grant makes the lock of our node, which is the lowest in its queue.
func (d *driver) grant(s *session, ep *epoch, node ourNode, req backend.Request, start time.Time) (backend.Acquisition, error) {
	h := &held{d: d, s: s, ep: ep, path: node.path, owner: node.owner, ttl: s.timeout, onLost: req.OnLost, op: make(chan struct{}, 1)}
	if !s.register(h, ep) {
		return backend.Acquisition{}, ep.err()
	}
	return backend.Acquisition{Held: h, Fence: uint64(node.czxid), Fenced: true, TTL: s.timeout, Start: start}, nil
}

// watchPred watches pred, the node just before ours at path, and waits
// until it goes. It returns errAgain when the queue is to be listed again
// (pred went, or the watch ended with the connection), or why to stop
// waiting.
func (d *driver) watchPred(ctx context.Context, s *session, ep *epoch, path, pred string) error {
	var watch <-chan zk.Event
	err := s.call(ctx, ep, func() error {
		// A data watch, not an exists watch: on a node that is already
		// gone it fails without leaving a watch behind.
		_, _, ch, err := s.conn.GetW(pred)
		watch = ch
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return errAgain // gone already: look again
	}
	if err = d.settle(ctx, ep, err); err != nil {
		return err
	}
	if h := testHooks.Load(); h != nil && h.watching != nil {
		h.watching(path, pred)
	}
	select {
	case <-watch:
		// Deleted (a release, an expiry, a waiter that gave up) or the
		// watch ended with the connection: look again either way.
		return errAgain
	case <-ctx.Done():
		return ctx.Err()
	case <-ep.gone:
		return ep.err()
	case <-d.done:
		return backend.ErrClosed
	}
}

// list returns the request that lists the queue under parent into
// children; where the create's reply was not seen (!known), it also reads
// our own node at path into stat, in the same round trip.
func (d *driver) list(s *session, parent, path string, known bool, children *[]string, stat **zk.Stat) func() error {
	return func() error {
		if known {
			c, _, err := s.conn.Children(parent)
			*children = c
			return err
		}
		// The create's reply did not say (the connection dropped, or is
		// not ours): read our own node in the same round trip.
		type result struct {
			ok  bool
			st  *zk.Stat
			err error
		}
		rc := make(chan result, 1)
		go func() {
			ok, st, err := s.conn.Exists(path)
			rc <- result{ok, st, err}
		}()
		c, _, err := s.conn.Children(parent)
		r := <-rc
		*children = c
		if err == nil {
			err = r.err
		}
		if err == nil && !r.ok {
			err = errRequeue
		}
		*stat = r.st
		return err
	}
}

// errAgain says that a read is to be made again.
var errAgain = errors.New("read again")

// settle decides what a read that failed with err means for a waiter. A
// read that failed only because the connection dropped, or no server
// could be reached for the moment, is made again (errAgain) after a short
// pause: the session may well be alive, and our node with it. Meanwhile
// the client library reconnects, or the epoch ends because the connection
// stayed down for a whole session timeout, or ctx ends; the pause then
// returns that error. Any other err is returned as it is.
func (d *driver) settle(ctx context.Context, ep *epoch, err error) error {
	if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) {
		return err
	}
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return errAgain
	case <-ctx.Done():
		return ctx.Err()
	case <-ep.gone:
		return ep.err()
	case <-d.done:
		return backend.ErrClosed
	}
}

// describe makes a client library error say what it means for a lock.
func (d *driver) describe(err error, key string) error {
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("zookeeper: not permitted (ACL) to queue for %q under %s: the nodes were created with credentials this Locker does not have (zookeeper://user:password@...): %w", key, d.base, err)
	case errors.Is(err, errRequeue):
		return fmt.Errorf("zookeeper: our queue node kept vanishing (%d times): is something else deleting nodes under %s? %w", maxAttempts, d.base, err)
	}
	return err
}

// held is a lock we hold: our node, in a session whose timeout is the
// lock's TTL. While the process lives the session stays alive on its own,
// so the lock's TTL is also enforced here: unless refreshed, the node is
// deleted when the TTL runs out (Expire, called by package locker at the
// lock's validity deadline), as a server would expire a key.
//
// held is not a backend.Bounded. While it is held, its session's granted
// timeout is its TTL (a reconnect granted less ends it), and the requests
// of an acquisition or a refresh go out after the start package locker
// counts its validity from, so the server keeps the session at least that
// long after: the session's own bound, last confirmed reply plus timeout,
// would never be the smaller. Knowing it would also take the sending time
// of every request, read off the wire.
type held struct {
	d      *driver
	path   string
	onLost func(error)
	op     chan struct{} // one round trip at a time: Refresh, TTL, Release

	mu    sync.Mutex
	s     *session
	ep    *epoch
	owner int64         // the session id that owns the node (ephemeralOwner)
	ttl   time.Duration // the session timeout, which the lock's TTL is
	done  bool
}

// extend records the TTL after a successful refresh (package locker's
// validity deadline moves with it).
func (h *held) extend(ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return
	}
	h.ttl = ttl
}

// finish ends the lock's life here; false if it had ended already.
func (h *held) finish() bool {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return false
	}
	h.done = true
	s := h.s
	h.mu.Unlock()
	s.unregister(h)
	s.unref()
	return true
}

func (h *held) lost(err error) {
	if h.onLost != nil {
		h.onLost(err)
	}
}

// Expire runs when the TTL ran out without a refresh, or after a release
// whose outcome is unknown (backend.Expirer): the node goes, as the key
// would on a server with expiring keys.
func (h *held) Expire() {
	h.mu.Lock()
	s, ttl := h.s, h.ttl
	h.mu.Unlock()
	if !h.finish() {
		return
	}
	s.cleanup(h.path)
	h.lost(fmt.Errorf("%w: the %v TTL ran out without a refresh", backend.ErrNotHeld, ttl))
}

// sessionEnded is called when the lock's epoch ended.
func (h *held) sessionEnded(cause error) {
	h.mu.Lock()
	s := h.s
	h.mu.Unlock()
	if !h.finish() {
		return
	}
	if !errors.Is(cause, errSessionExpired) && !errors.Is(cause, errSessionClosed) {
		// Presumed expired, or granted a shorter timeout: the session may
		// live on, and our node must not stay behind in it.
		s.cleanup(h.path)
	}
	h.lost(fmt.Errorf("%w: %w", backend.ErrNotHeld, cause))
}

// begin takes the lock's turn for one round trip.
func (h *held) begin(ctx context.Context) error {
	select {
	case h.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *held) end() { <-h.op }

// state returns what a round trip needs, or ErrNotHeld.
func (h *held) state() (*session, *epoch, int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done {
		return nil, nil, 0, backend.ErrNotHeld
	}
	return h.s, h.ep, h.owner, nil
}

// notHeld reports whether err means the lock is gone: its epoch ended.
func notHeld(err error, ep *epoch) bool { return err != nil && ep.ended() }

// check reads our node and says whether it is still ours.
func (h *held) check(ctx context.Context, s *session, ep *epoch, owner int64) error {
	var ok bool
	var st *zk.Stat
	err := s.call(ctx, ep, func() error {
		var err error
		ok, st, err = s.conn.Exists(h.path)
		return err
	}, nil)
	switch {
	case notHeld(err, ep):
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	case err != nil:
		return err
	case !ok:
		h.finish()
		return fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
	case st.EphemeralOwner != owner:
		// Not ours any more (a move between sessions that was
		// interrupted); make sure it goes.
		if h.finish() {
			s.cleanup(h.path)
		}
		return fmt.Errorf("%w: the lock node belongs to another session", backend.ErrNotHeld)
	case ep.ended():
		// The epoch ended while the read was out: an answer that came back
		// on a connection granted a shorter session (whose epoch ends
		// before any request is sent on it) does not make the lock ours.
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	}
	return nil
}

// Refresh proves the session alive and the node ours, then restarts the
// TTL. A session is kept alive by the client library on its own, but only
// a round trip made now shows that it was alive now: Sync first, so that
// a server cut off from the leader cannot answer from stale data. A new
// TTL moves the lock to the session with that timeout.
//
// Package locker counts the refreshed validity from before this call.
// Waiting here for the lock's turn (behind a TTL or Release in flight)
// only makes that start earlier than the requests that prove the session
// alive, so the deadline errs early, never late.
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := h.begin(ctx); err != nil {
		return err
	}
	defer h.end()
	s, ep, owner, err := h.state()
	if err != nil {
		return err
	}
	if ttl <= 0 {
		ttl = s.timeout
	}
	if key := ttl.Truncate(time.Millisecond); key != s.timeout {
		return h.move(ctx, key)
	}
	err = s.call(ctx, ep, func() error {
		_, err := s.conn.Sync(h.path)
		return err
	}, nil)
	if notHeld(err, ep) {
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	}
	if err != nil {
		return err
	}
	if err := h.check(ctx, s, ep, owner); err != nil {
		return err
	}
	h.extend(s.timeout)
	return nil
}

// move hands the lock to the session whose timeout is the new TTL, in one
// transaction sent from that session: delete our node and create it again
// under the same name, ephemeral, so that the new session owns it. The
// name keeps the node's place in the queue, and the waiter behind it,
// woken by the delete, finds it again and watches it anew. The fence stays
// the one minted at the grant. A move whose outcome is unknown (a reply
// lost, a cancelled context) gives the lock up: either session may own
// the node then, and holding on would be guessing.
func (h *held) move(ctx context.Context, key time.Duration) error {
	s2, err := h.d.session(ctx, key)
	if err != nil {
		return err
	}
	ep2, err := s2.current()
	if err != nil {
		s2.unref() // nothing sent: the lock stays where it is
		return err
	}
	s1 := h.s // h.op is ours: only we change h.s
	err = s2.call(ctx, ep2, func() error {
		res, err := s2.conn.Multi(
			&zk.DeleteRequest{Path: h.path, Version: -1},
			&zk.CreateRequest{Path: h.path, Acl: h.d.acl, Flags: zk.FlagEphemeral},
		)
		for _, r := range res {
			if err == nil && r.Error != nil {
				err = r.Error
			}
		}
		return err
	}, nil)
	switch {
	case err == nil:
	case errors.Is(err, zk.ErrNoNode):
		h.finish()
		s2.unref()
		return fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
	case ambiguous(err):
		// Deleting the node settles it: a late transaction finds no node
		// to delete and so creates none.
		if h.finish() {
			s1.cleanup(h.path)
		}
		s2.unref()
		return fmt.Errorf("%w: moving the lock to a session with the new TTL %v was interrupted: %w", backend.ErrNotHeld, key, err)
	default:
		s2.unref() // refused by the server: nothing changed
		return err
	}
	return h.adopt(s1, s2, ep2, key)
}

// adopt hands the lock from s1 to s2, whose epoch ep2 the move's
// transaction made its node in.
func (h *held) adopt(s1, s2 *session, ep2 *epoch, key time.Duration) error {
	s2.mu.Lock()
	id, same := s2.id, s2.cur == ep2
	s2.mu.Unlock()
	h.mu.Lock()
	if h.done || !same {
		// Expired or lost while moving.
		h.mu.Unlock()
		s2.cleanup(h.path)
		s2.unref()
		return backend.ErrNotHeld
	}
	h.s, h.ep, h.owner = s2, ep2, id
	h.mu.Unlock()
	s1.unregister(h)
	s1.unref()
	if !s2.register(h, ep2) {
		h.sessionEnded(ep2.err())
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep2.err())
	}
	h.extend(key)
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	if err := h.begin(ctx); err != nil {
		return 0, err
	}
	defer h.end()
	s, ep, owner, err := h.state()
	if err != nil {
		return 0, err
	}
	if err := h.check(ctx, s, ep, owner); err != nil {
		return 0, err
	}
	// The node stays while the session does; the lock's own end (its
	// validity, then Expire) is package locker's, which reports the
	// smaller of the two.
	h.mu.Lock()
	ttl := h.ttl
	h.mu.Unlock()
	return ttl, nil
}

// Release deletes our node: exactly it (its name carries our guid), never
// a parent, never another holder's.
func (h *held) Release(ctx context.Context) error {
	if err := h.begin(ctx); err != nil {
		return err
	}
	defer h.end()
	s, ep, _, err := h.state()
	if err != nil {
		return err
	}
	err = s.call(ctx, ep, func() error { return s.conn.Delete(h.path, -1) }, nil)
	switch {
	case err == nil:
		h.finish()
		return nil
	case errors.Is(err, zk.ErrNoNode):
		h.finish()
		return fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
	case notHeld(err, ep):
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	}
	// Unknown outcome: the lock stays ours, and Expire deletes it at the
	// end of its TTL if a later Release does not.
	return err
}
