package locker

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/locker/backend"
)

// opSetValue is Lock.SetValue's operation, as OpError.Op names it.
const opSetValue = "set-value"

// WithValue stores value with the hold, for others to read: Inspect
// reports it (Hold.Value), and an Election's Leader and Observe report the
// leader's. The holder replaces it with Lock.SetValue. A value is small
// (an address, a host name, a JSON document): Capabilities.MaxValueLen
// says how small on each backend, and a longer one fails with
// ErrInvalidValue, before anything is sent. An empty value is none. The
// slice is copied.
//
// A value is what the holder says of itself. It is stored with the hold,
// so it goes when the hold goes, and it does not change who may hold the
// key.
func WithValue(value []byte) Option {
	v := cloneValue(value)
	return func(o *options) { o.value = v }
}

// cloneValue copies v, nil when empty.
func cloneValue(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return append([]byte(nil), v...)
}

// checkValue refuses a value the backend cannot store.
func (c *client) checkValue(v []byte) error {
	switch {
	case len(v) == 0:
		return nil
	case c.caps.MaxValueLen <= 0:
		return fmt.Errorf("%w: backend %s stores no values with its holds (WithValue, SetValue)", ErrUnsupported, c.backendName())
	case len(v) > c.caps.MaxValueLen:
		return fmt.Errorf("%w: value is %d bytes, longer than the %d bytes backend %s stores", ErrInvalidValue, len(v), c.caps.MaxValueLen, c.backendName())
	}
	return nil
}

func (lk *lock) SetValue(ctx context.Context, value []byte) error {
	return opErr(opSetValue, lk.key, lk.setValue(ctx, value))
}

func (lk *lock) setValue(ctx context.Context, value []byte) error {
	if ctx == nil {
		return errNilContext
	}
	if lk.c.isClosed() {
		return ErrClosed
	}
	if err := lk.c.checkValue(value); err != nil {
		return err
	}
	vs, ok := lk.held.(backend.ValueSetter)
	if !ok {
		return fmt.Errorf("%w: backend %s cannot replace a hold's value (%w)", ErrUnsupported, lk.c.backendName(), errors.ErrUnsupported)
	}
	lk.mu.Lock()
	if lk.state != stateHeld {
		err := lk.notHeldLocked()
		lk.mu.Unlock()
		return err
	}
	deadline := lk.deadline
	lk.mu.Unlock()
	// A value set after the validity ran out would speak for a lock this
	// process no longer believes it holds.
	vctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := vs.SetValue(vctx, cloneValue(value))
	if errors.Is(err, ErrNotHeld) {
		lk.markGone(endTakenOver, fmt.Errorf("setting its value found it gone: %w", err))
		lk.mu.Lock()
		defer lk.mu.Unlock()
		return lk.notHeldLocked()
	}
	return err
}
