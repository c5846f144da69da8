package zookeeper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
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
// queue is empty); for a held key, "node" (the holder's node), "session"
// (its id in hex), "created" (the node's creation, on the server's clock)
// and "session timeout": the lock's TTL. A session of this Locker's has
// it at hand; another client's is read from the server that session is
// connected to, the one whose four-letter word cons lists it with its
// timeout, asking each server the Locker knows (the URL's, or with New
// the one its connection is on). Where none lists it, the value starts
// with "unknown: " and says why.
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
	} else {
		h.Detail["session timeout"] = serverSessionTimeout(ctx, d.knownServers(s), q.stat.EphemeralOwner)
	}
	return h, nil
}

// knownServers returns the servers Inspect can ask about a session: the
// URL's, or with New the one the user's connection is on, if it says.
func (d *driver) knownServers(s *session) []string {
	if d.servers != nil {
		return d.servers
	}
	if c, ok := s.conn.(interface{ Server() string }); ok && c.Server() != "" {
		return []string{c.Server()}
	}
	return nil
}

// consTimeout bounds each server's answer to cons: Inspect is one or two
// round trips, and a server that does not answer must not make it wait
// for its whole deadline.
const consTimeout = 3 * time.Second

// consEntry matches a connection of cons's listing: its session id and
// the session's timeout in milliseconds, e.g.
// " /127.0.0.1:51514[1](queued=0,...,sid=0x100149b1b5a0001,lop=PING,est=...,to=3000,...)".
var consEntry = regexp.MustCompile(`sid=0x([0-9a-f]+)[,)].*?\bto=(\d+)`)

// serverSessionTimeout asks each of servers, at once, for its connections
// (cons) and returns the timeout of session id as the server that has it
// lists it; or "unknown: " and why no server did. A session is listed by
// the one server its client is connected to, so every server is asked.
func serverSessionTimeout(ctx context.Context, servers []string, id int64) string {
	hex := strconv.FormatUint(uint64(id), 16)
	if len(servers) == 0 {
		return "unknown: a Locker made with New does not know which server its connection is on, and only the server the session is connected to tells its timeout (cons)"
	}
	type answer struct {
		timeout time.Duration
		err     error
	}
	answers := make([]answer, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, consTimeout)
			defer cancel()
			out, err := fourLetter(ctx, srv, "cons")
			if err != nil {
				answers[i].err = err
				return
			}
			for _, m := range consEntry.FindAllStringSubmatch(out, -1) {
				if m[1] == hex {
					ms, _ := strconv.ParseInt(m[2], 10, 64)
					answers[i].timeout = time.Duration(ms) * time.Millisecond
					return
				}
			}
		})
	}
	wg.Wait()
	var why []string
	for i, a := range answers {
		switch {
		case a.timeout > 0:
			return a.timeout.String()
		case errors.Is(a.err, errNotAllowed):
			why = append(why, servers[i]+" does not allow the four-letter word cons (4lw.commands.whitelist), which lists sessions with their timeouts")
		case a.err != nil:
			why = append(why, fmt.Sprintf("%s: %v", servers[i], a.err))
		default:
			why = append(why, servers[i]+" has no connection of session 0x"+hex)
		}
	}
	return "unknown: " + strings.Join(why, "; ") + " (only the server the session is connected to lists it: its holder may be connected to a server not named here, or its session may have just ended)"
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
