// Package memstore is the store of the memory backend: locks shared by
// the clients (Drivers) of one Store in one process, with the semantics of
// the networked backends (TTL expiry, fencing tokens, FIFO hand-off, shared
// holds and semaphores under backend.Admit), and
// clients that can be made to crash or pause as a process can. Package
// memory is its public face; package locker's own tests wrap its Driver.
package memstore

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
)

// Store is a set of locks shared by the Lockers opened on it.
type Store struct {
	mu    sync.Mutex
	keys  map[string]*entry
	fence uint64
	// observers are the Observe calls watching each key.
	observers map[string]map[chan struct{}]struct{}

	hooks atomic.Pointer[Hooks] // set only by tests
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{keys: map[string]*entry{}}
}

// entry is a key with holds or waiters.
type entry struct {
	key     string
	holds   list.List // of *hold, in grant order
	waiters list.List // of *waiter, FIFO
}

// hold is one grant of a key.
type hold struct {
	e       *entry
	owner   *Driver
	token   string
	claim   backend.Claim
	value   []byte
	fence   uint64
	expires time.Time
	timer   *time.Timer
	onLost  func(error)
	elem    *list.Element // in e.holds; nil once the hold ended
}

type waiter struct {
	d       *Driver
	req     backend.Request
	grant   chan backend.Acquisition // buffered 1
	granted bool                     // under Store.mu
}

// Driver is one client of a Store, as a process with its connection is
// for the networked backends.
type Driver struct {
	s       *Store
	crashed atomic.Bool
	closed  atomic.Bool
	down    chan struct{} // closed by Crash or Close
	once    sync.Once

	pauseMu sync.Mutex
	paused  chan struct{} // while paused; closed by Resume
}

var (
	_ backend.Driver      = (*Driver)(nil)
	_ backend.Waiter      = (*Driver)(nil)
	_ backend.Observer    = (*Driver)(nil)
	_ backend.ValueSetter = (*held)(nil)
)

// MaxValueLen is the longest value the store keeps with a hold.
const MaxValueLen = 64 << 10

// NewDriver returns a new client of s, for locker.New.
func NewDriver(s *Store) *Driver {
	return &Driver{s: s, down: make(chan struct{})}
}

// errCrashed is what a crashed client gets, as a network client gets a
// connection error.
var errCrashed = errors.New("memory: client crashed (simulated): it no longer reaches the store")

// Crash simulates the death of the client's process: every later call
// fails, nothing is released or refreshed, and its locks stay in the
// store until their TTL runs out.
func (d *Driver) Crash() {
	d.crashed.Store(true)
	d.once.Do(func() { close(d.down) })
}

// Pause simulates a process that stops for a while: from now on the
// client's calls wait until Resume (or their context ends, or the client
// crashes or closes), and a grant that reaches a paused waiter is read on
// Resume. Its locks expire in the store meanwhile, as nothing refreshes
// them. Pausing a paused client does nothing.
func (d *Driver) Pause() {
	d.pauseMu.Lock()
	if d.paused == nil {
		d.paused = make(chan struct{})
	}
	d.pauseMu.Unlock()
}

// Resume ends a Pause: the calls that waited go on.
func (d *Driver) Resume() {
	d.pauseMu.Lock()
	if d.paused != nil {
		close(d.paused)
		d.paused = nil
	}
	d.pauseMu.Unlock()
}

// Paused reports whether the client is paused.
func (d *Driver) Paused() bool {
	d.pauseMu.Lock()
	defer d.pauseMu.Unlock()
	return d.paused != nil
}

// enter waits while the client is paused, then reports whether it may
// reach the store.
func (d *Driver) enter(ctx context.Context) error {
	d.pauseMu.Lock()
	p := d.paused
	d.pauseMu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		case <-d.down:
		}
	}
	return d.check()
}

