package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/zk"
)

// attempt is one queue entry of an acquisition: our node in the lock's key
// node, from its create to the grant, or to its removal. It belongs to one
// epoch of one session; an attempt that ends with that epoch, or with our
// node vanishing, is followed by a new one with a new guid (see acquire).
// The session's reference is acquire's: a granted lock takes it over.
//
// A request sent through s.call captures copies of the fields it needs,
// never a: it may run on after the attempt gave up, while a.node changes,
// and a then stays on acquire's stack.
type attempt struct {
	d      *driver
	ctx    context.Context
	req    backend.Request
	wait   bool // Acquire: wait for our turn; TryAcquire: Busy if not first
	s      *session
	ep     *epoch
	parent string  // the lock's key node
	guid   string  // in our node's name, to find it again after a lost reply
	node   ourNode // set by create
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
	vanished := 0 // tries whose queue node went from under them
	for tries := 1; ; tries++ {
		ep, err := s.current()
		if err == nil {
			a := &attempt{d: d, ctx: ctx, req: req, wait: wait, s: s, ep: ep, parent: parent, guid: newGUID()}
			var acq backend.Acquisition
			if acq, err = a.run(); err == nil {
				return acq, nil // the lock keeps the session's reference
			}
		}
		// A session that expired while we queued took our node with it:
		// queue again in the session that replaced it. One that was
		// granted another timeout takes no new locks: queue again in a
		// session of our own, whose setup checks what the server grants.
		fresh := regranted(err)
		if errors.Is(err, errRequeue) {
			vanished++
		}
		requeue := fresh || errors.Is(err, errRequeue) || errors.Is(err, errSessionExpired) || errors.Is(err, zk.ErrSessionExpired)
		if !requeue || tries == maxAttempts || ctx.Err() != nil {
			s.unref()
			return backend.Acquisition{}, d.describe(err, req.Key, vanished, tries)
		}
		if fresh {
			s.unref()
			if s, err = d.session(ctx, req.TTL); err != nil {
				return backend.Acquisition{}, err
			}
		}
	}
}

// run makes the attempt: create our node, then take the lock or, when
// waiting, wait for our turn. On failure it leaves nothing behind.
func (a *attempt) run() (backend.Acquisition, error) {
	if err := a.create(); err != nil {
		return backend.Acquisition{}, err
	}
	acq, err := a.await()
	if err != nil {
		a.remove()
		return backend.Acquisition{}, err
	}
	return acq, nil
}

// remove deletes our node after a failed or cancelled acquisition: at once
// if it can, within cleanupTimeout, so that the node is gone when the
// caller learns of the failure; in the background otherwise.
func (a *attempt) remove() {
	s, path := a.s, a.node.path
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), cleanupTimeout)
	defer cancel()
	err := s.call(ctx, a.ep, func() error { return s.conn.Delete(path, -1) }, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, errSessionExpired) && !errors.Is(err, errSessionClosed) {
		s.cleanup(path)
	}
}

// create makes our ephemeral sequential node under the key node, its name
// carrying our guid, and records it in a.node. A create whose reply was
// lost to a dropped connection may have been applied: the node is then
// looked for by its guid before another is created.
func (a *attempt) create() error {
	var lastErr error
	// Only a waiting Acquire lists after the reply on a contended key: it
	// lists again once woken anyway. For TryAcquire the listing behind
	// the create is its only one.
	list := !a.wait || !a.d.contention.likely(a.parent)
	for range maxAttempts {
		if err := a.ctx.Err(); err != nil {
			return err // nothing sent, nothing to undo
		}
		node, err := a.sendCreate(list)
		switch {
		case err == nil:
			a.node = node
			return nil
		case errors.Is(err, zk.ErrNoNode):
			// The key node does not exist, or was collected as an empty
			// container just now. A key node we make has no child yet:
			// our node will most likely be its first, which holds the
			// lock without a listing (see await).
			made, perr := a.ensureParent()
			if perr != nil {
				return perr
			}
			list = !made
		case errors.Is(err, zk.ErrConnectionClosed):
			found, ferr := a.find()
			if ferr != nil {
				a.s.cleanupGUID(a.parent, a.guid)
				return fmt.Errorf("%w (and looking for a node it may have created: %w)", err, ferr)
			}
			if found != "" {
				if h := testHooks.Load(); h != nil && h.recovered != nil {
					h.recovered(found)
				}
				a.node = ourNode{path: found}
				return nil
			}
		case errors.Is(err, zk.ErrNoServer):
			// Not sent: no server could be reached. Try again.
		default:
			return err
		}
		lastErr = err
	}
	// A create whose reply was lost may still show up.
	a.s.cleanupGUID(a.parent, a.guid)
	return lastErr
}

