package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The suite must be able to fail: each broken backend below makes a
// deliberate, well-known mistake, and a named case has to catch it. The
// backends share one store per harness; a client is a driver whose
// "connection" can be cut, as a crashed process's is.

// flaw is one deliberate mistake.
type flaw int

const (
	correct flaw = iota
	// releaseWithoutOwnerCheck deletes the key whoever holds it (DEL
	// instead of compare-and-delete).
	releaseWithoutOwnerCheck
	// noExpiry never expires a lock: a crashed holder blocks forever.
	noExpiry
	// setThenExpire takes the lock in two round trips (SETNX, then
	// EXPIRE): a crash between them leaves a lock that never expires.
	setThenExpire
	// fenceResets keeps the fence counter with the lock, so it starts
	// again at 1 once the key is free, like ZooKeeper sequence numbers
	// after the parent node is deleted.
	fenceResets
	// tryIgnoresHolder takes the key even when someone holds it.
	tryIgnoresHolder
)

type entry struct {
	token   string
	expires time.Time // zero: never
	fence   uint64
}

type store struct {
	flaw  flaw
	mu    sync.Mutex
	keys  map[string]*entry
	fence uint64
}

// liveLocked returns key's entry if it is held and not expired.
func (s *store) liveLocked(key string) *entry {
	e := s.keys[key]
	if e == nil {
		return nil
	}
	if !e.expires.IsZero() && !time.Now().Before(e.expires) {
		delete(s.keys, key)
		return nil
	}
	return e
}

type driver struct {
	s   *store
	cut atomic.Bool
}

var errCut = errors.New("connection cut")

// rtt stands in for a network round trip in the two-step acquire.
const rtt = 2 * time.Millisecond

func (d *driver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if d.cut.Load() {
		return backend.Acquisition{}, errCut
	}
	s := d.s
	s.mu.Lock()
	if e := s.liveLocked(req.Key); e != nil && s.flaw != tryIgnoresHolder {
		var left time.Duration
		if !e.expires.IsZero() {
			left = time.Until(e.expires)
		}
		s.mu.Unlock()
		return backend.Acquisition{}, &backend.Busy{Remaining: left}
	}
	e := &entry{token: req.Token}
	switch s.flaw {
	case fenceResets:
		if old := s.keys[req.Key]; old != nil {
			e.fence = old.fence
		}
		e.fence++
	default:
		s.fence++
		e.fence = s.fence
	}
	if s.flaw != noExpiry && s.flaw != setThenExpire {
		e.expires = time.Now().Add(req.TTL)
	}
	s.keys[req.Key] = e
	s.mu.Unlock()

	if s.flaw == setThenExpire {
		time.Sleep(rtt) // the EXPIRE is a second round trip
		if d.cut.Load() {
			return backend.Acquisition{}, errCut
		}
		s.mu.Lock()
		e.expires = time.Now().Add(req.TTL)
		s.mu.Unlock()
	}
	return backend.Acquisition{Held: &held{d: d, key: req.Key, token: req.Token}, Fence: e.fence, Fenced: true}, nil
}

func (d *driver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Fencing: true}
}

func (d *driver) Close() error { return nil }

type held struct {
	d     *driver
	key   string
	token string
}

func (h *held) owned() (*entry, error) {
	if h.d.cut.Load() {
		return nil, errCut
	}
	e := h.d.s.liveLocked(h.key)
	if e == nil || e.token != h.token {
		return nil, backend.ErrNotHeld
	}
	return e, nil
}

func (h *held) Refresh(ctx context.Context, ttl time.Duration) error {
	h.d.s.mu.Lock()
	defer h.d.s.mu.Unlock()
	e, err := h.owned()
	if err != nil {
		return err
	}
	if h.d.s.flaw != noExpiry {
		e.expires = time.Now().Add(ttl)
	}
	return nil
}

func (h *held) TTL(ctx context.Context) (time.Duration, error) {
	h.d.s.mu.Lock()
	defer h.d.s.mu.Unlock()
	e, err := h.owned()
	if err != nil {
		return 0, err
	}
	if e.expires.IsZero() {
		return time.Hour, nil
	}
	return time.Until(e.expires), nil
}

func (h *held) Release(ctx context.Context) error {
	s := h.d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flaw == releaseWithoutOwnerCheck {
		if h.d.cut.Load() {
			return errCut
		}
		if s.liveLocked(h.key) == nil {
			return backend.ErrNotHeld
		}
		delete(s.keys, h.key) // whoever holds it
		return nil
	}
	if _, err := h.owned(); err != nil {
		return err
	}
	delete(s.keys, h.key)
	return nil
}

func harness(f flaw) conformance.Harness {
	s := &store{flaw: f, keys: map[string]*entry{}}
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := &driver{s: s}
			return conformance.Client{Locker: locker.New(d, nil), Crash: func() { d.cut.Store(true) }}, nil
		},
		TTL: 100 * time.Millisecond,
	}
}

// TestCorrectBackendPasses shows the reference backend the flaws are made
// in is itself correct, so that each failure below is the flaw's doing. It
// also runs the root package's polling wait, since this backend neither
// waits natively nor notifies.
func TestCorrectBackendPasses(t *testing.T) {
	conformance.Run(t, harness(correct))
}

func TestBrokenBackendsFail(t *testing.T) {
	tests := []struct {
		name   string
		flaw   flaw
		caught []string // cases that must fail
	}{
		{"release without owner check", releaseWithoutOwnerCheck, []string{"stale-owner"}},
		{"no expiry", noExpiry, []string{"stale-owner", "crashed-holder-expiry", "crash-during-acquire", "lost-on-expiry"}},
		{"set then expire in two steps", setThenExpire, []string{"crash-during-acquire"}},
		{"fences reset when the key is free", fenceResets, []string{"fencing", "mutual-exclusion-stress"}},
		{"TryAcquire ignores the holder", tryIgnoresHolder, []string{"try-acquire-contended", "mutual-exclusion-stress"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := conformance.Check(context.Background(), harness(tt.flaw))
			if err == nil {
				t.Fatalf("Check passed a backend whose %s:\n%s", tt.name, rep)
			}
			var failed []string
			for _, r := range rep.Failed() {
				failed = append(failed, r.Name)
				t.Logf("caught by %s: %s", r.Name, r.Detail)
			}
			for _, name := range tt.caught {
				if !slices.Contains(failed, name) {
					t.Errorf("case %s did not catch a backend whose %s (failed: %v)", name, tt.name, failed)
				}
			}
		})
	}
}
