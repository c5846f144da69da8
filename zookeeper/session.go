package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/zkclient"
)

// conn is what a session uses of its connection: go-zookeeper's *Conn
// (New, a connection the application opened) or internal/zkclient's (the
// sessions the Locker opens, over the client this project wrote). Both
// speak go-zookeeper's data types and errors.
type conn interface {
	Children(path string) ([]string, *gozk.Stat, error)
	ChildrenW(path string) ([]string, *gozk.Stat, <-chan gozk.Event, error)
	Close()
	Create(path string, data []byte, flags int32, acl []gozk.ACL) (string, error)
	CreateContainer(path string, data []byte, flags int32, acl []gozk.ACL) (string, error)
	Delete(path string, version int32) error
	Exists(path string) (bool, *gozk.Stat, error)
	ExistsW(path string) (bool, *gozk.Stat, <-chan gozk.Event, error)
	Get(path string) ([]byte, *gozk.Stat, error)
	GetW(path string) ([]byte, *gozk.Stat, <-chan gozk.Event, error)
	Multi(ops ...any) ([]gozk.MultiResponse, error)
	Server() string
	SessionID() int64
	Set(path string, data []byte, version int32) (*gozk.Stat, error)
	Sync(path string) (string, error)
}

// An ownConn is one of the Locker's own connections (internal/zkclient), not an
// application's go-zookeeper connection. It sends a create and a listing
// together and reports the create's czxid and session; and the requests
// on a lock's path stop waiting for their reply when the caller's context
// or epoch ends (zkclient.Stop), without the goroutine per request that call
// needs for that. The session's methods below use it where they can.
type ownConn interface {
	CreateAndList(st zkclient.Stop, path string, data []byte, flags int32, acl []gozk.ACL, list string, late func(zkclient.Created, error)) (zkclient.Created, zkclient.Listed, error)
	ChildrenStop(st zkclient.Stop, path string) ([]string, *gozk.Stat, error)
	ChildrenWStop(st zkclient.Stop, path string) ([]string, *gozk.Stat, <-chan gozk.Event, error)
	GetWAll(st zkclient.Stop, paths ...string) ([]zkclient.Watched, error)
	GetAll(st zkclient.Stop, paths ...string) ([]zkclient.Watched, error)
	DeleteStop(st zkclient.Stop, path string, version int32) error
	SetStop(st zkclient.Stop, path string, data []byte, version int32) (*gozk.Stat, error)
	ExistsWStop(st zkclient.Stop, path string) (bool, *gozk.Stat, <-chan gozk.Event, error)
	SyncChildrenStop(st zkclient.Stop, path string) ([]string, *gozk.Stat, error)
	Unwatch(path string, ch <-chan gozk.Event)
}

var (
	_ conn    = (*gozk.Conn)(nil)
	_ conn    = (*zkclient.Conn)(nil)
	_ ownConn = (*zkclient.Conn)(nil)
)

