// Package memory is the in-process lock backend: locks shared by the
// goroutines of one process, with the same semantics as the networked
// backends (TTL expiry, fencing tokens, FIFO hand-off to waiters). It is the
// embedded default, the backend of the examples, and a quick way to run
// code written against locker.Locker without any server.
//
// # URLs
//
//	memory://          the process-wide default store
//	memory://name      a named store; every Locker opened with the same
//	                   name shares its locks
//
// plus the shared parameters ttl and prefix.
//
// # Losing a lock
//
// The store expires a lock at its TTL, counted from the moment it granted
// or refreshed it, on the same monotonic clock as the lock's validity in
// package locker, which starts before the request and ends the drift
// allowance earlier; so Lost closes before the store can grant the key to
// anyone else. A Driver cut off with Cut behaves as a crashed client: its
// refreshes fail, its locks expire at their TTL, and Lost closes at the
// local deadline.
//
// # Fencing
//
// Fences come from one counter per Store, incremented on every
// acquisition, so they are strictly increasing per key (and across keys).
// They are safe only within the process: a restarted process starts again
// at 1.
package memory

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
)

func init() {
	locker.Register("memory", open)
}

var (
	storesMu sync.Mutex
	stores   = map[string]*Store{}
)

func open(_ context.Context, u *locker.URL) (locker.Locker, error) {
	if err := u.CheckParams(); err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("memory: unexpected path %q: use memory://name to name a store", u.Path)
	}
	storesMu.Lock()
	s := stores[u.Host]
	if s == nil {
		s = NewStore()
		stores[u.Host] = s
	}
	storesMu.Unlock()
	return New(&Options{Store: s, Config: u.Config}), nil
}

// Options configures New. The zero value is usable.
type Options struct {
	// Store holds the locks. Default: the process-wide store of memory://.
	Store *Store
	// Config is passed to locker.New.
	Config locker.Config
}

// New returns a Locker over a Store.
func New(opts *Options) locker.Locker {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Store == nil {
		storesMu.Lock()
		o.Store = stores[""]
		if o.Store == nil {
			o.Store = NewStore()
			stores[""] = o.Store
		}
		storesMu.Unlock()
	}
	return locker.New(NewDriver(o.Store), &o.Config)
}

// Store is a set of locks shared by the Lockers opened on it.
type Store struct {
	mu    sync.Mutex
	keys  map[string]*entry
	fence uint64

	queued func(key string) // test hook: a waiter joined key's queue
}

// NewStore returns an empty Store.
func NewStore() *Store {
	return &Store{keys: map[string]*entry{}}
}

type entry struct {
	key     string
	owner   *Driver
	token   string
	expires time.Time
	timer   *time.Timer
	onLost  func(error)
	waiters list.List // of *waiter, FIFO
}

type waiter struct {
	d       *Driver
	req     backend.Request
	grant   chan backend.Acquisition // buffered 1
	granted bool                     // under Store.mu
}

// Driver is one client of a Store, as a network connection is for the
// other backends. Most programs never see it; New wraps one in a Locker.
type Driver struct {
	s      *Store
	cut    atomic.Bool
	closed atomic.Bool
	down   chan struct{} // closed by Cut or Close
	once   sync.Once
}

var (
	_ backend.Driver = (*Driver)(nil)
	_ backend.Waiter = (*Driver)(nil)
)

// NewDriver returns a new client of s, for locker.New.
func NewDriver(s *Store) *Driver {
	return &Driver{s: s, down: make(chan struct{})}
}

// errCut is what a cut-off client gets, as a network client gets a
// connection error.
var errCut = errors.New("memory: client cut off from the store")

// Cut cuts this client off the store, as if its process had crashed or
// been partitioned away: every later call fails, nothing is released, and
// its locks expire at their TTL. Fault tests use it.
func (d *Driver) Cut() {
	d.cut.Store(true)
	d.once.Do(func() { close(d.down) })
}

func (d *Driver) check() error {
	if d.cut.Load() {
		return errCut
	}
	if d.closed.Load() {
		return backend.ErrClosed
	}
	return nil
}

// Capabilities implements backend.Driver.
func (d *Driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Fencing:       true,
		FIFO:          true,
		WakeOnRelease: true,
		LossSignal:    true,
		MaxKeyLen:     backend.DefaultMaxKeyLen,
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
	if err := d.check(); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(req.Key)
	e := s.keys[req.Key]
	var (
		acq backend.Acquisition
		err error
	)
	if e != nil && e.owner != nil {
		err = &backend.Busy{Remaining: time.Until(e.expires)}
	} else {
		acq = s.grantLocked(req.Key, d, req)
	}
	s.mu.Unlock()
	notify()
	return acq, err
}

