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
	// Shared: its clients are SharedClients, and the backend admits
	// shared holds, so the design runs in the read-write scenario.
	// Permits: its clients are PermitClients, and the backend admits
	// semaphores, so it runs in the semaphore scenario.
	Shared, Permits bool
	// KindsOnly: the design has no mutex of its own to measure (a
	// read/write lock recipe), and runs only in the scenarios of its
	// kinds.
	KindsOnly bool
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

// SharedClient is a Client that also takes shared holds: read locks,
// which coexist with each other and never with Lock's exclusive hold.
type SharedClient interface {
	Client
	LockShared(ctx context.Context, key string, ttl time.Duration) (Unlock, error)
}

// PermitClient is a Client that also takes a permit of a semaphore of
// limit permits on key, waiting for one.
type PermitClient interface {
	Client
	LockPermit(ctx context.Context, key string, limit int, ttl time.Duration) (Unlock, error)
}

// Unlock releases a lock that Lock took.
type Unlock func(ctx context.Context) error

// ErrBusy is what a design that does not wait returns for a held key.
var ErrBusy = errors.New("the key is held")