// A session is one ZooKeeper session, on a connection of its own, whose
// timeout is the TTL of every lock taken in it. The driver keeps one per
// distinct TTL, opened when a lock first asks for that TTL and closed once
// it has held nothing for sessionIdle.
//
// The connection (internal/zkclient) reconnects by itself and, once the
// server reports the session expired, starts a new session. An epoch
// is a span during which one server-side session keeps the timeout the
// locks assume: it ends when the server reports the session expired, when
// the connection has been down for a whole session timeout (after which
// the server may have expired it), or when a reconnect is granted a
// shorter timeout. Locks and acquisitions belong to the epoch they were
// made in and end with it.
//
// Each (re)connect renegotiates the timeout, and the server counts the
// session's life from then on with what it granted on that connection; a
// member with another session range can grant more or less than the TTL
// (the connection asks for the session's own timeout every time, but a
// member grants only what its range allows). A
// session granted another timeout than its own is therefore retired: it
// takes no new locks (acquisitions open a session of their own), and it
// is closed once it holds nothing.
type session struct {
	d       *driver
	conn    conn
	owned   bool          // opened by the driver; closed when idle or on Close
	timeout time.Duration // every lock's TTL; setup fails, and a reconnect retires the session, if the server grants another
	key     time.Duration // the sessions map key

	ready     chan struct{} // closed when setup finished, well or not
	setupErr  error         // set before ready is closed
	connected chan struct{} // closed when the server first granted the session

	granted atomic.Int64 // the timeout the server granted on the latest connection
	// connects counts the connections the server accepted. Watch events
	// on one connection come in the order of the changes that fired them;
	// a reconnect re-registers the watches, and those that fired in the
	// meantime then come in no particular order.
	connects atomic.Int64

	mu        sync.Mutex
	refs      int         // held locks and acquisitions in progress
	idle      *time.Timer // runs closeIdle; armed while refs is 0
	closed    bool
	cur       *epoch
	id        int64                    // the current epoch's session id; 0 until known
	lostTimer *time.Timer              // ends the epoch if the connection stays down
	helds     map[*held]*epoch         // held locks, and the epoch each belongs to
	observers map[chan<- struct{}]bool // told of every reconnect (Observe)
	done      chan struct{}            // closed by close
	retired   error                    // why the session takes no new locks; nil while it does

	// Deletions of nodes left behind, run by at most maxCleaners
	// goroutines (retry).
	cmu      sync.Mutex
	cleanQ   []cleanup
	cleaners int
}

// epoch is a span of one server-side session with the timeout its locks
// assume; see session.
type epoch struct {
	gone  chan struct{} // closed when the epoch ends
	cause error         // why; set before gone is closed
}

// epochError says why an epoch ended.
type epochError struct {
	msg string
	err error // a sentinel it wraps, if any
}

func (e *epochError) Error() string { return e.msg }
func (e *epochError) Unwrap() error { return e.err }

// Why an epoch ended.
var (
	errSessionExpired = &epochError{msg: "zookeeper: the session expired"}
	errSessionClosed  = &epochError{msg: "zookeeper: the session was closed"}
	errAuthFailed     = &epochError{msg: "zookeeper: the server refused the session's credentials", err: gozk.ErrAuthFailed}
)

// errDisconnected is an epoch's cause when the connection stayed down for a
// whole session timeout.
func errDisconnected(timeout time.Duration) error {
	return &epochError{msg: fmt.Sprintf("zookeeper: disconnected for longer than the %v session timeout, so the server may have expired the session", timeout)}
}

// errGranted says that a (re)connect to server was granted a session
// timeout other than the session's own, want. It wraps ErrInvalidTTL: the
// server no longer keeps the session for the TTL its locks were taken with.
func errGranted(server string, granted, want time.Duration) error {
	if granted < want {
		return &epochError{fmt.Sprintf("zookeeper: on reconnecting, %s granted a session timeout of %v, shorter than the %v TTL of the locks in the session: the server may expire them sooner than their holders reckon",
			server, granted, want), backend.ErrInvalidTTL}
	}
	return &epochError{fmt.Sprintf("zookeeper: on reconnecting, %s granted a session timeout of %v where %v was asked for: a crashed holder would block others for longer than its TTL, so the session takes no new locks",
		server, granted, want), backend.ErrInvalidTTL}
}

// regranted reports whether err says that the session was granted another
// timeout: an acquisition then tries again in a session of its own.
func regranted(err error) bool {
	var ee *epochError
	return errors.As(err, &ee) && errors.Is(ee, backend.ErrInvalidTTL)
}

func (e *epoch) err() error { return e.cause }

func (e *epoch) ended() bool {
	select {
	case <-e.gone:
		return true
	default:
		return false
	}
}

func newEpoch() *epoch { return &epoch{gone: make(chan struct{})} }

// epoch returns the current epoch.
func (s *session) epoch() *epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// current returns the epoch a new lock is to be taken in, or why the
// session takes no new locks.
func (s *session) current() (*epoch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retired != nil {
		return nil, s.retired
	}
	return s.cur, nil
}

func (s *session) isRetired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retired != nil
}

