package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/zkclient"
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
	guid   string  // our node's tag: to find it again after a lost reply, and our claim (see newTag)
	node   ourNode // set by create

	// own is the data watch on our node that handover sets, on the
	// connection s.connects counted as ownConns.
	own      <-chan gozk.Event
	ownConns int64
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
			a := &attempt{d: d, ctx: ctx, req: req, wait: wait, s: s, ep: ep, parent: parent, guid: newTag(backend.ClaimOf(req))}
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
		requeue := fresh || errors.Is(err, errRequeue) || errors.Is(err, errSessionExpired) || errors.Is(err, gozk.ErrSessionExpired)
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
	if h := testHooks.Load(); h != nil && h.created != nil {
		h.created(a.node.path)
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
	err := s.delete(ctx, a.ep, path)
	if err != nil && !errors.Is(err, gozk.ErrNoNode) && !errors.Is(err, errSessionExpired) && !errors.Is(err, errSessionClosed) {
		s.cleanup(path)
	}
}

// create makes our ephemeral sequential node under the key node, its name
// carrying our guid, and records it in a.node. A create whose reply was
// lost to a dropped connection may have been applied: the node is then
// looked for by its guid before another is created.
func (a *attempt) create() error {
	var lastErr error
	list := true // the listing goes behind the create
	for range maxAttempts {
		if err := a.ctx.Err(); err != nil {
			return err // nothing sent, nothing to undo
		}
		node, err := a.sendCreate(list)
		switch {
		case err == nil:
			a.node = node
			return nil
		case errors.Is(err, gozk.ErrNoNode):
			// The key node does not exist, or was collected as an empty
			// container just now. A key node we make has no child yet:
			// our node will most likely be its first, which holds the
			// lock without a listing (see await).
			made, perr := a.ensureParent()
			if perr != nil {
				return perr
			}
			list = !made
		case errors.Is(err, zkclient.ErrProtocol):
			// The reply contradicts the create (zkclient.CheckCreated):
			// its word on our node is not to be believed, and the node,
			// if made, is found by its guid and removed, as a lost
			// reply's would be. Believing it would queue us under a
			// node that is not ours, or slice a path that is not under
			// the key node.
			a.discard()
			return err
		case errors.Is(err, gozk.ErrConnectionClosed):
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
		case errors.Is(err, gozk.ErrNoServer):
			// Not sent: no server could be reached. Try again after a
			// pause, as find does, so that the same failed pass over
			// the servers does not fail the next try too.
			if serr := a.settle(err); !errors.Is(serr, errAgain) {
				// An earlier try's create may still show up.
				a.s.cleanupGUID(a.parent, a.guid)
				return serr
			}
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
	if c, ok := a.s.conn.(ownConn); ok {
		return a.createOwn(c, list)
	}
	s, prefix := a.s, lockPrefix(a.parent, a.guid)
	var node ourNode
	err := s.call(a.ctx, a.ep, func() error {
		beforeCreate(prefix)
		node.sent = time.Now()
		p, err := s.conn.Create(prefix, lockData(0, a.req.Value), gozk.FlagEphemeralSequential, a.d.acl)
		if err == nil {
			// An application's connection does not check the reply
			// against the request as the Locker's own do.
			err = zkclient.CheckCreated(prefix, p, true)
		}
		if err == nil {
			node.path = p
		}
		return err
	}, func(err error) { a.undoCreate(node.path, err) })
	if err != nil {
		return ourNode{}, err // node is not ours to read if the caller gave up
	}
	return node, nil
}

// createOwn is sendCreate on one of the Locker's own connections: the
// create's reply gives the fence, and the listing goes right behind it if
// list. A caller that gives up waiting for the reply (zkclient.ErrStopped) leaves
// the outcome to undoCreate; a cancelled one waits for that undo, within
// cleanupTimeout, so that it leaves nothing behind when it returns.
func (a *attempt) createOwn(c ownConn, list bool) (ourNode, error) {
	st, err := stop(a.ctx, a.ep)
	if err != nil {
		return ourNode{}, err // nothing sent, nothing to undo
	}
	prefix, behind := lockPrefix(a.parent, a.guid), ""
	if list {
		behind = a.parent
	}
	undone := make(chan error, 1)
	beforeCreate(prefix)
	node := ourNode{sent: time.Now()}
	cr, l, err := c.CreateAndList(st, prefix, lockData(0, a.req.Value), gozk.FlagEphemeralSequential, a.d.acl, behind, func(cr zkclient.Created, err error) {
		a.undoCreate(cr.Path, err)
		undone <- nil
	})
	if errors.Is(err, zkclient.ErrStopped) {
		err = stopped(a.ctx, a.ep, err)
		if err == a.ctx.Err() {
			awaitUndo(undone)
		}
		return ourNode{}, err
	}
	if err != nil {
		return ourNode{}, err
	}
	node.path, node.czxid, node.owner, node.known = cr.Path, cr.Zxid, cr.Session, true
	if list && l.Err == nil {
		node.children, node.listed = l.Children, true
	}
	return node, nil
}

// undoCreate undoes the create of a caller that gave up waiting for its
// outcome (err, and path if it succeeded): at once if the delete goes
// through, else in the background.
func (a *attempt) undoCreate(path string, err error) {
	s := a.s
	switch {
	case err == nil:
		if derr := s.conn.Delete(path, -1); derr != nil && !errors.Is(derr, gozk.ErrNoNode) {
			s.cleanup(path)
		}
	case errors.Is(err, gozk.ErrConnectionClosed):
		s.cleanupGUID(a.parent, a.guid)
	}
}

// discard removes our node, if the create made one, after a reply to it
// that is not to be believed: found by its guid at once if it can be,
// within cleanupTimeout, so that it is gone when the caller learns of the
// failure; in the background otherwise.
func (a *attempt) discard() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), cleanupTimeout)
	defer cancel()
	b := *a
	b.ctx = ctx
	found, err := b.find()
	switch {
	case err != nil:
		a.s.cleanupGUID(a.parent, a.guid)
	case found != "":
		b.node = ourNode{path: found}
		b.remove()
	}
}

