package bench

import (
	"context"
	"errors"
	"time"
)

// A Design is one way to take a lock on one backend: the library, the
// raw server primitives, or a peer library. Scenarios measure designs
// side by side, taking turns.
type Design struct {
	Backend string // the Backend.Name it runs on
	Name    string // "locker", "raw", "redsync", ...
	Kind    string // KindLocker, KindRaw or KindPeer
	// Waits is true when Lock waits for a busy key (a lock library);
	// false when it tries once and returns ErrBusy (raw primitives),
	// which keeps the design out of the scenarios where keys contend.
	Waits bool
	// Open makes a new client, as a new process of the application
	// would: scenarios with several clients open one each.
	Open func(ctx context.Context) (Client, error)
}

// Client is one client of a design.
type Client interface {
	// Lock takes key with the given TTL and returns the function that
	// releases it. A design that does not wait returns ErrBusy when the
	// key is held.
	Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error)
	// Close releases the client's connections.
	Close() error
}

// Unlock releases a lock that Lock took.
type Unlock func(ctx context.Context) error

// ErrBusy is what a design that does not wait returns for a held key.
var ErrBusy = errors.New("the key is held")
