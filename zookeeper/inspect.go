package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
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
// order (by sequence number), the holders being the front of the queue that
// backend.Admit admits, as the waiters' own acquisitions judge it; one, or
// each shared or permit holder. The listing goes behind a sync, so that it
// sees every change committed before Inspect began, on whichever member of
// an ensemble it is served: an Inspect after an Observe notice sees the
// change the notice is for. A holder's fence is its Lock.Fence: its node's
// czxid, or, in a node that a move (a change of TTL) made again, the fence
// the move recorded in the node's data. Its value is the rest of the node's
// data (see lockData; all of it, for a node of another client's). Its
// ephemeral owner is the session the lock lives in. The holders' nodes are
// read in one round trip per maxReads of them. The rest are waiters, in
// Holder.Queue with their kind, limit and weight (their values are not
// read); Holder.Waiters counts them. The TTL is the session's timeout,
// whose remaining part no client can read: TTLKnown is false. Tokens are
// not stored on the server.
//
// Detail: "key node", the key's node (which the server deletes when its
// queue is empty); and for each holder (each Hold's Detail, the first
// one's also in the Holder's) "node", the holder's node, "session" (its id
// in hex), "created" (the node's creation, on the server's clock) and
// "session timeout": the lock's TTL. A session of this Locker's has it at
// hand; another client's is read from the server that session is
// connected to, the one whose four-letter word cons lists it with its
// timeout, asking each server the Locker knows (the URL's, or with New the
// one its connection is on) once for all holders. Where none lists it,
// the value starts with "unknown: " and says why. A waiter's Detail has
// its "node".
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
	for _, w := range q.waiters {
		h.Queue = append(h.Queue, backend.Hold{Kind: w.claim.Kind, Limit: w.claim.Limit, Weight: w.claim.Weight,
			Detail: map[string]string{"node": q.parent + "/" + w.name}})
	}
	h.Waiters = len(q.waiters)
	if len(q.holders) == 0 {
		return h, nil
	}
	owners := make([]int64, len(q.holders))
	for i, n := range q.holders {
		owners[i] = n.stat.EphemeralOwner
	}
	timeouts := d.sessionTimeouts(ctx, s, owners)
	for _, n := range q.holders {
		fence, fenced, value := n.fenceAndValue()
		h.Holds = append(h.Holds, backend.Hold{
			Kind: n.claim.Kind, Limit: n.claim.Limit, Weight: n.claim.Weight,
			Fence: fence, Fenced: fenced, Value: value,
			Detail: map[string]string{
				"node":            q.parent + "/" + n.name,
				"session":         "0x" + strconv.FormatInt(n.stat.EphemeralOwner, 16),
				"created":         time.UnixMilli(n.stat.Ctime).UTC().Format(time.RFC3339Nano),
				"session timeout": timeouts[n.stat.EphemeralOwner],
			},
		})
	}
	first := h.Holds[0]
	h.Held = true
	h.Fence, h.Fenced, h.Value = first.Fence, first.Fenced, first.Value
	maps.Copy(h.Detail, first.Detail)
	return h, nil
}

// fenceAndValue reads a holder's fence and value from its node: the
// fence its data records if a move made the node again (see lockData),
// else its czxid; and the value from its data, all of it where the data
// is not this library's (see parseLockData). A recorded fence is earlier
// than the czxid of the node the move made; one that is not, nobody
// wrote as this library does, and the fence is unknown.
func (n heldNode) fenceAndValue() (fence uint64, fenced bool, value []byte) {
	recorded, value, _ := parseLockData(n.data)
	switch {
	case recorded == 0:
		return uint64(n.stat.Czxid), true, value
	case recorded < n.stat.Czxid:
		return uint64(recorded), true, value
	}
	return 0, false, value
}