// beforeCreate calls the test hook of that name.
func beforeCreate(prefix string) {
	if h := testHooks.Load(); h != nil && h.beforeCreate != nil {
		h.beforeCreate(prefix)
	}
}

// find returns the path of the child of the key node whose name carries
// our guid, or "". A listing that could not reach the server (the
// connection is being re-established) is tried again after a pause (see
// settle), up to maxAttempts times: the node, if it was made, belongs to
// our session and stays until the session ends, so it is worth finding
// rather than giving up an acquisition that may well have succeeded.
//
// The pause matters: the connection fails every request queued while a
// pass over the servers fails, and a listing sent again at once can be
// failed by the same pass, so that all tries are spent in a moment.
func (a *attempt) find() (string, error) {
	s, parent := a.s, a.parent
	var children []string
	var err error
	for try := 1; ; try++ {
		children, err = s.children(a.ctx, a.ep, parent)
		if !errors.Is(err, gozk.ErrNoServer) && !errors.Is(err, gozk.ErrConnectionClosed) {
			break
		}
		if h := testHooks.Load(); h != nil && h.findFailed != nil {
			h.findFailed(err)
		}
		if try == maxAttempts {
			break
		}
		if serr := a.settle(err); !errors.Is(serr, errAgain) {
			err = serr // ctx, the session or the Locker ended
			break
		}
	}
	if errors.Is(err, gozk.ErrNoNode) {
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
			_, err := s.conn.CreateContainer(p, nil, gozk.FlagContainer, acl)
			return err
		}, nil)
		if errors.Is(err, gozk.ErrNodeExists) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("create %s: %w", p, err)
		}
		return true, nil
	}
	made, err = mk(a.parent)
	if !errors.Is(err, gozk.ErrNoNode) {
		return made, err
	}
	for _, p := range ancestors(a.parent) {
		if made, err = mk(p); err != nil {
			return false, err
		}
	}
	return made, nil
}