// sendCreate sends the protected create of our node and, if list, the
// listing of the queue right behind it, without waiting for the create's
// reply: the server answers the listing after the create, so an
// uncontended acquisition waits for one round trip, not two. Over an
// application's own connection (New), which cannot send the two together
// or report the create's czxid, it sends the create alone; the listing
// then reads the czxid from our node's entry (see list).
func (a *attempt) sendCreate(list bool) (ourNode, error) {
	s, parent, guid, acl := a.s, a.parent, a.guid, a.d.acl
	prefix := lockPrefix(parent, guid)
	var node ourNode
	err := s.call(a.ctx, a.ep, func() error {
		if h := testHooks.Load(); h != nil && h.beforeCreate != nil {
			h.beforeCreate(prefix)
		}
		node.sent = time.Now()
		f, ok := s.conn.(fencer)
		if !ok {
			p, err := s.conn.Create(prefix, nil, zk.FlagEphemeralSequential, acl)
			node.path = p
			return err
		}
		behind := ""
		if list {
			behind = parent
		}
		c, l, err := f.CreateAndList(prefix, nil, zk.FlagEphemeralSequential, acl, behind)
		if err != nil {
			return err
		}
		node.path, node.czxid, node.owner, node.known = c.Path, c.Zxid, c.Session, true
		if list && l.Err == nil {
			node.children, node.listed = l.Children, true
		}
		return nil
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

// find returns the path of the child of the key node whose name carries
// our guid, or "". A listing that could not reach the server (the
// connection is being re-established) is tried again, up to maxAttempts
// times: the node, if it was made, belongs to our session and stays until
// the session ends, so it is worth finding rather than giving up an
// acquisition that may well have succeeded.
func (a *attempt) find() (string, error) {
	s, parent := a.s, a.parent
	var children []string
	var err error
	for range maxAttempts {
		err = s.call(a.ctx, a.ep, func() error {
			c, _, err := s.conn.Children(parent)
			children = c
			return err
		}, nil)
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			break
		}
		if h := testHooks.Load(); h != nil && h.findFailed != nil {
			h.findFailed(err)
		}
	}
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if c := withGUID(children, a.guid); c != "" {
		return parent + "/" + c, nil
	}
	return "", nil
}

// withGUID returns the first of children whose name carries guid, or "".
func withGUID(children []string, guid string) string {
	for _, c := range children {
		if n, ok := parseLockNode(c); ok && n.guid == guid {
			return c
		}
	}
	return ""
}

// ensureParent creates the key node and any missing node above it, as
// containers: the server deletes a container once its last child is gone,
// so keys that are no longer used do not accumulate. made says that this
// call created the key node.
func (a *attempt) ensureParent() (made bool, err error) {
	s, acl := a.s, a.d.acl
	mk := func(p string) (bool, error) {
		err := s.call(a.ctx, a.ep, func() error {
			_, err := s.conn.CreateContainer(p, nil, zk.FlagContainer, acl)
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
	made, err = mk(a.parent)
	if !errors.Is(err, zk.ErrNoNode) {
		return made, err
	}
	for _, p := range ancestors(a.parent) {
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
func (a *attempt) await() (backend.Acquisition, error) {
	self := a.node.path[len(a.parent)+1:]
	if n, ok := parseLockNode(self); ok && n.seq == 0 && a.node.known {
		// The first node ever created in its key node: sequence numbers
		// count every child created or deleted there before, so none
		// is ahead of it. The lock is ours from the create.
		if h := testHooks.Load(); h != nil && h.first != nil {
			h.first(a.node.path)
		}
		if a.wait {
			a.d.contention.saw(a.parent, false)
		}
		return a.grant(a.node.sent)
	}
	first := true
	for {
		children, start, pipelined, err := a.listQueue()
		if err = a.settle(err); errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return backend.Acquisition{}, err
		}
		if h := testHooks.Load(); h != nil && h.listed != nil {
			h.listed(a.node.path, len(children))
		}
		q := order(children, self, a.guid)
		if first && a.wait {
			a.d.contention.saw(a.parent, !q.lowest)
		}
		first = false
		for _, o := range q.orphans {
			a.s.cleanup(a.parent + "/" + o)
		}
		switch {
		case !q.self && pipelined:
			continue // not in a listing that should have it: list again to be sure
		case !q.self:
			return backend.Acquisition{}, errRequeue
		case q.lowest:
			return a.grant(start)
		case !a.wait:
			return backend.Acquisition{}, &backend.Busy{}
		}
		if err := a.watchPred(a.parent + "/" + q.pred); !errors.Is(err, errAgain) {
			return backend.Acquisition{}, err
		}
	}
}

// listQueue lists the queue: the listing sent behind the create
// (pipelined), once, if there is one; otherwise a listing sent now, which
// also reads our node where the create's reply was not seen. start is no
// later than the sending of the requests the listing follows.
func (a *attempt) listQueue() (children []string, start time.Time, pipelined bool, err error) {
	node := &a.node
	if node.listed { // set only with known
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
	err = a.s.call(a.ctx, a.ep, a.list(&c, &stat), nil)
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

// list returns the request that lists the queue into children; where the
// create's reply was not seen (!known), it also reads our own node into
// stat, in the same round trip.
func (a *attempt) list(children *[]string, stat **zk.Stat) func() error {
	s, parent, path, known := a.s, a.parent, a.node.path, a.node.known
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

// grant makes the lock of our node, which is the lowest in its queue.
func (a *attempt) grant(start time.Time) (backend.Acquisition, error) {
	s, ep, node := a.s, a.ep, a.node
	h := &held{d: a.d, s: s, ep: ep, path: node.path, owner: node.owner, ttl: s.timeout, onLost: a.req.OnLost, op: make(chan struct{}, 1)}
	if !s.register(h, ep) {
		return backend.Acquisition{}, ep.err()
	}
	return backend.Acquisition{Held: h, Fence: uint64(node.czxid), Fenced: true, TTL: s.timeout, Start: start}, nil
}

// watchPred watches pred, the node just before ours, and waits until it
// goes. It returns errAgain when the queue is to be listed again (pred
// went, or the watch ended with the connection), or why to stop waiting.
func (a *attempt) watchPred(pred string) error {
	s := a.s
	var watch <-chan zk.Event
	err := s.call(a.ctx, a.ep, func() error {
		// A data watch, not an exists watch: on a node that is already
		// gone it fails without leaving a watch behind.
		_, _, ch, err := s.conn.GetW(pred)
		watch = ch
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return errAgain // gone already: look again
	}
	if err = a.settle(err); err != nil {
		return err
	}
	if h := testHooks.Load(); h != nil && h.watching != nil {
		h.watching(a.node.path, pred)
	}
	// Deleted (a release, an expiry, a waiter that gave up) or the watch
	// ended with the connection: look again either way.
	return waitOn(a, watch)
}

// waitOn waits for ch, then returns errAgain; or for the end of a's
// context, of its session epoch or of the driver, and returns why.
func waitOn[T any](a *attempt, ch <-chan T) error {
	select {
	case <-ch:
		return errAgain
	case <-a.ctx.Done():
		return a.ctx.Err()
	case <-a.ep.gone:
		return a.ep.err()
	case <-a.d.done:
		return backend.ErrClosed
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
func (a *attempt) settle(err error) error {
	if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) {
		return err
	}
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	return waitOn(a, t.C)
}

// describe makes the error that ended an acquisition after tries tries,
// vanished of which lost their queue node, say what it means for a lock.
func (d *driver) describe(err error, key string, vanished, tries int) error {
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("zookeeper: not permitted (ACL) to queue for %q under %s: the nodes were created with credentials this Locker does not have (zookeeper://user:password@...): %w", key, d.base, err)
	case errors.Is(err, errRequeue):
		others := ""
		if vanished < tries {
			others = " (in the others the session expired or was granted another timeout)"
		}
		return fmt.Errorf("zookeeper: our queue node vanished in %d of %d tries%s: is something else deleting nodes under %s? %w", vanished, tries, others, d.base, err)
	}
	return err
}
