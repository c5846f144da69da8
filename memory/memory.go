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
// anyone else.
//
// # Shared holds and semaphores
//
// The store keeps one queue per key and admits by package backend's rule
// (backend.Admit), of which the mutex is the simplest case: the front of
// the queue holds the key, as many requests as fit, and each release,
// expiry or cancelled waiter grants the key to the waiters that then fit,
// in queue order. A reader queued behind a waiting writer waits for it,
// and a request for 2 permits blocks the requests for 1 behind it, so
// neither writers nor large requests starve. A request whose kind or limit
// disagrees with the key's holders or waiters fails at once with
// ErrKindMismatch and never joins the queue. Every grant takes the next
// fence of the store's counter, so fences are in grant order across kinds.
//
// # Crashed and paused clients
//
// A [Client] is a Locker of a Store that can be made to crash or pause, as
// a process holding locks can: [Client.Crash] (the process dies: nothing
// is released, its locks expire at their TTL and go to the next waiter)
// and [Client.Pause] (the process stops, say for a long garbage
// collection: its calls and its refreshes wait until [Client.Resume], and
// its locks expire meanwhile). Demonstrations and tests use them to show,
// with no server, what a crashed or paused holder does to the others, and
// what fencing tokens are for.
//
// # Fencing
//
// Fences come from one counter per Store, incremented on every
// acquisition, so they are strictly increasing per key (and across keys).
// They are safe only within the process: a restarted process starts again
// at 1.
package memory

import (
	"context"
	"fmt"
	"sync"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/internal/openhook"
)

func init() {
	locker.Register("memory", open)
}

var (
	storesMu sync.Mutex
	stores   = map[string]*Store{}
)

func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
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
	c := NewClient(&Options{Store: s, Config: u.Config})
	// conformance.URLHarness crashes the client as Client.Crash does:
	// there is no connection to cut.
	openhook.SetCrash(ctx, c.Crash)
	return c.Locker, nil
}

// Store is a set of locks shared by the Lockers opened on it.
type Store = memstore.Store

// NewStore returns an empty Store.
func NewStore() *Store { return memstore.NewStore() }

// Options configures New and NewClient. The zero value is usable.
type Options struct {
	// Store holds the locks. Default: the process-wide store of memory://.
	Store *Store
	// Config is passed to locker.New.
	Config locker.Config
}

// New returns a Locker over a Store.
func New(opts *Options) locker.Locker {
	return NewClient(opts).Locker
}

// Client is a Locker of a Store, one client as a process is for the
// networked backends, with what can happen to such a process: Crash and
// Pause. See the package documentation.
type Client struct {
	locker.Locker
	d *memstore.Driver
}

// NewClient returns a new client of opts.Store.
func NewClient(opts *Options) *Client {
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
	d := memstore.NewDriver(o.Store)
	return &Client{Locker: locker.New(d, &o.Config), d: d}
}

// Crash simulates the death of the client's process: from now on every
// call to the store fails (Close still closes the Locker), nothing is
// released or refreshed, and the client's locks stay in the store until
// their TTL runs out, when the next waiter gets them. The client's Lost
// channels close at their local deadlines, as nothing refreshes them.
func (c *Client) Crash() { c.d.Crash() }

// Pause simulates a process that stops for a while (a long garbage
// collection, a virtual machine's migration, SIGSTOP), as the store sees
// it: the client's calls, its watchdog's refreshes among them, wait until
// Resume or the end of their context, and its locks expire in the
// store at their TTL meanwhile. A grant that reaches a paused waiter is
// read on Resume. The client's own clock runs on, so Lost closes at the
// local deadline, which code that checks it before acting then sees; code
// that does not is what fencing tokens guard against.
func (c *Client) Pause() { c.d.Pause() }

// Resume ends a Pause.
func (c *Client) Resume() { c.d.Resume() }

// Close closes the Locker. A paused client is crashed first, as a process
// that never resumed: its locks are not released but expire at their TTL,
// and Close reports the releases it could not make.
func (c *Client) Close() error {
	if c.d.Paused() {
		c.d.Crash()
	}
	return c.Locker.Close()
}
