package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

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
	created      func(path string)              // an acquisition's node was created, before its queue is judged
	recovered    func(path string)              // a create whose reply was lost was found again
	findFailed   func(err error)                // looking for that create could not reach the server
	watching     func(self, pred string)        // a waiter set its watch
	listed       func(self string, n int)       // a waiter listed the queue (n children)
	pipelined    func(self string)              // the listing sent behind the create was used
	first        func(self string)              // the first node ever in its key node took the lock unlisted
	handedOver   func(self string)              // the deletion of the only node ahead gave a waiter the lock unlisted
	decide       func()                         // a request's goroutine is about to say whose its outcome is
	gaveUp       func()                         // a caller stopped waiting for its request's outcome
	checking     func(ttl time.Duration, n int) // a multi of n checks goes out over the session of ttl
	moved        func(path string)              // a move's transaction returned, before its outcome is taken in
	deleting     func(path string)              // the delete of a held lock's node was queued, on the goroutine that queued it
	// observed: an observer of the key node parent set its watches again
	// after evs fired (or after a reconnect), with data watches on
	// holders, and is about to send its notice.
	observed func(parent string, evs []gozk.Event, reconnected bool, holders []string)
}

var testHooks atomic.Pointer[hooks]

type driver struct {
	servers []string // nil with New: the one session is the user's
	base    string
	acl     []gozk.ACL
	auth    []byte // "user:password" for digest authentication, or nil
	log     *slog.Logger
	caps    backend.Capabilities
	fixed   *session // with New: the user's session, the only one
	done    chan struct{}
	ctx     context.Context // ends with done: stops the driver's own requests (observers')
	cancel  context.CancelFunc

	mu       sync.Mutex
	closed   bool
	sessions map[time.Duration]*session // the session new locks of each TTL go to
	retired  map[*session]bool          // sessions taking no new locks, until closed
	wg       sync.WaitGroup             // session setups, idle closes, cleanups
}

