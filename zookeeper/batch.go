package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/workpool"
)

// A batched refresh checks many locks of one session in one request: a
// multi of check operations, one per lock node, each with version -1 (the
// node exists, whatever its version). The server handles a multi as a
// write: the leader evaluates each check against its latest state (the
// changes it has proposed included, a session's expiry among them), after
// checking that the session is alive, and the multi is committed by a
// quorum before the answer comes back. A successful multi thus proves what
// Refresh's sync and read prove, from the leader itself. It also costs what
// a write costs: a transaction in the servers' logs, of about the length of
// the paths checked.
//
// A multi is applied whole or not at all. When a check fails, the server
// reports the first failing operation; the others it did not apply. A lock
// whose node is gone is then reported as such and the rest of the chunk is
// checked again without it.

// Limits of one multi. A server refuses a request larger than its
// jute.maxbuffer (1 MiB by default), and keeps its last 500 transactions in
// memory, each about three times over (the request, the transaction and
// its serialized form), for followers that fall behind: 500 multis of 32
// KiB hold some 50 MB of its heap. The byte limit is the one that binds:
// a check of a lock node takes 75 bytes or more.
const (
	maxCheckOps   = 1000
	maxCheckBytes = 32 << 10
	// checkOpBytes is what a check costs in a multi besides its path:
	// the op header (type, done, err), the path's length and the version.
	checkOpBytes = 4 + 1 + 4 + 4 + 4
	// maxBatchWorkers bounds the requests one RefreshBatch has in flight:
	// multis, and refreshes of locks that go on their own.
	maxBatchWorkers = 4
)

// checkItem is one lock in a batched check and its place in the batch.
type checkItem struct {
	h *held
	i int
}

// checkGroup is the locks of one epoch of one session, which the multi
// checking them is sent over.
type checkGroup struct {
	s     *session
	ep    *epoch
	items []checkItem
}

// RefreshBatch implements backend.BatchRefresher: the watchdog refreshes
// the locks due together with it. Locks whose TTL stays are checked in a
// multi per chunk of their session; a lock whose TTL changes (a move to
// another session), whose node another request of its own is using, or
// whose node's owner is not its connection's session is refreshed on its
// own, as by Refresh. Every lock gets the outcome Refresh would give it.
func (d *driver) RefreshBatch(ctx context.Context, locks []backend.Held, ttls []time.Duration) []error {
	errs := make([]error, len(locks))
	var groups []*checkGroup
	byEpoch := map[*epoch]*checkGroup{}
	var jobs []func()
	for i, l := range locks {
		h, ok := l.(*held)
		if !ok {
			jobs = append(jobs, func() { errs[i] = l.Refresh(ctx, ttls[i]) })
			continue
		}
		s, ep, alone, err := h.enlist(ttls[i])
		switch {
		case err != nil:
			errs[i] = err
		case alone:
			jobs = append(jobs, func() { errs[i] = h.Refresh(ctx, ttls[i]) })
		default:
			g := byEpoch[ep]
			if g == nil {
				g = &checkGroup{s: s, ep: ep}
				byEpoch[ep] = g
				groups = append(groups, g)
			}
			g.items = append(g.items, checkItem{h, i})
		}
	}
	for _, g := range groups {
		for _, c := range chunks(g.items) {
			jobs = append(jobs, func() { g.check(ctx, c, errs) })
		}
	}
	runJobs(maxBatchWorkers, jobs)
	return errs
}

// enlist takes h's turn for a batched check with TTL ttl and returns the
// session and epoch to check it in; h.end gives the turn back. alone says
// that h is to be refreshed on its own instead, and err that it is not
// held; h's turn is free again in both cases.
func (h *held) enlist(ttl time.Duration) (s *session, ep *epoch, alone bool, err error) {
	select {
	case h.op <- struct{}{}:
	default:
		return nil, nil, true, nil // a TTL or Release in flight: Refresh waits for it
	}
	s, ep, owner, err := h.state()
	switch {
	case err != nil:
	case ttl > 0 && ttl.Truncate(time.Millisecond) != s.timeout:
		alone = true // a move to the session of the new TTL
	case ep.ended():
		err = fmt.Errorf("%w: %w", backend.ErrNotHeld, ep.err())
	case owner != s.conn.SessionID():
		// The check would prove another session alive than the one that
		// owns the node; Refresh reads the owner.
		alone = true
	default:
		return s, ep, false, nil
	}
	h.end()
	return nil, nil, alone, err
}

