// Package flawed makes memory backends, and Lockers, that break the
// locker contract on purpose: the self-tests of the conformance suite and
// of the fault test's oracle run them to show that their checks can
// fail. A Driver wraps a memory store's driver and bends the requests it
// passes on, the holds it hands back, or what it reports, as its Flaws
// say; everything else (expiry, fencing, FIFO hand-off, inspection,
// crashing) is the memory backend's own, so each failure the checks
// report is the flaw's doing. Reentrant owners live in package locker,
// above every driver: the Locker wrappers of owners.go break them.
package flawed

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
)

// Flaw is a set of deliberate mistakes.
type Flaw uint8

const (
	// ExtraPermit admits one permit more than a semaphore's limit: a
	// semaphore of n lets n + 1 single permits be held at once.
	ExtraPermit Flaw = 1 << iota
	// WriterBesideReaders admits an exclusive request while only shared
	// holds hold its key, as a read lock that forgets its readers when a
	// writer comes: the writer gets in beside them.
	WriterBesideReaders
	// TwoExclusive admits an exclusive request beside one exclusive
	// holder, as a compare-and-set that races would: a mutex, or an
	// election's name, has up to two holders at once. Inspect reports
	// both as exclusive holds.
	TwoExclusive
	// BlindSetValue writes a value that a hold no longer held is given to
	// the hold that holds its key now, as a value kept beside the lock and
	// written without comparing the token, and reports success. Its
	// holders are not told that their hold was released by force (as a
	// Redis holder learns it at its next refresh), so that such a stale
	// holder's SetValue reaches the store.
	BlindSetValue
	// LostSetValue acknowledges SetValue without storing the value, as a
	// write lost after its reply: Inspect goes on reporting the old one.
	LostSetValue
	// DeafToValues makes Observe tell of holders that come and go, never
	// of a value replaced, as a watch on the holders' names that misses
	// their data.
	DeafToValues
	// NeverExpires keeps a hold for an hour from its grant or refresh,
	// whatever TTL it was given: a holder that crashes blocks its key for
	// an hour.
	NeverExpires
	// PreviousFence makes Inspect report as each hold's fence the one
	// minted before it, as an Inspect that reads a fence counter before
	// the holder's own increment would: a leader's term as an earlier
	// leader's.
	PreviousFence
)

// valueFlaws are the flaws for which a Driver hands out holds of its own.
const valueFlaws = BlindSetValue | LostSetValue | NeverExpires

// longTTL is the TTL of a hold that never expires (NeverExpires).
const longTTL = time.Hour

// Driver is a memory store's driver with flaws.
type Driver struct {
	*memstore.Driver
	flaws Flaw
}

var (
	_ backend.Driver    = (*Driver)(nil)
	_ backend.Waiter    = (*Driver)(nil)
	_ backend.Inspector = (*Driver)(nil)
	_ backend.Observer  = (*Driver)(nil)
)

// New returns d with flaws, for locker.New. Crash d itself to crash the
// client.
func New(d *memstore.Driver, flaws Flaw) *Driver {
	return &Driver{Driver: d, flaws: flaws}
}

// TryAcquire implements backend.Driver, with the flaws.
func (d *Driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	req = d.bend(ctx, req)
	acq, err := d.Driver.TryAcquire(ctx, req)
	return d.wrap(acq, req, err)
}

// Acquire implements backend.Waiter, with the flaws.
func (d *Driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	req = d.bend(ctx, req)
	acq, err := d.Driver.Acquire(ctx, req)
	return d.wrap(acq, req, err)
}

// bend returns req as the flaws make it: a semaphore's request with one
// permit more in its limit (every client of the key bends it alike, so
// they still agree), an exclusive request on a key that only shared
// holds hold turned into a shared one, an exclusive request turned into
// one of two permits, a hold kept for an hour, a holder that is not told
// of its loss.
func (d *Driver) bend(ctx context.Context, req backend.Request) backend.Request {
	switch {
	case req.Kind == backend.Permit && d.flaws&ExtraPermit != 0:
		req.Limit++
	case req.Kind == backend.Exclusive && d.flaws&WriterBesideReaders != 0 && d.readersOnly(ctx, req.Key):
		req.Kind = backend.Shared
	case req.Kind == backend.Exclusive && d.flaws&TwoExclusive != 0:
		req.Kind, req.Limit, req.Weight = backend.Permit, 2, 1
	}
	if d.flaws&NeverExpires != 0 {
		req.TTL = longTTL
	}
	if d.flaws&BlindSetValue != 0 {
		req.OnLost = nil
	}
	return req
}

