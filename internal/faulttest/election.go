package faulttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
)

// The run's elections and reentrant owners: a campaign is an exclusive
// hold with a value, and a reentrant owner's handles are one hold; the
// oracle checks both as the holds they are.

// campaign campaigns in an election on rq's key (on a semaphore's key,
// which admits no exclusive hold, on the first key, a mutex, instead),
// leads a while as hold does, now and then proclaiming a new value, and
// resigns. A third of the campaigns run under the owner the workers of
// the client share, a third under an owner of their own: leadership is
// never reentrant, so a campaign under an owner that leads waits its turn
// like any other.
func (w *worker) campaign(ctx context.Context, p *proc, rq request) {
	key := rq.key
	if rq.claim.Kind == backend.Permit {
		key = w.r.keys[0]
	}
	claim := backend.Claim{Kind: backend.Exclusive}
	e := locker.NewElection(p.Locker, key, w.lockOptions(claim)...)
	actx, cancel := context.WithTimeout(ctx, w.waitFor())
	defer cancel()
	how := "campaign"
	switch w.rng.IntN(3) {
	case 1:
		actx, how = locker.WithOwner(actx, p.name+"/leader"), "campaign.shared-owner"
	case 2:
		actx, how = locker.WithOwner(actx, fmt.Sprintf("%s/%08x", p.name, w.rng.Uint32())), "campaign.owner"
	}
	ld := &leadership{e: e}
	value := ld.next(w.r, p)
	began := time.Now()
	lk, err := e.Campaign(actx, value)
	if err != nil {
		w.failed("campaign", p, key, began, err)
		return
	}
	w.r.count("campaign")
	w.r.count(how)
	b := w.r.oracle.record(&belief{proc: p, key: key, how: "campaign", claim: claim, lock: lk, election: ld, began: began, start: time.Now(), handles: 1})
	w.readLeader(ctx, b)
	w.hold(ctx, b)
	w.resign(b)
}

// leadership is a campaign's Election and the values it gave its leader.
type leadership struct {
	e      *locker.Election
	mu     sync.Mutex
	values []string
}

// valueSeq numbers leaders' values: each is unique, so that a value an
// observer reports names the leadership it belongs to where the backend
// stores no tokens.
var valueSeq atomic.Uint64

// next returns a new value of the leadership, where the backend stores
// values.
func (ld *leadership) next(r *run, p *proc) []byte {
	if r.caps.MaxValueLen <= 0 {
		return nil
	}
	v := fmt.Sprintf("%s, value %d", p.name, valueSeq.Add(1))
	ld.mu.Lock()
	ld.values = append(ld.values, v)
	ld.mu.Unlock()
	return []byte(v)
}

// gave reports whether the leadership gave its leader value.
func (ld *leadership) gave(value []byte) bool {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(value) > 0 && slices.Contains(ld.values, string(value))
}

// proclaim replaces a leader's value, with a deadline that is now and
// then too short to learn the outcome.
func (w *worker) proclaim(ctx context.Context, b *belief) {
	value := b.election.next(w.r, b.proc)
	pctx, cancel := context.WithTimeout(ctx, w.callTimeout())
	defer cancel()
	err := b.election.e.Proclaim(pctx, value)
	b.note(w.r, "proclaim %q: %v", value, err)
	switch {
	case err == nil:
		w.r.count("proclaim.ok")
		w.readLeader(ctx, b)
	case errors.Is(err, locker.ErrNotHeld):
		w.r.count("proclaim.notheld")
	case errors.Is(err, locker.ErrClosed):
		w.r.count("proclaim.closed")
	default:
		w.r.count("proclaim.unknown")
	}
}