// sessionTimeouts returns the timeout of each of the sessions ids, as
// Inspect's Detail tells it: this Locker's own from its sessions, the
// others' from the servers (see serverSessionTimeouts).
func (d *driver) sessionTimeouts(ctx context.Context, s *session, ids []int64) map[int64]string {
	out := make(map[int64]string, len(ids))
	var ask []int64
	for _, id := range ids {
		if _, done := out[id]; done {
			continue
		}
		if timeout, ok := d.sessionTimeout(id); ok {
			out[id] = timeout.String()
			continue
		}
		out[id] = ""
		ask = append(ask, id)
	}
	if len(ask) > 0 {
		maps.Copy(out, serverSessionTimeouts(ctx, d.knownServers(s), ask))
	}
	return out
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

// serverSessionTimeouts asks each of servers, at once, for its
// connections (cons) and returns the timeout of each of the sessions ids
// as the server that has it lists it; or "unknown: " and why no server
// did. A session is listed by the one server its client is connected to,
// so every server is asked; once, whatever the number of sessions.
func serverSessionTimeouts(ctx context.Context, servers []string, ids []int64) map[int64]string {
	out := make(map[int64]string, len(ids))
	if len(servers) == 0 {
		for _, id := range ids {
			out[id] = "unknown: a Locker made with New does not know which server its connection is on, and only the server the session is connected to tells its timeout (cons)"
		}
		return out
	}
	answers := make([]consAnswer, len(servers))
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
			answers[i].timeouts = map[string]time.Duration{}
			for _, m := range consEntry.FindAllStringSubmatch(out, -1) {
				ms, _ := strconv.ParseInt(m[2], 10, 64)
				answers[i].timeouts[m[1]] = time.Duration(ms) * time.Millisecond
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		out[id] = sessionTimeoutFrom(servers, answers, strconv.FormatUint(uint64(id), 16))
	}
	return out
}

// consAnswer is what one server's cons said: the timeouts of the
// sessions connected to it, by session id in hex; or why it did not.
type consAnswer struct {
	timeouts map[string]time.Duration
	err      error
}

// sessionTimeoutFrom returns the timeout of the session whose id is hex
// as one of the servers' answers lists it, or "unknown: " and why none
// does.
func sessionTimeoutFrom(servers []string, answers []consAnswer, hex string) string {
	var why []string
	for i, a := range answers {
		switch timeout, err := a.timeouts[hex], a.err; {
		case timeout > 0:
			return timeout.String()
		case errors.Is(err, errNotAllowed):
			why = append(why, servers[i]+" does not allow the four-letter word cons (4lw.commands.whitelist), which lists sessions with their timeouts")
		case err != nil:
			why = append(why, fmt.Sprintf("%s: %v", servers[i], err))
		default:
			why = append(why, servers[i]+" has no connection of session 0x"+hex)
		}
	}
	return "unknown: " + strings.Join(why, "; ") + " (only the server the session is connected to lists it: its holder may be connected to a server not named here, or its session may have just ended)"
}

// ForceRelease implements backend.Inspector: it deletes the node of
// every holder, the front of the queue that backend.Admit admits (see
// Inspect), and no waiter's. The waiters it admits, which watch those
// nodes or the key node's children, are woken as by a release. The
// holders learn of it at their next refresh, which finds their node gone
// and closes their Lost. A holder that releases its node between the
// listing and the delete is skipped; ForceRelease reports whether it
// deleted any node.
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
	q := inQueueOrder(children)
	released := false
	for _, n := range q[:admitted(q)] {
		err = s.delete(ctx, ep, parent+"/"+n.name)
		switch {
		case errors.Is(err, gozk.ErrNoNode):
			// The holder let go first.
		case err != nil:
			return released, fmt.Errorf("zookeeper: delete %s/%s: %w", parent, n.name, err)
		default:
			released = true
		}
	}
	return released, nil
}

// queueState is a key node's queue as Inspect read it.
type queueState struct {
	parent  string
	holders []heldNode // in queue order
	waiters []lockNode // in queue order
}

// heldNode is a holder's node, its Stat and its data.
type heldNode struct {
	lockNode
	stat *gozk.Stat
	data []byte
}

// readQueue lists parent, behind a sync (so that it sees every change
// committed before it began, whichever server it asks), and reads the
// holders' nodes, maxReads at a time in one round trip. When one of them
// goes between the two (released, or its session expired), the waiters
// behind may hold the key by now, so it lists again; after maxAttempts
// listings it reports the holders that were still there, unless none was.
func (s *session) readQueue(ctx context.Context, parent string) (queueState, error) {
	q := queueState{parent: parent}
	for try := 1; ; try++ {
		ep := s.epoch()
		children, err := s.syncChildren(ctx, ep, parent)
		if errors.Is(err, gozk.ErrNoNode) {
			return q, nil
		}
		if err != nil {
			return q, fmt.Errorf("zookeeper: list %s: %w", parent, err)
		}
		nodes := inQueueOrder(children)
		n := admitted(nodes)
		paths := make([]string, n)
		for i, node := range nodes[:n] {
			paths[i] = parent + "/" + node.name
		}
		got, err := s.getAll(ctx, ep, paths, false)
		if err != nil {
			return q, fmt.Errorf("zookeeper: read the holders of %s: %w", parent, err)
		}
		q.holders, q.waiters = q.holders[:0], nodes[n:]
		for i, g := range got {
			if g.Err == nil {
				q.holders = append(q.holders, heldNode{nodes[i], g.Stat, g.Data})
			}
		}
		switch {
		case len(q.holders) == n:
			return q, nil
		case try == maxAttempts && len(q.holders) == 0:
			return q, fmt.Errorf("zookeeper: the queue of %s changed under %d listings in a row", parent, maxAttempts)
		case try == maxAttempts:
			return q, nil
		}
	}
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