func newDriver(log *slog.Logger) *driver {
	d := &driver{log: log, done: make(chan struct{}), sessions: map[time.Duration]*session{}, retired: map[*session]bool{}}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
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
	d.cancel()
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

// ambiguous reports whether a request that failed with err may still have
// been applied: its reply was lost, or the caller stopped waiting for it.
func ambiguous(err error) bool {
	var ee *epochError
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, gozk.ErrConnectionClosed) || errors.Is(err, gozk.ErrClosing) || errors.As(err, &ee)
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
// of every request, which the client library does not report.
type held struct {
	d      *driver
	path   string
	onLost func(error)
	op     chan struct{} // one round trip at a time: Refresh, TTL, Release, SetValue
	fence  int64         // the czxid of the node the grant found: the lock's fence

	// What our node's data says besides nodeData (lockData), which a move
	// writes again; h.op is held to read or change them.
	moved bool   // a move made the node again: its data records the fence
	value []byte // the value last sent, whether or not its reply came

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

// lost reports h, finished, lost to package locker (Request.OnLost), which
// closes Lost before it returns. Whoever finds a lock lost tells before it
// deletes the node: the delete frees the key, and a waiter granted it
// while the old holder's Lost was still open would hold it alongside a
// holder that believes it still does. (Expire need not: package locker
// closed Lost before it called it.)
func (h *held) lost(err error) {
	if h.onLost != nil {
		h.onLost(err)
	}
}

// abandon ends h, found no longer safely ours, unless it ended already:
// the holder is told (lost), then its node in s deleted, in that order.
func (h *held) abandon(s *session, err error) {
	if h.finish() {
		h.lost(err)
		h.deleteNode(s)
	}
}

// deleteNode deletes h's node in s, in the background. It frees the key:
// h is finished, and if it was lost, its holder has been told (lost).
func (h *held) deleteNode(s *session) {
	s.cleanup(h.path)
	if hk := testHooks.Load(); hk != nil && hk.deleting != nil {
		hk.deleting(h.path)
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
	h.deleteNode(s)
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
	h.lost(fmt.Errorf("%w: %w", backend.ErrNotHeld, cause))
	if !errors.Is(cause, errSessionExpired) && !errors.Is(cause, errSessionClosed) {
		// Presumed expired, or granted a shorter timeout: the session may
		// live on, and our node must not stay behind in it.
		h.deleteNode(s)
	}
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
	var st *gozk.Stat
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
	}
	return h.ownedBy(s, ep, st, owner)
}

// ownedBy judges what a reply says of our node, st, read or written in
// session s's epoch ep: it is ours unless another session owns it (a move
// between sessions that was interrupted: it is abandoned, to go once the
// holder is told) or the epoch ended while the request was out (an answer
// that came back on a connection granted a shorter session, whose epoch
// ends before any request is sent on it, does not make the lock ours).
func (h *held) ownedBy(s *session, ep *epoch, st *gozk.Stat, owner int64) error {
	switch {
	case st.EphemeralOwner != owner:
		err := fmt.Errorf("%w: the lock node belongs to another session", backend.ErrNotHeld)
		h.abandon(s, err)
		return err
	case ep.ended():
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
	// The node made again records the fence, which its czxid no longer
	// is, and keeps the value.
	data := lockData(h.fence, h.value)
	err = s2.call(ctx, ep2, func() error {
		res, err := s2.conn.Multi(
			// Announced first (see nodeData): the waiter behind sees a
			// change of data, not a deletion.
			&gozk.SetDataRequest{Path: h.path, Data: data, Version: -1},
			&gozk.DeleteRequest{Path: h.path, Version: -1},
			&gozk.CreateRequest{Path: h.path, Data: data, Acl: h.d.acl, Flags: gozk.FlagEphemeral},
		)
		for _, r := range res {
			if err == nil && r.Error != nil {
				err = r.Error
			}
		}
		return err
	}, nil)
	if hk := testHooks.Load(); hk != nil && hk.moved != nil {
		hk.moved(h.path)
	}
	switch {
	case err == nil:
		h.moved = true
	case errors.Is(err, gozk.ErrNoNode):
		h.finish()
		s2.unref()
		return fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
	case ambiguous(err):
		// Deleting the node settles it: a late transaction finds no node
		// to delete and so creates none. The holder is told first.
		err = fmt.Errorf("%w: moving the lock to a session with the new TTL %v was interrupted: %w", backend.ErrNotHeld, key, err)
		h.abandon(s1, err)
		s2.unref()
		return err
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
		// Expired or lost while moving, or the epoch the node was made in
		// ended: the node in s2 goes. In the latter case the lock ends
		// here, and is told so before the delete frees the key.
		done := h.done
		h.mu.Unlock()
		err := backend.ErrNotHeld
		if !done && h.finish() {
			err = fmt.Errorf("%w: the session the lock was moving to ended: %w", backend.ErrNotHeld, ep2.err())
			h.lost(err)
		}
		h.deleteNode(s2)
		s2.unref()
		return err
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

// SetValue implements backend.ValueSetter: it replaces our node's data
// (lockData: nodeData, the fence if a move recorded it, and the value).
// Our node's name carries our guid, so no other client's node has it,
// and it is there only while our session holds it: the server, which
// applies the write only to a node that exists, thus replaces the value
// only while the lock is ours. A node that is gone, or a session that
// ended, is ErrNotHeld. The write changes the node's data version and
// nothing else: not its czxid (the fence), its place in the queue or its
// session. It fires the data watches on the node: the waiter just behind
// wakes and lists the queue again, and observers (Observe) see the new
// value.
//
// A write whose reply was lost may or may not have been applied; a later
// move (Refresh with another TTL) writes this value, as the one last
// asked for.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	if err := h.begin(ctx); err != nil {
		return err
	}
	defer h.end()
	s, ep, owner, err := h.state()
	if err != nil {
		return err
	}
	fence := int64(0)
	if h.moved {
		fence = h.fence
	}
	st, err := s.setData(ctx, ep, h.path, lockData(fence, value))
	switch {
	case err == nil:
		h.value = value
	case errors.Is(err, gozk.ErrNoNode), errors.Is(err, gozk.ErrSessionExpired):
		// Our session's node is gone, or the session with it; a request
		// sent again in a new session finds no node of ours.
		h.finish()
		return fmt.Errorf("%w: the lock node is gone: %w", backend.ErrNotHeld, err)
	case notHeld(err, ep):
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	case ambiguous(err):
		h.value = value
		return err
	default:
		return err
	}
	return h.ownedBy(s, ep, st, owner)
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
	err = s.delete(ctx, ep, h.path)
	switch {
	case err == nil:
		h.finish()
		return nil
	case errors.Is(err, gozk.ErrNoNode):
		h.finish()
		return fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
	case notHeld(err, ep):
		return fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	}
	// Unknown outcome: the lock stays ours, and Expire deletes it at the
	// end of its TTL if a later Release does not.
	return err
}