// chunks splits items into the multis that check them.
func chunks(items []checkItem) [][]checkItem {
	var out [][]checkItem
	start, size := 0, 0
	for j, it := range items {
		n := checkOpBytes + len(it.h.path)
		if j > start && (j-start == maxCheckOps || size+n > maxCheckBytes) {
			out = append(out, items[start:j])
			start, size = j, 0
		}
		size += n
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// runJobs runs jobs on at most n goroutines, the caller's among them.
func runJobs(n int, jobs []func()) { workpool.Run(make(chan struct{}, n-1), jobs) }

// check sends one multi for items and sets each lock's outcome in errs,
// giving back every lock's turn. A lock whose node is gone gets ErrNotHeld
// and the rest are checked again without it.
func (g *checkGroup) check(ctx context.Context, items []checkItem, errs []error) {
	for len(items) > 0 {
		k, err := g.multi(ctx, items)
		switch {
		case err == nil:
			g.succeeded(items, errs)
			return
		case k >= 0 && errors.Is(err, gozk.ErrNoNode):
			it := items[k]
			it.h.finish()
			errs[it.i] = fmt.Errorf("%w: the lock node is gone", backend.ErrNotHeld)
			it.h.end()
			items = append(items[:k:k], items[k+1:]...)
		case k >= 0 && errors.Is(err, gozk.ErrNoAuth):
			// The nodes' ACL does not let this session read them, which a
			// check needs and an exists does not: go one by one.
			for _, it := range items {
				it.h.end()
				errs[it.i] = it.h.Refresh(ctx, 0)
			}
			return
		default:
			if notHeld(err, g.ep) {
				err = fmt.Errorf("%w: %w", backend.ErrNotHeld, g.ep.err())
			}
			for _, it := range items {
				errs[it.i] = err
				it.h.end()
			}
			return
		}
	}
}

// succeeded records a multi that found every node of items.
func (g *checkGroup) succeeded(items []checkItem, errs []error) {
	var err error
	if g.ep.ended() {
		// The epoch ended while the multi was out: an answer on a
		// connection granted a shorter session does not make the locks
		// ours (see held.check).
		err = fmt.Errorf("%w: %w", backend.ErrNotHeld, g.ep.err())
	}
	for _, it := range items {
		if err == nil {
			it.h.extend(g.s.timeout)
		}
		errs[it.i] = err
		it.h.end()
	}
}

// multiFailure carries the per-operation results of a multi that failed,
// out of session.call.
type multiFailure struct {
	res []gozk.MultiResponse
	err error
}

func (m *multiFailure) Error() string { return m.err.Error() }
func (m *multiFailure) Unwrap() error { return m.err }

// multi checks that the nodes of items exist, in one request over the
// group's session. When the server refused the multi because of one
// operation, k is that operation's index and err its error; otherwise k is
// -1.
func (g *checkGroup) multi(ctx context.Context, items []checkItem) (k int, err error) {
	ops := make([]any, len(items))
	for j, it := range items {
		ops[j] = &gozk.CheckVersionRequest{Path: it.h.path, Version: -1}
	}
	s := g.s
	if h := testHooks.Load(); h != nil && h.checking != nil {
		h.checking(s.timeout, len(ops))
	}
	err = s.call(ctx, g.ep, func() error {
		res, err := s.conn.Multi(ops...)
		if err != nil && len(res) == len(ops) {
			return &multiFailure{res: res, err: err}
		}
		return err
	}, nil)
	var mf *multiFailure
	if !errors.As(err, &mf) {
		return -1, err
	}
	for j, r := range mf.res {
		if r.Error != nil {
			return j, r.Error
		}
	}
	return -1, mf.err
}