// change receives the connection's state changes (zkclient.Config's
// OnChange). It runs on the connection's goroutine and must not block; a
// new connection's runs before anything is sent on it.
func (s *session) change(ch zkclient.Change) {
	var ended []*held
	var cause error
	s.mu.Lock()
	switch ch.State {
	case zkclient.StateConnected:
		s.connects.Add(1)
		ended, cause = s.grantedLocked(ch)
		for o := range s.observers {
			select {
			case o <- struct{}{}:
			default: // told already
			}
		}
	case zkclient.StateDisconnected:
		if s.id != 0 && s.lostTimer == nil && !s.closed {
			cur := s.cur
			s.lostTimer = time.AfterFunc(s.timeout, func() { s.presumeExpired(cur) })
		}
	case zkclient.StateExpired:
		cause = errSessionExpired
		ended = s.endEpochLocked(cause)
	case zkclient.StateAuthFailed:
		cause = errAuthFailed
		ended = s.endEpochLocked(cause)
		s.retired = cause
		s.armIdleLocked()
	}
	s.mu.Unlock()
	for _, h := range ended {
		h.sessionEnded(cause)
	}
}

// grantedLocked takes in a session the server granted on a new connection,
// before the connection sends any request on it, and returns the locks
// whose epoch that ends, and why. s.mu is held.
//
// The timeout of the first connection is openSession's to check. On a
// reconnect, a shorter timeout than the session's ends the epoch: the
// server now expires the session, and the locks with it, sooner than they
// were promised. Any other timeout retires the session.
func (s *session) grantedLocked(ch zkclient.Change) ([]*held, error) {
	var ended []*held
	var cause error
	id, granted := ch.Session, ch.Timeout
	s.granted.Store(int64(granted))
	renewed := s.id != 0 && id != s.id
	if renewed {
		// A new session without an expiry notice first: the old one is
		// gone all the same.
		cause = errSessionExpired
		ended = s.endEpochLocked(cause)
	}
	if s.lostTimer != nil {
		s.lostTimer.Stop()
		s.lostTimer = nil
	}
	select {
	case <-s.connected:
		if granted != s.timeout {
			err := errGranted(ch.Server, granted, s.timeout)
			if granted < s.timeout && !renewed {
				cause = err
				ended = s.endEpochLocked(cause)
			}
			if s.retired == nil {
				s.d.log.Warn("locker/zookeeper: session retired", "err", err)
			}
			s.retired = err
			s.armIdleLocked()
		}
	default:
		close(s.connected)
	}
	s.id = id
	return ended, cause
}

// presumeExpired ends epoch ep when the connection has stayed down for a
// whole session timeout since it dropped.
func (s *session) presumeExpired(ep *epoch) {
	s.mu.Lock()
	if s.cur != ep || s.lostTimer == nil || s.closed {
		s.mu.Unlock()
		return
	}
	s.lostTimer = nil
	cause := errDisconnected(s.timeout)
	ended := s.endEpochLocked(cause)
	s.mu.Unlock()
	for _, h := range ended {
		h.sessionEnded(cause)
	}
}

// endEpochLocked ends the current epoch and returns its locks, which the
// caller tells outside the lock.
func (s *session) endEpochLocked(cause error) []*held {
	old := s.cur
	old.cause = cause
	close(old.gone)
	s.cur = newEpoch()
	s.id = 0
	var ended []*held
	for h, ep := range s.helds {
		if ep == old {
			ended = append(ended, h)
			delete(s.helds, h)
		}
	}
	return ended
}

// register records h as a lock of epoch ep; false if that epoch ended.
func (s *session) register(h *held, ep *epoch) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ep != s.cur || s.closed {
		return false
	}
	s.helds[h] = ep
	return true
}

func (s *session) unregister(h *held) {
	s.mu.Lock()
	delete(s.helds, h)
	s.mu.Unlock()
}

// observe has ch told of every reconnect of s's connection (without
// blocking: ch has room for one), until forgotten by unobserve.
func (s *session) observe(ch chan<- struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.observers == nil {
		s.observers = map[chan<- struct{}]bool{}
	}
	s.observers[ch] = true
}

