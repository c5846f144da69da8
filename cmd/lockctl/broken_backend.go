//go:build lockctl_broken

package main

// A deliberately broken backend, compiled in only with the build tag
// lockctl_broken, so that the end-to-end tests can show `lockctl check`
// failing, and exiting non-zero, on a backend that breaks the contract.
// broken://NAME is an in-process store like memory://NAME whose Release
// deletes the key whoever holds it (DEL instead of compare-and-delete): a
// stale holder's Release frees the next holder's lock.

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
)

func init() {
	locker.Register("broken", func(_ context.Context, u *locker.URL) (locker.Locker, error) {
		if err := u.CheckParams(); err != nil {
			return nil, err
		}
		brokenMu.Lock()
		s := brokenStores[u.Host]
		if s == nil {
			s = &brokenStore{keys: map[string]*brokenEntry{}}
			brokenStores[u.Host] = s
		}
		brokenMu.Unlock()
		return locker.New(&brokenDriver{s: s}, &u.Config), nil
	})
}

var (
	brokenMu     sync.Mutex
	brokenStores = map[string]*brokenStore{}
)

type brokenStore struct {
	mu    sync.Mutex
	keys  map[string]*brokenEntry
	fence uint64
}

type brokenEntry struct {
	token   string
	expires time.Time
}

type brokenDriver struct{ s *brokenStore }

func (d *brokenDriver) TryAcquire(_ context.Context, req backend.Request) (backend.Acquisition, error) {
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if e, ok := s.keys[req.Key]; ok && now.Before(e.expires) {
		return backend.Acquisition{}, &backend.Busy{Remaining: e.expires.Sub(now)}
	}
	s.keys[req.Key] = &brokenEntry{token: req.Token, expires: now.Add(req.TTL)}
	s.fence++
	return backend.Acquisition{Held: &brokenHeld{s: s, key: req.Key, token: req.Token}, Fence: s.fence, Fenced: true, TTL: req.TTL, Start: now}, nil
}

func (d *brokenDriver) Capabilities() backend.Capabilities {
	return backend.Capabilities{Name: "broken", Fencing: true, MaxKeyLen: 1024, MinTTL: time.Millisecond}
}

func (d *brokenDriver) Close() error { return nil }

type brokenHeld struct {
	s     *brokenStore
	key   string
	token string
}

func (h *brokenHeld) Refresh(_ context.Context, ttl time.Duration) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	e, ok := h.s.keys[h.key]
	if !ok || e.token != h.token || time.Now().After(e.expires) {
		return backend.ErrNotHeld
	}
	e.expires = time.Now().Add(ttl)
	return nil
}

func (h *brokenHeld) TTL(context.Context) (time.Duration, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	e, ok := h.s.keys[h.key]
	if !ok || e.token != h.token || time.Now().After(e.expires) {
		return 0, backend.ErrNotHeld
	}
	return time.Until(e.expires), nil
}

// Release is the flaw: it deletes the key without checking the token.
func (h *brokenHeld) Release(context.Context) error {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if _, ok := h.s.keys[h.key]; !ok {
		return backend.ErrNotHeld
	}
	delete(h.s.keys, h.key)
	return nil
}