// await lists the queue until backend.Admit admits our node, over the
// nodes ahead of it in queue order, and waits in between: for the node
// Admit names (an exclusive claim's is the node just before ours), or,
// where no single node ahead blocks ours, for any change of the key
// node's children. A release thus wakes only the waiters it may admit
// (see the package doc for a semaphore's). A node ahead that disagrees
// with ours fails the acquisition with a *backend.Mismatch. Without wait
// it returns a Busy at once if our node is not admitted.
func (a *attempt) await() (backend.Acquisition, error) {
	self := a.node.path[len(a.parent)+1:]
	if n, ok := parseLockNode(self); ok && n.seq == 0 && a.node.known {
		// The first node ever created in its key node: sequence numbers
		// count every child created or deleted there before, so none
		// is ahead of it. The lock is ours from the create: a claim
		// alone always fits.
		if h := testHooks.Load(); h != nil && h.first != nil {
			h.first(a.node.path)
		}
		return a.grant(a.node.sent)
	}
	children := false // list with a child watch: any node ahead may admit us by going
	for {
		l, err := a.listQueue(children)
		if err = a.settle(err); errors.Is(err, errAgain) {
			continue
		}
		if err != nil {
			return backend.Acquisition{}, err
		}
		if h := testHooks.Load(); h != nil && h.listed != nil {
			h.listed(a.node.path, len(l.children))
		}
		q := order(l.children, self, a.guid)
		for _, o := range q.orphans {
			a.s.cleanup(a.parent + "/" + o)
		}
		switch {
		case !q.self && l.pipelined:
			continue // not in a listing that should have it: list again to be sure
		case !q.self:
			return backend.Acquisition{}, errRequeue
		case q.mismatch != nil:
			return backend.Acquisition{}, q.mismatch
		case q.admitted:
			return a.grant(l.start)
		case !a.wait:
			return backend.Acquisition{}, &backend.Busy{}
		case q.wait == "" && l.watch == nil:
			children = true
			continue // list again, setting the watch
		}
		start, err := a.waitTurn(q, l.watch)
		if err == nil {
			return a.grant(start)
		}
		if !errors.Is(err, errAgain) {
			return backend.Acquisition{}, err
		}
	}
}

// waitTurn waits for the node q names to go, or with none named, for the
// key node's children to change (watch, set by the listing q comes from).
// It returns errAgain when the queue is to be listed again, or why to
// stop waiting; or, with a nil error, that the lock is ours without a
// listing, and when its TTL began (see handover).
func (a *attempt) waitTurn(q queue, watch <-chan gozk.Event) (time.Time, error) {
	if q.wait == "" {
		return time.Time{}, a.waitChildren(watch)
	}
	pred := a.parent + "/" + q.wait
	if c, ok := a.s.conn.(ownConn); ok && q.ahead == 1 && a.node.known {
		return a.handover(c, pred)
	}
	return time.Time{}, a.watchPred(pred)
}

// listing is the queue as listQueue read it.
type listing struct {
	children  []string
	start     time.Time         // no later than the sending of the requests the listing follows
	pipelined bool              // the listing sent behind the create
	watch     <-chan gozk.Event // the child watch set with it, if asked for
}

// listQueue lists the queue, with a child watch on the key node if watch:
// the listing sent behind the create (pipelined), once, if there is one
// and no watch is asked for; otherwise a listing sent now, which also
// reads our node where the create's reply was not seen.
func (a *attempt) listQueue(watch bool) (listing, error) {
	node := &a.node
	if node.listed && !watch { // set only with known
		// Listed behind the create: the lock's time runs from before
		// the create was sent.
		node.listed = false
		if h := testHooks.Load(); h != nil && h.pipelined != nil {
			h.pipelined(node.path)
		}
		return listing{children: node.children, start: node.sent, pipelined: true}, nil
	}
	node.listed = false
	l := listing{start: time.Now()}
	var stat *gozk.Stat
	var err error
	switch {
	case node.known && watch:
		l.children, l.watch, err = a.s.childrenW(a.ctx, a.ep, a.parent)
	case node.known:
		l.children, err = a.s.children(a.ctx, a.ep, a.parent)
	default:
		var c []string
		var w <-chan gozk.Event
		if err = a.s.call(a.ctx, a.ep, a.listOwn(&c, &w, watch, &stat), nil); err == nil {
			l.children, l.watch = c, w // not ours to read if the caller gave up
		}
	}
	if errors.Is(err, gozk.ErrNoNode) {
		return listing{}, errRequeue // the key node went, and our node with it
	}
	if err != nil {
		return listing{}, err
	}
	if !node.known {
		node.czxid, node.owner, node.known = stat.Czxid, stat.EphemeralOwner, true
	}
	return l, nil
}