func (s *session) unobserve(ch chan<- struct{}) {
	s.mu.Lock()
	delete(s.observers, ch)
	s.mu.Unlock()
}

// call runs fn, a blocking request on the session's connection, and
// returns its error; or, if ctx ends or the epoch ep ends first, that
// error. fn then runs on in the background, and abandoned (if not nil)
// runs after it with fn's error, to undo what fn may have done. When ctx
// ended, call waits for that undo, within cleanupTimeout, so that a
// cancelled request leaves nothing behind when it returns; when the
// epoch ended, it returns at once (the undo waits for a new connection).
func (s *session) call(ctx context.Context, ep *epoch, fn func() error, abandoned func(error)) error {
	if ctx.Done() == nil {
		// Cannot be cancelled: no goroutine. The client library fails
		// requests itself when the connection drops.
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-ep.gone:
		return ep.err()
	default:
	}
	const (
		running = iota
		gaveUp
		finished
	)
	// Whoever moves state away from running first decides where fn's
	// outcome goes. fn's goroutine decides before it hands the outcome
	// over, so the caller never reads an outcome that abandoned also got.
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		err := fn()
		if h := testHooks.Load(); h != nil && h.decide != nil {
			h.decide()
		}
		if state.CompareAndSwap(running, finished) {
			done <- err
		} else if abandoned != nil {
			abandoned(err)
			done <- nil // undone; the caller may be waiting for that
		}
	}()
	var err error
	select {
	case err = <-done:
		return err
	case <-ctx.Done():
		err = ctx.Err()
	case <-ep.gone:
		err = ep.err()
	}
	if !state.CompareAndSwap(running, gaveUp) {
		return <-done // fn finished just now: its outcome stands
	}
	if h := testHooks.Load(); h != nil && h.gaveUp != nil {
		h.gaveUp()
	}
	if abandoned != nil && err == ctx.Err() {
		awaitUndo(done)
	}
	return err
}

// stop returns what stops an ownConn request made for ctx in epoch ep,
// or the error that says it is not to be sent at all, as call does.
func stop(ctx context.Context, ep *epoch) (zkclient.Stop, error) {
	if err := ctx.Err(); err != nil {
		return zkclient.Stop{}, err
	}
	select {
	case <-ep.gone:
		return zkclient.Stop{}, ep.err()
	default:
	}
	return zkclient.Stop{Done: ctx.Done(), Gone: ep.gone}, nil
}

// stopped turns an ownConn request's zkclient.ErrStopped into why it stopped:
// ctx's error, or the end of ep. Any other err is returned as it is.
func stopped(ctx context.Context, ep *epoch, err error) error {
	if !errors.Is(err, zkclient.ErrStopped) {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return ep.err()
}

// children lists path, for ctx in epoch ep.
func (s *session) children(ctx context.Context, ep *epoch, path string) ([]string, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return nil, err
		}
		children, _, err := c.ChildrenStop(st, path)
		return children, stopped(ctx, ep, err)
	}
	var children []string
	err := s.call(ctx, ep, func() error {
		c, _, err := s.conn.Children(path)
		children = c
		return err
	}, nil)
	if err != nil {
		return nil, err // fn may still be running, and writing children
	}
	return children, nil
}

// childrenW lists path and sets a child watch on it, for ctx in epoch ep.
func (s *session) childrenW(ctx context.Context, ep *epoch, path string) ([]string, <-chan gozk.Event, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return nil, nil, err
		}
		children, _, watch, err := c.ChildrenWStop(st, path)
		return children, watch, stopped(ctx, ep, err)
	}
	var children []string
	var watch <-chan gozk.Event
	err := s.call(ctx, ep, func() error {
		c, _, w, err := s.conn.ChildrenW(path)
		children, watch = c, w
		return err
	}, nil)
	if err != nil {
		return nil, nil, err // fn may still be running, and writing children
	}
	return children, watch, nil
}