func (d *Driver) check() error {
	if d.crashed.Load() {
		return errCrashed
	}
	if d.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Capabilities implements backend.Driver.
func (d *Driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Name:          "memory",
		Fencing:       true,
		FIFO:          true,
		WakeOnRelease: true,
		LossSignal:    true,
		Shared:        true,
		Permits:       true,
		MaxKeyLen:     backend.DefaultMaxKeyLen,
		MaxValueLen:   MaxValueLen,
	}
}

// Close implements backend.Driver.
func (d *Driver) Close() error {
	d.closed.Store(true)
	d.once.Do(func() { close(d.down) })
	return nil
}

// TryAcquire implements backend.Driver.
func (d *Driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	acq, e, notify, err := d.admitLocked(req)
	if err == nil && e != nil {
		err = &backend.Busy{Remaining: e.soonestExpiryLocked(), InUse: e.permitsLocked(req)}
		s.deleteIfIdleLocked(e)
	}
	s.mu.Unlock()
	notify()
	return acq, err
}

// admitLocked expires what is due on req.Key and applies the admission
// rule (backend.Admit) to req placed at the end of the key's queue: it
// grants the key if req fits, and otherwise returns the key's entry. A
// request that disagrees with the key's holders or waiters gets a
// *backend.Mismatch. s.mu is held; notify is to be called once it is
// released.
func (d *Driver) admitLocked(req backend.Request) (acq backend.Acquisition, busy *entry, notify func(), err error) {
	s := d.s
	notify = s.expireDueLocked(req.Key)
	e := s.keys[req.Key]
	if e == nil {
		e = &entry{key: req.Key}
		s.keys[req.Key] = e
	}
	queue := e.claimsLocked()
	queue = append(queue, backend.ClaimOf(req))
	a, err := backend.Admit(queue, len(queue)-1)
	switch {
	case err != nil:
		s.deleteIfIdleLocked(e)
		return backend.Acquisition{}, nil, notify, err
	case !a.Admitted:
		return backend.Acquisition{}, e, notify, nil
	}
	return s.grantLocked(e, d, req), nil, notify, nil
}

// claimsLocked returns the claims of e's queue as backend.Admit sees it:
// its holds in grant order, then its live waiters in queue order (a
// crashed or closed client's waiter is skipped, as a hand-off skips it).
func (e *entry) claimsLocked() []backend.Claim {
	queue := make([]backend.Claim, 0, e.holds.Len()+e.waiters.Len()+1)
	for el := e.holds.Front(); el != nil; el = el.Next() {
		queue = append(queue, el.Value.(*hold).claim)
	}
	for el := e.waiters.Front(); el != nil; el = el.Next() {
		if w := el.Value.(*waiter); w.d.check() == nil {
			queue = append(queue, backend.ClaimOf(w.req))
		}
	}
	return queue
}

// permitsLocked is how many permits e's holds take, for req a semaphore's
// request; 0 for any other.
func (e *entry) permitsLocked(req backend.Request) int {
	if req.Kind != backend.Permit {
		return 0
	}
	var n int64
	for el := e.holds.Front(); el != nil; el = el.Next() {
		u, _ := el.Value.(*hold).claim.Units()
		n += u
	}
	return int(n)
}

// soonestExpiryLocked is how long until the first of e's holds expires.
func (e *entry) soonestExpiryLocked() time.Duration {
	var soonest time.Duration
	for el := e.holds.Front(); el != nil; el = el.Next() {
		if left := time.Until(el.Value.(*hold).expires); soonest == 0 || left < soonest {
			soonest = max(left, 1)
		}
	}
	return soonest
}

