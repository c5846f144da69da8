// Package flawed makes memory backends that admit shared holds and
// permits wrongly, on purpose: the self-tests of the conformance suite
// and of the fault test's oracle run them to show that the checks of
// those kinds can fail. A Driver wraps a memory store's driver and bends
// the requests it passes on; everything else (expiry, fencing, FIFO
// hand-off, inspection, crashing) is the memory backend's own, so each
// failure the checks report is the flaw's doing.
package flawed

import (
	"context"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
)

// Flaw is a set of deliberate mistakes in admission.
type Flaw uint8

const (
	// ExtraPermit admits one permit more than a semaphore's limit: a
	// semaphore of n lets n + 1 single permits be held at once.
	ExtraPermit Flaw = 1 << iota
	// WriterBesideReaders admits an exclusive request while only shared
	// holds hold its key, as a read lock that forgets its readers when a
	// writer comes: the writer gets in beside them.
	WriterBesideReaders
)

// Driver is a memory store's driver with flaws.
type Driver struct {
	*memstore.Driver
	flaws Flaw
}

var (
	_ backend.Driver    = (*Driver)(nil)
	_ backend.Waiter    = (*Driver)(nil)
	_ backend.Inspector = (*Driver)(nil)
)

// New returns d with flaws, for locker.New. Crash d itself to crash the
// client.
func New(d *memstore.Driver, flaws Flaw) *Driver {
	return &Driver{Driver: d, flaws: flaws}
}

// TryAcquire implements backend.Driver, with the flaws.
func (d *Driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	return d.Driver.TryAcquire(ctx, d.bend(ctx, req))
}

// Acquire implements backend.Waiter, with the flaws.
func (d *Driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	return d.Driver.Acquire(ctx, d.bend(ctx, req))
}

// bend returns req as the flaws make it: a semaphore's request with one
// permit more in its limit (every client of the key bends it alike, so
// they still agree), an exclusive request on a key that only shared
// holds hold turned into a shared one.
func (d *Driver) bend(ctx context.Context, req backend.Request) backend.Request {
	switch {
	case req.Kind == backend.Permit && d.flaws&ExtraPermit != 0:
		req.Limit++
	case req.Kind == backend.Exclusive && d.flaws&WriterBesideReaders != 0 && d.readersOnly(ctx, req.Key):
		req.Kind = backend.Shared
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