// watchData sets a data watch on path, for ctx in epoch ep.
func (s *session) watchData(ctx context.Context, ep *epoch, path string) (<-chan gozk.Event, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return nil, err
		}
		ws, err := c.GetWAll(st, path)
		if err != nil {
			return nil, stopped(ctx, ep, err)
		}
		return ws[0].Event, ws[0].Err
	}
	var watch <-chan gozk.Event
	err := s.call(ctx, ep, func() error {
		_, _, ch, err := s.conn.GetW(path)
		watch = ch
		return err
	}, nil)
	if err != nil {
		return nil, err // fn may still be running, and writing watch
	}
	return watch, nil
}

// delete deletes path, whatever its version, for ctx in epoch ep.
func (s *session) delete(ctx context.Context, ep *epoch, path string) error {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return err
		}
		return stopped(ctx, ep, c.DeleteStop(st, path, -1))
	}
	return s.call(ctx, ep, func() error { return s.conn.Delete(path, -1) }, nil)
}

// setData replaces the data of path, whatever its version, for ctx in
// epoch ep, and returns the node's new Stat.
func (s *session) setData(ctx context.Context, ep *epoch, path string, data []byte) (*gozk.Stat, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return nil, err
		}
		stat, err := c.SetStop(st, path, data, -1)
		return stat, stopped(ctx, ep, err)
	}
	var stat *gozk.Stat
	err := s.call(ctx, ep, func() error {
		st, err := s.conn.Set(path, data, -1)
		stat = st
		return err
	}, nil)
	if err != nil {
		return nil, err // fn may still be running, and writing stat
	}
	return stat, nil
}

// syncChildren lists path, for ctx in epoch ep, after a sync: the listing
// sees every change the ensemble's leader committed before the sync
// reached it, whichever member the connection is on. On one of the
// Locker's own connections the two go in one write, and cost one round
// trip.
func (s *session) syncChildren(ctx context.Context, ep *epoch, path string) ([]string, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return nil, err
		}
		children, _, err := c.SyncChildrenStop(st, path)
		return children, stopped(ctx, ep, err)
	}
	if err := s.call(ctx, ep, func() error {
		_, err := s.conn.Sync(path)
		return err
	}, nil); err != nil {
		return nil, err
	}
	return s.children(ctx, ep, path)
}

// existsW sets a watch on path, for ctx in epoch ep, and reports whether
// the node exists: if it does not, the watch fires when it is created.
func (s *session) existsW(ctx context.Context, ep *epoch, path string) (bool, <-chan gozk.Event, error) {
	if c, ok := s.conn.(ownConn); ok {
		st, err := stop(ctx, ep)
		if err != nil {
			return false, nil, err
		}
		ok, _, watch, err := c.ExistsWStop(st, path)
		return ok, watch, stopped(ctx, ep, err)
	}
	var exists bool
	var watch <-chan gozk.Event
	err := s.call(ctx, ep, func() error {
		ok, _, w, err := s.conn.ExistsW(path)
		exists, watch = ok, w
		return err
	}, nil)
	if err != nil {
		return false, nil, err // fn may still be running, and writing watch
	}
	return exists, watch, nil
}

// unwatch takes the watch ch on path out of the connection's watches,
// when the caller no longer waits for it. go-zookeeper's connection
// cannot: there the watch stays until it fires (a change of its node, or
// the session's end), its event reaching no one.
func (s *session) unwatch(path string, ch <-chan gozk.Event) {
	if c, ok := s.conn.(ownConn); ok && ch != nil {
		c.Unwatch(path, ch)
	}
}

// maxReads bounds the reads of nodes' data (getAll) that one call has in
// flight: pipelined in one write on the Locker's own connections, each
// on a goroutine of its own on an application's.
const maxReads = 16