// Acquire implements backend.Waiter: waiters queue per key, and each
// release or expiry grants the key to the waiters at the front of the
// queue that then fit (backend.Admit), in queue order.
func (d *Driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := d.enter(ctx); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	acq, e, notify, err := d.admitLocked(req)
	if e == nil {
		s.mu.Unlock()
		notify()
		return acq, err
	}
	w := &waiter{d: d, req: req, grant: make(chan backend.Acquisition, 1)}
	elem := e.waiters.PushBack(w)
	s.mu.Unlock()
	notify()
	if h := s.hooks.Load(); h != nil && h.Queued != nil {
		h.Queued(req.Key)
	}

	var cause error
	select {
	case acq := <-w.grant:
		// A paused client reads the grant once it resumes.
		if err := d.enter(ctx); err != nil {
			return backend.Acquisition{}, d.decline(acq, err)
		}
		return acq, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-d.down:
		cause = d.check()
	}
	s.mu.Lock()
	if !w.granted {
		// Leaving the queue leaves nothing behind, and may let the
		// waiters behind us in: a writer that gives up unblocks the
		// readers queued after it.
		e.waiters.Remove(elem) // a no-op if a hand-off skipped us already
		s.handOffLocked(e)
		s.mu.Unlock()
		return backend.Acquisition{}, cause
	}
	s.mu.Unlock()
	return backend.Acquisition{}, d.decline(<-w.grant, cause)
}

// decline gives back a grant that came as the acquisition gave up with
// cause: it is handed on rather than left to expire, unless the client
// crashed (a crashed client cannot release; the lock expires).
func (d *Driver) decline(acq backend.Acquisition, cause error) error {
	if d.crashed.Load() {
		return cause
	}
	s := d.s
	s.mu.Lock()
	if h := acq.Held.(*held).h; h.ownedLocked() {
		s.dropLocked(h)
	}
	s.mu.Unlock()
	return cause
}

// expireDueLocked expires the holds of key whose TTL ran out and whose
// timer has not fired yet. The caller calls the returned func after
// unlocking.
func (s *Store) expireDueLocked(key string) (notify func()) {
	e := s.keys[key]
	if e == nil {
		return func() {}
	}
	var lost []*hold
	now := time.Now()
	for el := e.holds.Front(); el != nil; {
		h := el.Value.(*hold)
		el = el.Next()
		if !now.Before(h.expires) {
			lost = append(lost, h)
			s.removeLocked(h)
		}
	}
	if len(lost) == 0 {
		return func() {}
	}
	s.handOffLocked(e)
	return func() {
		for _, h := range lost {
			h.tellLost(errors.New("memory: lock expired"))
		}
	}
}

// grantLocked makes d a holder of e, with the next fence.
func (s *Store) grantLocked(e *entry, d *Driver, req backend.Request) backend.Acquisition {
	s.fence++
	h := &hold{e: e, owner: d, token: req.Token, claim: backend.ClaimOf(req), value: req.Value, onLost: req.OnLost, fence: s.fence}
	now := time.Now()
	h.expires = now.Add(req.TTL)
	h.elem = e.holds.PushBack(h)
	h.timer = time.AfterFunc(req.TTL, func() { s.expire(h) })
	s.changedLocked(e.key)
	return backend.Acquisition{
		Held:   &held{d: d, h: h},
		Fence:  s.fence,
		Fenced: true,
		Start:  now,
	}
}

// expire runs when a hold's TTL may have run out.
func (s *Store) expire(h *hold) {
	s.mu.Lock()
	if h.elem == nil {
		s.mu.Unlock()
		return
	}
	if left := time.Until(h.expires); left > 0 { // refreshed meanwhile
		h.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	s.dropLocked(h)
	s.mu.Unlock()
	h.tellLost(errors.New("memory: lock expired"))
}

// tellLost tells h's owner that h is gone, unless its client crashed.
func (h *hold) tellLost(err error) {
	if h.onLost != nil && !h.owner.crashed.Load() {
		h.onLost(err)
	}
}

// dropLocked ends h and grants its key to the waiters that then fit.
func (s *Store) dropLocked(h *hold) {
	s.removeLocked(h)
	s.handOffLocked(h.e)
}

// removeLocked takes h out of its entry's holds.
func (s *Store) removeLocked(h *hold) {
	if h.elem != nil {
		h.e.holds.Remove(h.elem)
		h.elem = nil
		h.timer.Stop()
		s.changedLocked(h.e.key)
	}
}

// changedLocked tells the observers of key that its holders changed.
func (s *Store) changedLocked(key string) {
	for ch := range s.observers[key] {
		select {
		case ch <- struct{}{}:
		default: // a notice is pending already
		}
	}
}

// Observe implements backend.Observer: every grant, release, expiry,
// release by force and value replaced on key sends a notice.
func (d *Driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := d.enter(ctx); err != nil {
		return nil, nil, err
	}
	s := d.s
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.observers == nil {
		s.observers = map[string]map[chan struct{}]struct{}{}
	}
	if s.observers[key] == nil {
		s.observers[key] = map[chan struct{}]struct{}{}
	}
	s.observers[key][ch] = struct{}{}
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.observers[key], ch)
			if len(s.observers[key]) == 0 {
				delete(s.observers, key)
			}
			s.mu.Unlock()
		})
	}, nil
}