// Acquire implements backend.Waiter: waiters queue per key and each
// release or expiry hands the key to the first of them directly.
func (d *Driver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if err := d.check(); err != nil {
		return backend.Acquisition{}, err
	}
	s := d.s
	s.mu.Lock()
	notify := s.expireDueLocked(req.Key)
	e := s.keys[req.Key]
	if e == nil || e.owner == nil {
		acq := s.grantLocked(req.Key, d, req)
		s.mu.Unlock()
		notify()
		return acq, nil
	}
	w := &waiter{d: d, req: req, grant: make(chan backend.Acquisition, 1)}
	elem := e.waiters.PushBack(w)
	hook := s.queued
	s.mu.Unlock()
	notify()
	if hook != nil {
		hook(req.Key)
	}

	var cause error
	select {
	case acq := <-w.grant:
		return acq, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-d.down:
		cause = d.check()
	}
	s.mu.Lock()
	if !w.granted {
		// Leaving the queue leaves nothing behind.
		e.waiters.Remove(elem) // a no-op if a hand-off skipped us already
		s.deleteIfIdleLocked(e)
		s.mu.Unlock()
		return backend.Acquisition{}, cause
	}
	s.mu.Unlock()
	acq := <-w.grant
	if d.cut.Load() {
		return backend.Acquisition{}, cause // a crashed client cannot release; the lock expires
	}
	// Granted as we gave up: hand it on rather than leave it to expire.
	s.mu.Lock()
	h := acq.Held.(*held)
	if h.ownedLocked() {
		s.handOffLocked(h.e)
	}
	s.mu.Unlock()
	return backend.Acquisition{}, cause
}

// expireDueLocked expires key if its TTL ran out and its timer has not
// fired yet. The caller calls the returned func after unlocking.
func (s *Store) expireDueLocked(key string) (notify func()) {
	e := s.keys[key]
	if e == nil || e.owner == nil || time.Now().Before(e.expires) {
		return func() {}
	}
	return s.expireLocked(e)
}

// grantLocked makes d the owner of key.
func (s *Store) grantLocked(key string, d *Driver, req backend.Request) backend.Acquisition {
	e := s.keys[key]
	if e == nil {
		e = &entry{key: key}
		s.keys[key] = e
	}
	s.fence++
	e.owner, e.token, e.onLost = d, req.Token, req.OnLost
	now := time.Now()
	e.expires = now.Add(req.TTL)
	if e.timer == nil {
		e.timer = time.AfterFunc(req.TTL, func() { s.expire(e) })
	} else {
		e.timer.Reset(req.TTL)
	}
	return backend.Acquisition{
		Held:   &held{d: d, e: e, token: req.Token},
		Fence:  s.fence,
		Fenced: true,
		Start:  now,
	}
}

// expire runs when an entry's TTL may have run out.
func (s *Store) expire(e *entry) {
	s.mu.Lock()
	if e.owner == nil {
		s.mu.Unlock()
		return
	}
	if left := time.Until(e.expires); left > 0 { // refreshed meanwhile
		e.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	notify := s.expireLocked(e)
	s.mu.Unlock()
	notify()
}

// expireLocked frees an expired entry; the returned func tells its owner,
// and is called after unlocking.
func (s *Store) expireLocked(e *entry) (notify func()) {
	onLost, owner := e.onLost, e.owner
	s.handOffLocked(e)
	return func() {
		if onLost != nil && !owner.cut.Load() {
			onLost(errors.New("memory: lock expired"))
		}
	}
}

// handOffLocked frees e and gives it to the first waiter still waiting.
func (s *Store) handOffLocked(e *entry) {
	e.owner, e.token, e.onLost = nil, "", nil
	for front := e.waiters.Front(); front != nil; front = e.waiters.Front() {
		w := e.waiters.Remove(front).(*waiter)
		if w.d.check() != nil {
			continue
		}
		w.granted = true
		w.grant <- s.grantLocked(e.key, w.d, w.req)
		return
	}
	s.deleteIfIdleLocked(e)
}

func (s *Store) deleteIfIdleLocked(e *entry) {
	if e.owner == nil && e.waiters.Len() == 0 {
		if e.timer != nil {
			e.timer.Stop()
		}
		if s.keys[e.key] == e {
			delete(s.keys, e.key)
		}
	}
}

type held struct {
	d     *Driver
	e     *entry
	token string
}

func (h *held) ownedLocked() bool {
	return h.e.owner != nil && h.e.token == h.token && time.Now().Before(h.e.expires)
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := h.d.check(); err != nil {
		return err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return backend.ErrNotHeld
	}
	h.e.expires = time.Now().Add(ttl)
	h.e.timer.Reset(ttl)
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	if err := h.d.check(); err != nil {
		return 0, err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return 0, backend.ErrNotHeld
	}
	return time.Until(h.e.expires), nil
}

func (h *held) Release(ctx context.Context) error {
	if err := h.d.check(); err != nil {
		return err
	}
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !h.ownedLocked() {
		return backend.ErrNotHeld
	}
	s.handOffLocked(h.e)
	return nil
}