// getAll reads the data and Stat of each of paths, for ctx in epoch ep,
// with a data watch on each if watch, maxReads at a time. A node that is
// gone is reported in its Watched (ErrNoNode); any other failure is
// getAll's error.
func (s *session) getAll(ctx context.Context, ep *epoch, paths []string, watch bool) ([]zkclient.Watched, error) {
	out := make([]zkclient.Watched, 0, len(paths))
	c, own := s.conn.(ownConn)
	for len(paths) > 0 {
		chunk := paths[:min(maxReads, len(paths))]
		paths = paths[len(chunk):]
		var got []zkclient.Watched
		var err error
		if own {
			got, err = s.getOwn(ctx, ep, c, chunk, watch)
		} else {
			got, err = s.getEach(ctx, ep, chunk, watch)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// getOwn is getAll of at most maxReads paths on one of the Locker's own
// connections, in one write.
func (s *session) getOwn(ctx context.Context, ep *epoch, c ownConn, paths []string, watch bool) ([]zkclient.Watched, error) {
	st, err := stop(ctx, ep)
	if err != nil {
		return nil, err
	}
	var got []zkclient.Watched
	if watch {
		got, err = c.GetWAll(st, paths...)
	} else {
		got, err = c.GetAll(st, paths...)
	}
	return got, stopped(ctx, ep, err)
}

// getEach is getAll of at most maxReads paths on an application's
// connection, each read on a goroutine of its own.
func (s *session) getEach(ctx context.Context, ep *epoch, paths []string, watch bool) ([]zkclient.Watched, error) {
	out := make([]zkclient.Watched, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Go(func() {
			var w zkclient.Watched
			errs[i] = s.call(ctx, ep, func() error {
				var err error
				if watch {
					w.Data, w.Stat, w.Event, err = s.conn.GetW(p)
				} else {
					w.Data, w.Stat, err = s.conn.Get(p)
				}
				return err
			}, nil)
			switch {
			case errors.Is(errs[i], gozk.ErrNoNode):
				out[i].Err, errs[i] = errs[i], nil
			case errs[i] == nil:
				out[i] = w
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", paths[i], err)
		}
	}
	return out, nil
}

// awaitUndo waits, within cleanupTimeout, until an abandoned request was
// undone.
func awaitUndo(done <-chan error) {
	t := time.NewTimer(cleanupTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// ref counts one more user of the session.
func (s *session) ref() {
	s.mu.Lock()
	s.refs++
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
}

// unref counts one user fewer; the last one starts the idle timer.
func (s *session) unref() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs--
	s.armIdleLocked()
}

// armIdleLocked starts the timer that closes an unused session: after
// sessionIdle, or at once if it is retired. s.mu is held.
func (s *session) armIdleLocked() {
	if s.refs > 0 || !s.owned || s.closed {
		return
	}
	d := time.Duration(sessionIdle.Load())
	if s.retired != nil {
		d = 0
	}
	if s.idle == nil {
		s.idle = time.AfterFunc(d, func() { s.d.closeIdle(s) })
	} else {
		s.idle.Reset(d)
	}
}

// cleanup deletes the node at path in the background, retrying until it
// is gone or the session is closed (which removes it anyway, being
// ephemeral). It is used where a node of ours may be left behind: an
// abandoned or expired acquisition, an acquire whose reply was lost.
func (s *session) cleanup(path string) {
	s.retry(func() (bool, error) {
		err := s.conn.Delete(path, -1)
		return err == nil || errors.Is(err, gozk.ErrNoNode), err
	}, "delete "+path)
}

// cleanupGUID deletes, in the background, every child of parent whose name
// carries guid: the nodes of a create whose outcome is unknown.
func (s *session) cleanupGUID(parent, guid string) {
	s.retry(func() (bool, error) {
		children, _, err := s.conn.Children(parent)
		if errors.Is(err, gozk.ErrNoNode) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range children {
			if n, ok := parseLockNode(c); ok && n.guid == guid {
				if err := s.conn.Delete(parent+"/"+c, -1); err != nil && !errors.Is(err, gozk.ErrNoNode) {
					return false, err
				}
			}
		}
		return true, nil
	}, "delete the nodes of "+guid+" under "+parent)
}

// A cleanup is a deletion retried until done: op makes one attempt and
// says whether nothing is left to do.
type cleanup struct {
	op   func() (bool, error)
	what string
}

// maxCleaners bounds the goroutines deleting a session's leftover nodes,
// however many locks end at once (an expiry, a session presumed lost).
const maxCleaners = 4

// retry queues a cleanup, and starts a cleaner if fewer than maxCleaners
// run.
func (s *session) retry(op func() (bool, error), what string) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.cleaners == maxCleaners {
		s.cleanQ = append(s.cleanQ, cleanup{op, what})
		return
	}
	if !s.d.goBackground() {
		return
	}
	s.cleanQ = append(s.cleanQ, cleanup{op, what})
	s.cleaners++
	go s.cleaner()
}

// next takes the first queued cleanup; false when there is none left, and
// the cleaner is to stop.
func (s *session) next() (cleanup, bool) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if len(s.cleanQ) == 0 {
		s.cleaners--
		s.cleanQ = nil // let a large backlog's array go
		return cleanup{}, false
	}
	c := s.cleanQ[0]
	s.cleanQ[0] = cleanup{}
	s.cleanQ = s.cleanQ[1:]
	return c, true
}

// cleaner runs queued cleanups until none is left. One that fails goes
// back to the end of the queue, and the cleaner pauses, longer after each
// failure in a row (the connection is down, most likely); once the
// session or the driver is closed, a cleanup that fails is dropped (the
// session's end takes its nodes with it).
func (s *session) cleaner() {
	d := s.d
	defer d.wg.Done()
	const first = 20 * time.Millisecond
	backoff := first
	for {
		c, ok := s.next()
		if !ok {
			return
		}
		done, err := c.op()
		switch {
		case done, s.closing():
			backoff = first
			continue
		case errors.Is(err, gozk.ErrNoAuth):
			d.log.Warn("locker/zookeeper: cleanup not permitted; the node stays until its session ends", "op", c.what, "err", err)
			continue
		}
		s.cmu.Lock()
		s.cleanQ = append(s.cleanQ, c)
		s.cmu.Unlock()
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
		case <-d.done:
			t.Stop()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// closing reports whether the session or its driver was closed.
func (s *session) closing() bool {
	select {
	case <-s.done:
		return true
	case <-s.d.done:
		return true
	default:
		return false
	}
}

// close ends the session. Its ephemeral nodes go with it.
func (s *session) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	if s.idle != nil {
		s.idle.Stop()
	}
	if s.lostTimer != nil {
		s.lostTimer.Stop()
		s.lostTimer = nil
	}
	ended := s.endEpochLocked(errSessionClosed)
	s.mu.Unlock()
	for _, h := range ended {
		h.sessionEnded(errSessionClosed)
	}
	if s.owned {
		s.conn.Close()
	}
}

// openSession connects a new session with the given timeout and waits until
// the server granted it. A server that grants another timeout than asked
// (outside its range) fails the setup with ErrInvalidTTL: holding a lock
// for a different time than the caller asked would be silently wrong.
func (d *driver) openSession(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	go func() {
		select {
		case <-d.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn, err := zkclient.Connect(ctx, zkclient.Config{
		Servers:        d.servers,
		SessionTimeout: s.key,
		OnChange:       s.change,
		Logger:         d.log,
	})
	if err != nil {
		select {
		case <-d.done:
			return backend.ErrClosed
		default:
		}
		return fmt.Errorf("zookeeper: within %v: %w", setupTimeout, err)
	}
	s.conn = conn
	fail := func(err error) error {
		conn.Close()
		return err
	}
	if granted := time.Duration(s.granted.Load()); granted != s.key {
		r, err := probeRange(ctx, []string{conn.Server()})
		rng := "its minSessionTimeout and maxSessionTimeout"
		if err == nil {
			rng = r.String()
		}
		return fail(fmt.Errorf("%w: ZooKeeper granted a session timeout of %v where %v was asked for; a lock's TTL is its session's timeout, and the server grants timeouts %s",
			backend.ErrInvalidTTL, granted, s.key, rng))
	}
	if d.auth != nil {
		if err := s.call(ctx, s.epoch(), func() error { return conn.AddAuth("digest", d.auth) }, nil); err != nil {
			return fail(fmt.Errorf("zookeeper: authentication: %w", err))
		}
	}
	return nil
}