// handOffLocked grants e to its waiters, from the front of the queue, for
// as long as the next one fits (backend.Admit): the hand-off is in queue
// order, and the first waiter that does not fit blocks the rest.
func (s *Store) handOffLocked(e *entry) {
	for front := e.waiters.Front(); front != nil; front = e.waiters.Front() {
		w := front.Value.(*waiter)
		if w.d.check() != nil {
			e.waiters.Remove(front)
			continue
		}
		queue := e.claimsLocked()
		if a, err := backend.Admit(queue, e.holds.Len()); err != nil || !a.Admitted {
			// Its claim agreed with those before it when it queued, and
			// only they can be before it: err is nil.
			break
		}
		e.waiters.Remove(front)
		w.granted = true
		w.grant <- s.grantLocked(e, w.d, w.req)
	}
	s.deleteIfIdleLocked(e)
}

func (s *Store) deleteIfIdleLocked(e *entry) {
	if e.holds.Len() == 0 && e.waiters.Len() == 0 && s.keys[e.key] == e {
		delete(s.keys, e.key)
	}
}

// held is a Driver's handle on one of its holds.
type held struct {
	d *Driver
	h *hold
}

// ownedLocked reports whether h is still held: not released, not expired.
func (h *hold) ownedLocked() bool {
	return h.elem != nil && time.Now().Before(h.expires)
}

func (hd *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := hd.d.enter(ctx); err != nil {
		return err
	}
	s := hd.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hd.h.ownedLocked() {
		return backend.ErrNotHeld
	}
	hd.h.expires = time.Now().Add(ttl)
	hd.h.timer.Reset(ttl)
	return nil
}

// SetValue implements backend.ValueSetter.
func (hd *held) SetValue(ctx context.Context, value []byte) error {
	if err := hd.d.enter(ctx); err != nil {
		return err
	}
	s := hd.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hd.h.ownedLocked() {
		return backend.ErrNotHeld
	}
	hd.h.value = value
	s.changedLocked(hd.h.e.key)
	return nil
}

func (hd *held) TTL(ctx context.Context) (time.Duration, error) {
	if err := hd.d.enter(ctx); err != nil {
		return 0, err
	}
	s := hd.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hd.h.ownedLocked() {
		return 0, backend.ErrNotHeld
	}
	return time.Until(hd.h.expires), nil
}

func (hd *held) Release(ctx context.Context) error {
	if err := hd.d.enter(ctx); err != nil {
		return err
	}
	s := hd.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !hd.h.ownedLocked() {
		return backend.ErrNotHeld
	}
	s.dropLocked(hd.h)
	return nil
}

// Hooks observe a Store from tests. Each runs on the goroutine of its
// event, which waits for it.
type Hooks struct {
	Queued func(key string) // a waiter joined key's queue, on its Acquire's goroutine
}

// SetHooks installs h on s for the rest of the test t, a testing.TB (only
// its Cleanup is used, so that this package need not import testing).
func SetHooks(t interface{ Cleanup(func()) }, s *Store, h Hooks) {
	p := &h
	s.hooks.Store(p)
	t.Cleanup(func() { s.hooks.CompareAndSwap(p, nil) })
}
