package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/testenv"
)

// A lock the Locker finds lost while its node may still be on the server
// (the node belongs to another session, the session may live on, a move
// between sessions ended in doubt) is deleted by the Locker, which frees
// the key. Lost must close first: a waiter granted the key before it would
// hold it while the old holder, told nothing yet, still believed it did.
// Each case holds the goroutine that found the loss right after it queued
// the delete, until a waiter of another Locker has been granted the key,
// and looks at the old holder's Lost at that moment. Before Lost closed
// first, it was still open in every case.

const lossTTL = 10 * time.Second

// lossLocker opens a Locker over a driver of its own on servers, under
// base.
func lossLocker(t *testing.T, servers []string, base string) (locker.Locker, *driver) {
	t.Helper()
	d := newDriver(slog.New(slog.NewTextHandler(io.Discard, nil)))
	d.servers, d.base, d.acl = servers, base, gozk.WorldACL(gozk.PermAll)
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	rng, err := probeRange(ctx, servers)
	require.NoError(t, err)
	d.caps = capabilities(rng, true)
	l := locker.New(d, nil)
	t.Cleanup(func() { l.Close() })
	return l, d
}

// lossCase is a key held by one Locker, with a waiter of another queued
// behind it.
type lossCase struct {
	d   *driver // the holder's
	lk  locker.Lock
	h   *held
	raw *gozk.Conn

	queued  chan struct{} // closed when the waiter watches the holder's node
	deleted chan struct{} // closed when the delete of the holder's node was queued
	waited  chan bool     // whether the goroutine that queued it saw the waiter granted before it went on
	granted chan struct{} // closed when the waiter's Acquire returned
	lost    bool          // whether the holder's Lost was closed then
	err     error         // the waiter's Acquire

	decide, gaveUp, moved atomic.Pointer[func()] // the hooks of the same names, if set
}

// heldOf returns the one lock d holds.
func heldOf(t *testing.T, d *driver) *held {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		s.mu.Lock()
		for h := range s.helds {
			s.mu.Unlock()
			return h
		}
		s.mu.Unlock()
	}
	t.Fatal("the holder's driver holds no lock")
	return nil
}

// newLossCase takes "k" in a Locker and queues a waiter of another behind
// it, under a base node of its own.
func newLossCase(t *testing.T) *lossCase {
	servers := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperURL))
	var b [6]byte
	rand.Read(b[:])
	base := "/loss-" + hex.EncodeToString(b[:])
	holder, d := lossLocker(t, servers, base)
	waiter, _ := lossLocker(t, servers, base)
	raw, _, err := gozk.Connect(servers, lossTTL, gozk.WithLogInfo(false), gozk.WithLogger(quietLog{}))
	require.NoError(t, err)
	t.Cleanup(raw.Close)
	c := &lossCase{
		d: d, raw: raw, queued: make(chan struct{}), deleted: make(chan struct{}),
		waited: make(chan bool, 1), granted: make(chan struct{}),
	}
	ctx := context.Background()
	c.lk, err = holder.Acquire(ctx, "k", locker.WithTTL(lossTTL), locker.WithAutoRefresh(false))
	require.NoError(t, err)
	t.Cleanup(func() { c.lk.Release(context.Background()) })
	c.h = heldOf(t, d)

	var queuedOnce, deletedOnce sync.Once
	call := func(p *atomic.Pointer[func()]) {
		if f := p.Load(); f != nil {
			(*f)()
		}
	}
	testHooks.Store(&hooks{
		watching: func(_, pred string) {
			if pred == c.h.path {
				queuedOnce.Do(func() { close(c.queued) })
			}
		},
		deleting: func(path string) {
			if path != c.h.path {
				return
			}
			deletedOnce.Do(func() {
				close(c.deleted)
				// What follows the delete on this goroutine waits until
				// the delete has let the waiter in (a bound, so that a
				// broken delete fails the test rather than hangs it).
				select {
				case <-c.granted:
					c.waited <- true
				case <-time.After(30 * time.Second):
					c.waited <- false
				}
			})
		},
		decide: func() { call(&c.decide) },
		gaveUp: func() { call(&c.gaveUp) },
		moved:  func(string) { call(&c.moved) },
	})
	t.Cleanup(func() { testHooks.Store(nil) })

	go func() {
		lk, err := waiter.Acquire(ctx, "k", locker.WithTTL(lossTTL))
		c.lost = testenv.Closed(c.lk.Lost())
		c.err = err
		close(c.granted)
		if err == nil {
			lk.Release(context.Background())
		}
	}()
	select {
	case <-c.queued:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not queue behind the holder within 30s")
	}
	return c
}

