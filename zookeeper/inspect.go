package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
)

var _ backend.Inspector = (*driver)(nil)

// inspectTTL is the timeout of the session the Locker opens for Inspect
// and ForceRelease when it has none open (within the server's range): a
// session of a TTL that locks may then use, closed like any other once
// idle.
const inspectTTL = 10 * time.Second

// Inspect implements backend.Inspector: the key node's children in queue
// order. The first is the holder: its node's czxid is the fence (the
// holder's Lock.Fence, unless the holder changed its TTL since, which
// makes its node again: the czxid is then the later one), its ephemeral
// owner the session the lock lives in. The rest are waiters. The TTL
// is the session's timeout, whose remaining part no client can read:
// TTLKnown is false. Tokens are not stored on the server.
//
// Detail: "key node", the key's node (which the server deletes when its
// queue is empty); for a held key, "node" (the holder's
// node), "session" (its id in hex), "created" (the node's creation, on
// the server's clock) and, when the session is one of this Locker's,
// "session timeout", the lock's TTL.
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	s, err := d.inspectSession(ctx)
	if err != nil {
		return backend.Holder{}, err
	}
	defer s.unref()
	q, err := s.readQueue(ctx, d.base+"/"+encodeKey(key))
	if err != nil {
		return backend.Holder{}, err
	}
	h := backend.Holder{WaitersKnown: true, Detail: map[string]string{"key node": q.parent}}
	if q.holder == "" {
		return h, nil
	}
	h.Held = true
	h.Fence, h.Fenced = uint64(q.stat.Czxid), true
	h.Waiters = q.waiters
	h.Detail["node"] = q.holder
	h.Detail["session"] = "0x" + strconv.FormatInt(q.stat.EphemeralOwner, 16)
	h.Detail["created"] = time.UnixMilli(q.stat.Ctime).UTC().Format(time.RFC3339Nano)
	if timeout, ok := d.sessionTimeout(q.stat.EphemeralOwner); ok {
		h.Detail["session timeout"] = timeout.String()
	}
	return h, nil
}

// ForceRelease implements backend.Inspector: it deletes the holder's node,
// the first in the queue, and no other. The waiter behind it, which
// watches that node, is woken as by a release. The holder learns of it at
// its next refresh, which finds its node gone and closes its Lost. Should
// the holder release the node between the listing and the delete, nothing
// is deleted and ForceRelease reports false.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	s, err := d.inspectSession(ctx)
	if err != nil {
		return false, err
	}
	defer s.unref()
	ep := s.epoch()
	parent := d.base + "/" + encodeKey(key)
	children, err := s.children(ctx, ep, parent)
	if errors.Is(err, gozk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("zookeeper: list %s: %w", parent, err)
	}
	first, _ := queueOrder(children)
	if first == "" {
		return false, nil
	}
	err = s.delete(ctx, ep, parent+"/"+first)
	switch {
	case errors.Is(err, gozk.ErrNoNode):
		return false, nil // the holder let go first
	case err != nil:
		return false, fmt.Errorf("zookeeper: delete %s/%s: %w", parent, first, err)
	}
	return true, nil
}

// queueOrder returns the name of the first lock node among children (the
// holder's) and how many follow it; "" when there is none.
func queueOrder(children []string) (first string, behind int) {
	type entry struct {
		name string
		seq  int64
	}
	var q []entry
	for _, c := range children {
		if n, ok := parseLockNode(c); ok {
			q = append(q, entry{c, n.seq})
		}
	}
	if len(q) == 0 {
		return "", 0
	}
	first = slices.MinFunc(q, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) }).name
	return first, len(q) - 1
}

// queueState is a key node's queue as Inspect read it.
type queueState struct {
	parent  string
	holder  string     // the holder's node path, "" when no one holds the key
	stat    *gozk.Stat // the holder node's
	waiters int
}

// readQueue lists parent and reads the first node's stat. When that node
// goes between the two (released, or its session expired), the next in
// line may hold the key by now, so it lists again.
func (s *session) readQueue(ctx context.Context, parent string) (queueState, error) {
	q := queueState{parent: parent}
	for range maxAttempts {
		ep := s.epoch()
		children, err := s.children(ctx, ep, parent)
		if errors.Is(err, gozk.ErrNoNode) {
			return q, nil
		}
		if err != nil {
			return q, fmt.Errorf("zookeeper: list %s: %w", parent, err)
		}
		first, behind := queueOrder(children)
		if first == "" {
			return q, nil
		}
		path := parent + "/" + first
		var ok bool
		var st *gozk.Stat
		err = s.call(ctx, ep, func() error {
			var err error
			ok, st, err = s.conn.Exists(path)
			return err
		}, nil)
		if err != nil {
			return q, fmt.Errorf("zookeeper: read %s: %w", path, err)
		}
		if ok {
			q.holder, q.stat, q.waiters = path, st, behind
			return q, nil
		}
	}
	return q, fmt.Errorf("zookeeper: the queue of %s changed under %d listings in a row", parent, maxAttempts)
}

// inspectSession returns a session to inspect keys with, with one
// reference counted for the caller: the user's with New; otherwise any
// session of the Locker that is open, or else a new one.
func (d *driver) inspectSession(ctx context.Context) (*session, error) {
	if d.fixed != nil {
		d.fixed.ref()
		return d.fixed, nil
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, backend.ErrClosed
	}
	for _, s := range d.sessions {
		if s.usable() {
			s.ref() // under d.mu, so that closeIdle cannot take it away meanwhile
			d.mu.Unlock()
			return s, nil
		}
	}
	d.mu.Unlock()
	return d.session(ctx, min(max(inspectTTL, d.caps.MinTTL), d.caps.MaxTTL))
}

// usable reports whether s is open and takes new locks.
func (s *session) usable() bool {
	if !s.isOpen() {
		return false
	}
	return !s.isRetired()
}

// isOpen reports whether s was set up and is not closed.
func (s *session) isOpen() bool {
	select {
	case <-s.ready:
	default:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setupErr == nil && !s.closed
}

// sessionTimeout returns the timeout of this Locker's session with id, if
// it has one.
func (d *driver) sessionTimeout(id int64) (time.Duration, bool) {
	d.mu.Lock()
	all := make([]*session, 0, len(d.sessions)+len(d.retired)+1)
	for _, s := range d.sessions {
		all = append(all, s)
	}
	for s := range d.retired {
		all = append(all, s)
	}
	d.mu.Unlock()
	if d.fixed != nil {
		all = append(all, d.fixed)
	}
	for _, s := range all {
		if s.isOpen() && s.conn.SessionID() == id {
			return s.timeout, true
		}
	}
	return 0, false
}