// listOwn returns the request that lists the queue into children, with a
// child watch into w if watch, and, in the same round trip, reads our own
// node into stat: for a node whose create's reply was not seen (the
// connection dropped, or is not ours).
func (a *attempt) listOwn(children *[]string, w *<-chan gozk.Event, watch bool, stat **gozk.Stat) func() error {
	s, parent, path := a.s, a.parent, a.node.path
	return func() error {
		type result struct {
			ok  bool
			st  *gozk.Stat
			err error
		}
		rc := make(chan result, 1)
		go func() {
			ok, st, err := s.conn.Exists(path)
			rc <- result{ok, st, err}
		}()
		var c []string
		var err error
		if watch {
			c, _, *w, err = s.conn.ChildrenW(parent)
		} else {
			c, _, err = s.conn.Children(parent)
		}
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

// grant makes the lock of our node, which backend.Admit admitted.
func (a *attempt) grant(start time.Time) (backend.Acquisition, error) {
	s, ep, node := a.s, a.ep, a.node
	h := &held{d: a.d, s: s, ep: ep, path: node.path, owner: node.owner, ttl: s.timeout, onLost: a.req.OnLost, op: make(chan struct{}, 1),
		fence: node.czxid, value: a.req.Value}
	if !s.register(h, ep) {
		return backend.Acquisition{}, ep.err()
	}
	return backend.Acquisition{Held: h, Fence: uint64(node.czxid), Fenced: true, TTL: s.timeout, Start: start}, nil
}

// watchPred watches pred, the node ahead of ours that blocks it (for an
// exclusive claim, the node just before ours), and waits until it goes.
// It returns errAgain when the queue is to be listed again (pred went, or
// the watch ended with the connection), or why to stop waiting.
//
// A deleted pred does not by itself admit ours even if pred was the only
// node ahead: a lock moved to another session (Refresh with a new TTL) is
// deleted and made again under the same name, keeping its place.
// handover says when a deletion does tell.
func (a *attempt) watchPred(pred string) error {
	// A data watch, not an exists watch: on a node that is already gone
	// it fails without leaving a watch behind.
	watch, err := a.s.watchData(a.ctx, a.ep, pred)
	if errors.Is(err, gozk.ErrNoNode) {
		return errAgain // gone already: look again
	}
	if err = a.settle(err); err != nil {
		return err
	}
	if h := testHooks.Load(); h != nil && h.watching != nil {
		h.watching(a.node.path, pred)
	}
	// Deleted (a release, an expiry, a waiter that gave up, a move) or
	// the watch ended with the connection: look again either way.
	if _, err := waitOn(a, watch); err != nil {
		return err
	}
	return errAgain
}

// handover waits, on one of the Locker's own connections, for pred to go,
// pred being the only node ahead of ours. The lock is then ours without
// listing the queue again, one round trip sooner (a node alone in its
// queue is admitted, whatever it claims), when all of these hold:
//
//   - pred's data is this library's (nodeData, and what lockData adds),
//     so its deletion is not a move (see nodeData), and the event is its
//     deletion: nodes ahead of ours can go but never come, since a
//     sequence number is never handed out twice in a key node, and the
//     key node outlives our node in it;
//   - the data watch on our own node, set on the same connection no later
//     than pred's, has not fired: events come in the order of the changes
//     that fire them, so our node was still there when pred went (it goes
//     only if something outside this library deletes it, or with the
//     session, which ends the epoch);
//   - no reconnect came in between: it would re-register the watches, and
//     those fired meanwhile come in no particular order (session.connects);
//   - the wait took less than a third of the session timeout. The lock's
//     TTL runs from the sending of the watches, whose replies show that
//     the session was alive then; after a longer wait a listing gives the
//     lock a later start.
//
// Otherwise it returns errAgain, to list the queue as after any wake.
func (a *attempt) handover(c ownConn, pred string) (time.Time, error) {
	st, err := stop(a.ctx, a.ep)
	if err != nil {
		return time.Time{}, err
	}
	conns := a.s.connects.Load()
	paths := []string{pred}
	if a.own == nil || a.ownConns != conns {
		paths = append(paths, a.node.path)
	}
	sent := time.Now()
	ws, err := c.GetWAll(st, paths...)
	if err = a.settle(stopped(a.ctx, a.ep, err)); err != nil {
		return time.Time{}, err
	}
	if len(ws) == 2 {
		if ws[1].Err != nil {
			return time.Time{}, errAgain // our node is gone: the listing says so
		}
		a.own, a.ownConns = ws[1].Event, conns
	}
	p := ws[0]
	if p.Err != nil {
		return time.Time{}, errAgain // pred is gone already: look again
	}
	if h := testHooks.Load(); h != nil && h.watching != nil {
		h.watching(a.node.path, pred)
	}
	ev, err := waitOn(a, p.Event)
	if err != nil {
		return time.Time{}, err
	}
	if _, _, ours := parseLockData(p.Data); ev.Type != gozk.EventNodeDeleted || !ours || fired(a.own) ||
		a.s.connects.Load() != conns || time.Since(sent) >= a.s.timeout/3 {
		return time.Time{}, errAgain
	}
	if h := testHooks.Load(); h != nil && h.handedOver != nil {
		h.handedOver(a.node.path)
	}
	return sent, nil
}

// waitChildren waits for the key node's children to change, watch being
// the child watch set by the latest listing: a node ahead of ours went
// (or one joined behind it). It returns errAgain, to list the queue and
// judge ours again, or why to stop waiting.
func (a *attempt) waitChildren(watch <-chan gozk.Event) error {
	if h := testHooks.Load(); h != nil && h.watching != nil {
		h.watching(a.node.path, a.parent)
	}
	if _, err := waitOn(a, watch); err != nil {
		return err
	}
	return errAgain
}

// fired reports whether the watch ch has fired.
func fired(ch <-chan gozk.Event) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitOn waits for ch and returns what it received; or for the end of
// a's context, of its session epoch or of the driver, and returns why.
func waitOn[T any](a *attempt, ch <-chan T) (v T, err error) {
	select {
	case v = <-ch:
		return v, nil
	case <-a.ctx.Done():
		return v, a.ctx.Err()
	case <-a.ep.gone:
		return v, a.ep.err()
	case <-a.d.done:
		return v, backend.ErrClosed
	}
}

// errAgain says that a read is to be made again.
var errAgain = errors.New("read again")

// settle decides what a read that failed with err means for a waiter. A
// read that failed only because the connection dropped, or no server
// could be reached for the moment, is made again (errAgain) after a short
// pause: the session may well be alive, and our node with it. Meanwhile
// the connection reconnects, or the epoch ends because the connection
// stayed down for a whole session timeout, or ctx ends; the pause then
// returns that error. Any other err is returned as it is.
func (a *attempt) settle(err error) error {
	if !errors.Is(err, gozk.ErrConnectionClosed) && !errors.Is(err, gozk.ErrNoServer) {
		return err
	}
	t := time.NewTimer(50 * time.Millisecond)
	defer t.Stop()
	if _, err := waitOn(a, t.C); err != nil {
		return err
	}
	return errAgain
}

// describe makes the error that ended an acquisition after tries tries,
// vanished of which lost their queue node, say what it means for a lock.
func (d *driver) describe(err error, key string, vanished, tries int) error {
	switch {
	case errors.Is(err, gozk.ErrNoAuth):
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