// check waits for the delete of the holder's node and the waiter's grant,
// and checks that the holder's Lost was closed by then.
func (c *lossCase) check(t *testing.T) {
	t.Helper()
	select {
	case <-c.deleted:
	case <-time.After(30 * time.Second):
		t.Fatal("the Locker did not delete the lost lock's node within 30s")
	}
	if !<-c.waited {
		t.Fatal("the waiter was not granted the key within 30s of the delete")
	}
	require.NoError(t, c.err, "the waiter's Acquire")
	if !c.lost {
		t.Error("a waiter was granted the key while the old holder's Lost was still open: the Locker deleted the lost lock's node before it told the holder")
	}
	<-c.lk.Lost()
}

// set makes f the hook p, for the rest of the case.
func set(p *atomic.Pointer[func()], f func()) { p.Store(&f) }

func TestLostTellsBeforeDelete(t *testing.T) {
	ctx := context.Background()
	const otherTTL = 2 * lossTTL
	for _, tc := range []struct {
		name string
		// lose makes the holder's lock lost such that the Locker deletes
		// its node, on a goroutine of its own (the delete holds it up),
		// and returns what the call that found the loss returned.
		lose func(c *lossCase) error
	}{
		// The node, under our name, belongs to another session: a move
		// between sessions that was interrupted leaves it so, as does
		// someone who made it again from a session of theirs (announced
		// by a change of data, as a move is, so that the waiter behind
		// stays in the queue). TTL reads the node and finds it.
		{"node of another session", func(c *lossCase) error {
			_, err := c.raw.Multi(
				&gozk.SetDataRequest{Path: c.h.path, Data: nodeData, Version: -1},
				&gozk.DeleteRequest{Path: c.h.path, Version: -1},
				&gozk.CreateRequest{Path: c.h.path, Data: nodeData, Acl: gozk.WorldACL(gozk.PermAll), Flags: gozk.FlagEphemeral},
			)
			if err != nil {
				return err
			}
			_, err = c.lk.TTL(ctx)
			return err
		}},
		// The session's epoch ends without the server saying the session
		// expired (the connection stayed down for a session timeout): the
		// session may live on, with our node. As the session's timer
		// would, after the epoch ended.
		{"session presumed expired", func(c *lossCase) error {
			c.h.mu.Lock()
			s := c.h.s
			c.h.mu.Unlock()
			cause := errDisconnected(s.timeout)
			s.mu.Lock()
			ended := s.endEpochLocked(cause)
			s.mu.Unlock()
			for _, h := range ended {
				h.sessionEnded(cause)
			}
			return backend.ErrNotHeld
		}},
		// A Refresh to another TTL moves the node to that TTL's session;
		// the move is applied but the caller stops waiting for its reply,
		// so either session may own the node, and the lock is given up.
		{"move interrupted", func(c *lossCase) error {
			mctx, cancel := context.WithCancel(ctx)
			defer cancel()
			gaveUp := make(chan struct{})
			var once sync.Once
			set(&c.gaveUp, func() { once.Do(func() { close(gaveUp) }) })
			var decided atomic.Bool
			set(&c.decide, func() {
				if decided.CompareAndSwap(false, true) {
					cancel()
					<-gaveUp
				}
			})
			return c.lk.Refresh(mctx, otherTTL)
		}},
		// The move is applied, but the epoch of the session it moved the
		// node to ends before the lock is handed over.
		{"session of the move ended", func(c *lossCase) error {
			set(&c.moved, func() {
				c.d.mu.Lock()
				s2 := c.d.sessions[otherTTL]
				c.d.mu.Unlock()
				s2.mu.Lock()
				ended := s2.endEpochLocked(errDisconnected(s2.timeout))
				s2.mu.Unlock()
				if len(ended) > 0 {
					t.Errorf("the move's session had locks: %d", len(ended))
				}
			})
			return c.lk.Refresh(ctx, otherTTL)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLossCase(t)
			errc := make(chan error, 1)
			go func() { errc <- tc.lose(c) }()
			c.check(t)
			if err := <-errc; !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("the call that found the lock lost = %v, want ErrNotHeld", err)
			}
			// The holder's driver keeps nothing of the lost lock.
			c.d.mu.Lock()
			defer c.d.mu.Unlock()
			for ttl, s := range c.d.sessions {
				s.mu.Lock()
				n := len(s.helds)
				s.mu.Unlock()
				if n != 0 {
					t.Errorf("the session of TTL %v still has %d locks", ttl, n)
				}
			}
		})
	}
}