// readersOnly reports whether key is held, by shared holds only.
func (d *Driver) readersOnly(ctx context.Context, key string) bool {
	h, err := d.Driver.Inspect(ctx, key)
	if err != nil || len(h.Holds) == 0 {
		return false
	}
	for _, hd := range h.Holds {
		if hd.Kind != backend.Shared {
			return false
		}
	}
	return true
}

// Inspect implements backend.Inspector: what the store reports, with
// the exclusive requests that TwoExclusive bent into permits reported as
// the exclusive holds and waiters they stand for, and with
// PreviousFence, the fences one less.
func (d *Driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	h, err := d.Driver.Inspect(ctx, key)
	if err != nil {
		return h, err
	}
	for _, hs := range [][]backend.Hold{h.Holds, h.Queue} {
		for i := range hs {
			if d.flaws&TwoExclusive != 0 && hs[i].Kind == backend.Permit && hs[i].Limit == 2 && hs[i].Weight == 1 {
				hs[i].Kind, hs[i].Limit, hs[i].Weight = backend.Exclusive, 0, 0
			}
			if d.flaws&PreviousFence != 0 && hs[i].Fenced {
				hs[i].Fence--
			}
		}
	}
	if d.flaws&PreviousFence != 0 && h.Fenced {
		h.Fence--
	}
	return h, nil
}

// Observe implements backend.Observer: the store's notices, but with
// DeafToValues only those after which the key's holders differ.
func (d *Driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	events, stop, err := d.Driver.Observe(ctx, key)
	if err != nil || d.flaws&DeafToValues == 0 {
		return events, stop, err
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	holders := d.holders(ctx, key)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-events:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
			if now := d.holders(ctx, key); now != holders {
				holders = now
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	})
	var once sync.Once
	return out, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			stop()
		})
	}, nil
}

// holders names key's holders, by their tokens.
func (d *Driver) holders(ctx context.Context, key string) string {
	h, err := d.Driver.Inspect(ctx, key)
	if err != nil {
		return "unknown: " + err.Error()
	}
	var s string
	for _, hd := range h.Holds {
		s += hd.Token + " "
	}
	return s
}

// wrap hands out acq's hold as one of the driver's own where the flaws
// bend what holds do.
func (d *Driver) wrap(acq backend.Acquisition, req backend.Request, err error) (backend.Acquisition, error) {
	if err != nil || d.flaws&valueFlaws == 0 {
		return acq, err
	}
	h := &held{Held: acq.Held, d: d, key: req.Key, token: req.Token}
	if d.flaws&BlindSetValue != 0 {
		granted.Store(req.Token, h)
	}
	acq.Held = h
	return acq, nil
}

// granted holds, by token, the holds of BlindSetValue drivers that were
// not released, for a stale holder's SetValue to write to whichever of
// them holds its key now. The tokens of holds that expire stay: the
// self-tests that use it are short.
var granted sync.Map

// held is a hold handed out by a Driver with valueFlaws.
type held struct {
	backend.Held // the store's
	d            *Driver
	key, token   string
}

// Refresh implements backend.Held; with NeverExpires, the hold is kept
// for an hour.
func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if h.d.flaws&NeverExpires != 0 {
		ttl = longTTL
	}
	return h.Held.Refresh(ctx, ttl)
}

// Release implements backend.Held.
func (h *held) Release(ctx context.Context) error {
	err := h.Held.Release(ctx)
	if err == nil || errors.Is(err, backend.ErrNotHeld) {
		granted.Delete(h.token)
	}
	return err
}

// SetValue implements backend.ValueSetter, with the flaws.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	vs := h.Held.(backend.ValueSetter)
	switch {
	case h.d.flaws&LostSetValue != 0:
		_, err := h.Held.TTL(ctx) // the ownership check, and nothing stored
		return err
	case h.d.flaws&BlindSetValue != 0:
		err := vs.SetValue(ctx, value)
		if !errors.Is(err, backend.ErrNotHeld) {
			return err
		}
		hd, err := h.d.Driver.Inspect(ctx, h.key)
		if err != nil || len(hd.Holds) == 0 {
			return err // nobody to write to: the value is dropped
		}
		if now, ok := granted.Load(hd.Holds[0].Token); ok {
			return now.(*held).Held.(backend.ValueSetter).SetValue(ctx, value)
		}
		return nil
	}
	return vs.SetValue(ctx, value)
}
