// Package openhook is how conformance.URLHarness reaches into the clients
// that locker.Open builds, so that it can cut one off as a crash would.
//
// The harness puts a Hook in the context it passes to locker.Open. A
// backend's URL opener that finds one either routes every connection of
// the new Locker through Hook's dial function (Dial), handing it the
// address it would have dialled, or, when it has no connection to cut
// (memory), gives the Hook the client's own crash (SetCrash). Either way
// the Hook records that the opener took it, and the harness knows the
// client can crash. An opener that ignores the Hook leaves the harness to
// put proxies in the URL instead.
//
// Routing by address rather than rewriting the URL keeps each server's
// own name for TLS verification, and reaches servers the client learns
// of from others (Redis Cluster redirects, the master a Sentinel names).
package openhook

import (
	"context"
	"net"
	"sync"
)

// DialFunc makes a TCP connection to addr (host:port), as
// net.Dialer.DialContext does.
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// Hook is what the harness hands one locker.Open call.
type Hook struct {
	dial DialFunc

	mu    sync.Mutex
	taken bool
	crash func()
}

type ctxKey struct{}

// New returns a Hook whose Dial is dial.
func New(dial DialFunc) *Hook { return &Hook{dial: dial} }

// NewContext returns ctx carrying h, for locker.Open.
func NewContext(ctx context.Context, h *Hook) context.Context {
	return context.WithValue(ctx, ctxKey{}, h)
}

func fromContext(ctx context.Context) *Hook {
	h, _ := ctx.Value(ctxKey{}).(*Hook)
	return h
}

// Dial returns the dial function of the Hook in ctx, marking the Hook
// taken, or nil when ctx has none: the opener then dials as usual. An
// opener that takes it must make every connection of the Locker through
// it, TLS included (the TLS handshake runs over the connection it
// returns, verifying the name in addr).
func Dial(ctx context.Context) DialFunc {
	h := fromContext(ctx)
	if h == nil {
		return nil
	}
	h.mu.Lock()
	h.taken = true
	h.mu.Unlock()
	return h.dial
}

// SetCrash gives the Hook in ctx, if any, the function that crashes the
// client being opened, for a backend whose clients have no connection to
// cut, and marks the Hook taken.
func SetCrash(ctx context.Context, crash func()) {
	h := fromContext(ctx)
	if h == nil {
		return
	}
	h.mu.Lock()
	h.taken, h.crash = true, crash
	h.mu.Unlock()
}

// Taken reports whether the opener took the Hook (Dial or SetCrash).
func (h *Hook) Taken() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.taken
}

// Crash returns what SetCrash gave, or nil.
func (h *Hook) Crash() func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.crash
}