// resign ends a leadership, sometimes with a deadline too short to learn
// the outcome.
func (w *worker) resign(b *belief) {
	if closed(b.lock.Lost()) {
		w.r.count("lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.callTimeout())
	defer cancel()
	err := b.election.e.Resign(ctx)
	b.note(w.r, "resign: %v", err)
	switch {
	case err == nil:
		w.r.count("resign.ok")
	case errors.Is(err, locker.ErrClosed):
		w.r.count("resign.closed")
	default:
		w.r.count("resign.unknown")
	}
}

// readLeader reads the election's leader (Election.Leader) while b leads:
// a reading that shows b's leadership (its token where the backend stores
// tokens, else a value it gave) must show b's term, its Lock.Fence.
func (w *worker) readLeader(ctx context.Context, b *belief) {
	lctx, cancel := context.WithTimeout(ctx, w.callTimeout())
	defer cancel()
	ldr, err := b.election.e.Leader(lctx)
	if err != nil {
		b.note(w.r, "leader: %v", err)
		return
	}
	b.note(w.r, "leader: value %q, term %d (%v), token %.8s", ldr.Value, ldr.Term, ldr.Termed, ldr.Token)
	if !b.election.shows(ldr, b.lock) || !ldr.Termed {
		return
	}
	w.r.count("leader.read")
	if term, ok := b.lock.Fence(); ok && term != ldr.Term {
		w.r.violate("key %q: %s led with the term (Lock.Fence) %d, token %.8s, and Election.Leader, read while it led, reports the term %d (value %q, token %.8s)",
			b.key, b.proc.name, term, b.lock.Token(), ldr.Term, ldr.Value, ldr.Token)
	}
}

// shows reports whether ldr, a reading of the election's leader, shows
// the leadership lk: its token where the backend stores tokens, else one
// of the values it gave.
func (ld *leadership) shows(ldr locker.Leader, lk locker.Lock) bool {
	if ldr.Token != "" {
		return ldr.Token == lk.Token()
	}
	return ld.gave(ldr.Value)
}

// observed is what an observer of a key reported, in order.
type observed struct {
	key     string
	reports []locker.Leader
}

// observeLeaders observes, through the checker, every key a campaign may
// take (Election.Observe) until ctx ends, for checkObserved; Wait on the
// group returned waits for the observers to end.
func (r *run) observeLeaders(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, key := range r.keys {
		if r.uses[i] == useSemaphore {
			continue
		}
		obs := &observed{key: key}
		r.oracle.mu.Lock()
		r.oracle.observed = append(r.oracle.observed, obs)
		r.oracle.mu.Unlock()
		ch := locker.NewElection(r.checker.Locker, key).Observe(ctx)
		wg.Go(func() {
			for ldr := range ch {
				r.oracle.mu.Lock()
				obs.reports = append(obs.reports, ldr)
				r.oracle.mu.Unlock()
			}
		})
	}
	return &wg
}

// checkObserved checks what the observers reported: terms that never go
// back, and for a report of a leadership the run knows (by its token, or
// else by a value it gave), that leadership's term. o.mu is held.
func (o *oracle) checkObserved() {
	for _, obs := range o.observed {
		var last locker.Leader
		for i, ldr := range obs.reports {
			if ldr.Termed && last.Termed && ldr.Term < last.Term {
				o.r.violate("key %q: an observer reported the term %d after the term %d: terms went back (report %d of %d)",
					obs.key, ldr.Term, last.Term, i+1, len(obs.reports))
			}
			o.r.count("observed")
			if ldr.Termed {
				last = ldr
				o.checkReport(obs.key, ldr)
			}
		}
	}
}

// checkReport checks an observer's report of a leader with a term against
// the belief it shows, if the run knows it.
func (o *oracle) checkReport(key string, ldr locker.Leader) {
	for _, b := range o.beliefs {
		if b.key != key {
			continue
		}
		var mine bool
		var term uint64
		switch {
		case b.election != nil:
			var ok bool
			term, ok = b.lock.Fence() // in hand since Campaign: no round trip
			mine = ok && b.election.shows(ldr, b.lock)
		case ldr.Token != "" && b.fenced:
			mine, term = ldr.Token == b.lock.Token(), b.fence
		}
		if !mine {
			continue
		}
		o.r.count("observed.checked")
		if term != ldr.Term {
			o.r.violate("key %q: an observer reported the term %d for a holder whose Lock.Fence is %d: %s", key, ldr.Term, term, o.describe(b))
		}
		return
	}
}

// reenter takes rq's key under an owner of its own and then, through the
// same Locker, one or two more handles on the hold, by Acquire or
// TryAcquire, which return at once however the key is contended. It
// holds the key a while, as hold does, releases the handles in a random
// order, and checks that the hold stays until the last is released. An
// owner whose hold was lost before it asked again took a new hold
// (WithOwner): the handles after it are that hold's.
func (w *worker) reenter(ctx context.Context, p *proc, rq request) {
	owner := fmt.Sprintf("%s/%08x", p.name, w.rng.Uint32())
	octx := locker.WithOwner(ctx, owner)
	opts := w.lockOptions(rq.claim)
	actx, cancel := context.WithTimeout(octx, w.waitFor())
	defer cancel()
	began := time.Now()
	first, err := p.Locker.Acquire(actx, rq.key, opts...)
	if err != nil {
		w.failed("reenter", p, rq.key, began, err)
		return
	}
	w.r.count("reenter")
	handles := []*belief{w.r.oracle.addOwned(p, rq.key, owner, rq.claim, began, first)}
	hold := first // the owner's hold: a new one once it lapsed
	for range 1 + w.rng.IntN(2) {
		how := "try"
		call := p.Locker.TryAcquire
		if w.rng.IntN(2) == 0 {
			how, call = "acquire", p.Locker.Acquire
		}
		began := time.Now()
		lk, err := call(actx, rq.key, opts...)
		if err != nil {
			w.refused(p, rq.key, owner, how, hold, err)
			break
		}
		if lk.Token() != hold.Token() {
			w.lapsed(p, rq.key, owner, how, hold)
			hold = lk
		} else {
			w.r.count("reenter.handle")
		}
		handles = append(handles, w.r.oracle.addOwned(p, rq.key, owner, rq.claim, began, lk))
	}
	w.hold(ctx, handles[len(handles)-1])
	w.rng.Shuffle(len(handles), func(i, j int) { handles[i], handles[j] = handles[j], handles[i] })
	// The handles on one hold share its token.
	of, left := map[string]int{}, map[string]int{}
	for _, b := range handles {
		of[b.lock.Token()]++
		left[b.lock.Token()]++
	}
	for _, b := range handles {
		w.release(b)
		tok := b.lock.Token()
		left[tok]--
		if left[tok] > 0 {
			w.stillHeld(b, of[tok]-left[tok], of[tok])
		}
	}
}

// lapsed checks an owner's reentrant acquisition that took a new hold
// rather than a handle on hold, the owner's: it may only once hold was
// lost (WithOwner), and its handles are then another hold's.
func (w *worker) lapsed(p *proc, key, owner, how string, hold locker.Lock) {
	w.r.count("reenter.lapsed")
	if closed(hold.Lost()) {
		return
	}
	w.r.violate("key %q: %s's owner %q held it (its Lost open), and its %s of another handle through the same Locker took a new hold",
		key, p.name, owner, how)
}

// refused checks an owner's reentrant acquisition that failed: it may
// only once the owner's hold is gone (Lost closed: the acquisition is
// then a new one, which waits its turn) or the Locker closed.
func (w *worker) refused(p *proc, key, owner, how string, first locker.Lock, err error) {
	if closed(first.Lost()) || errors.Is(err, locker.ErrClosed) {
		w.r.count("reenter.handle.gone")
		return
	}
	w.r.violate("key %q: %s's owner %q held it (its Lost open), and its %s of another handle through the same Locker failed: %v",
		key, p.name, owner, how, err)
}

// stillHeld checks that releasing released of an owner's handles on a
// hold, fewer than all of them, left the hold held: a hold whose Lost
// closed for a release (and not for the Locker's Close) went before its
// last handle.
func (w *worker) stillHeld(b *belief, released, handles int) {
	if !closed(b.lock.Lost()) || !errors.Is(b.lock.Err(), locker.ErrReleased) {
		return
	}
	if _, ok := b.proc.closedBefore(time.Now()); ok {
		return
	}
	w.r.violate("key %q: %s's owner %q released %d of its %d handles on a hold, and the hold went (%v): it must stay until the last handle's release",
		b.key, b.proc.name, b.owner, released, handles, b.lock.Err())
}
