package postgres_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/postgres"
)

// TestConformance runs the suite over Lockers from Open (URLHarness puts
// a proxy of each client's own in front of the server through the dial
// hook, for its pool and its listening connection alike) and over Lockers
// from New on pools of the application's kind, each dialling through a
// proxy of its own, at once: the cases spend their time waiting for TTLs.
// Crash cuts a client's proxy, which drops every connection it has.
func TestConformance(t *testing.T) {
	raw := serverURL(t)
	harnesses := []struct {
		name string
		h    conformance.Harness
	}{
		{"Open", conformance.URLHarness(raw)},
		{"New", poolHarness(raw)},
		// The protocol a pooler in transaction mode needs (no prepared
		// statements): every parameter is sent as text, so no statement
		// may leave a parameter's type to be inferred from another use.
		{"simple-protocol", conformance.URLHarness(withParams(t, raw, "default_query_exec_mode", "simple_protocol"))},
	}
	var wg sync.WaitGroup
	for _, h := range harnesses {
		wg.Go(func() {
			t.Run(h.name, func(t *testing.T) { conformance.Run(t, h.h) })
		})
	}
	wg.Wait()
}

// poolHarness makes clients that are Lockers from New, each over a pool
// of its own whose connections go through a proxy of its own.
func poolHarness(raw string) conformance.Harness {
	return conformance.Harness{NewClient: func(ctx context.Context) (conformance.Client, error) {
		cfg, err := pgxpool.ParseConfig(raw)
		if err != nil {
			return conformance.Client{}, err
		}
		p, err := conformance.NewProxy(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
		if err != nil {
			return conformance.Client{}, err
		}
		cfg.ConnConfig.DialFunc = dialVia(p.Addr)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			p.Close()
			return conformance.Client{}, err
		}
		l, err := postgres.New(pool, nil)
		if err != nil {
			pool.Close()
			p.Close()
			return conformance.Client{}, err
		}
		// The Locker leaves the pool open: the client's Cleanup closes
		// it, after the Locker.
		return conformance.Client{Locker: l, Crash: p.Cut, Cleanup: func() {
			pool.Close()
			p.Close()
		}}, nil
	}}
}
