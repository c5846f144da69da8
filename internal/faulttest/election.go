package faulttest

import (
	"context"
	"errors"
	"fmt"
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
// resigns.
func (w *worker) campaign(ctx context.Context, p *proc, rq request) {
	key := rq.key
	if rq.claim.Kind == backend.Permit {
		key = w.r.keys[0]
	}
	claim := backend.Claim{Kind: backend.Exclusive}
	e := locker.NewElection(p.Locker, key, w.lockOptions(claim)...)
	actx, cancel := context.WithTimeout(ctx, w.waitFor())
	defer cancel()
	began := time.Now()
	lk, err := e.Campaign(actx, w.value(p))
	if err != nil {
		w.failed("campaign", p, key, began, err)
		return
	}
	w.r.count("campaign")
	b := w.r.oracle.record(&belief{proc: p, key: key, how: "campaign", claim: claim, lock: lk, election: e, began: began, start: time.Now(), handles: 1})
	w.hold(ctx, b)
	w.resign(b)
}

// value returns a leader's value, where the backend stores values.
func (w *worker) value(p *proc) []byte {
	if w.r.caps.MaxValueLen <= 0 {
		return nil
	}
	return fmt.Appendf(nil, "%s, value %d", p.name, w.rng.IntN(1000))
}

// proclaim replaces a leader's value, with a deadline that is now and
// then too short to learn the outcome.
func (w *worker) proclaim(ctx context.Context, b *belief) {
	value := w.value(b.proc)
	pctx, cancel := context.WithTimeout(ctx, w.callTimeout())
	defer cancel()
	err := b.election.Proclaim(pctx, value)
	b.note(w.r, "proclaim %q: %v", value, err)
	switch {
	case err == nil:
		w.r.count("proclaim.ok")
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
	err := b.election.Resign(ctx)
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
