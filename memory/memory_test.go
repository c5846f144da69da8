package memory_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/memory"
)

// harness makes clients of one Store; Crash cuts a client off the store.
func harness() conformance.Harness {
	s := memory.NewStore()
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := memory.NewDriver(s)
			return conformance.Client{Locker: locker.New(d, nil), Crash: d.Cut}, nil
		},
		TTL: 100 * time.Millisecond,
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, harness())
}

func TestConformanceURL(t *testing.T) {
	// Through Open, as an application would; no crash support.
	conformance.Run(t, conformance.Harness{
		NewClient: func(ctx context.Context) (conformance.Client, error) {
			l, err := locker.Open(ctx, "memory://conformance-url")
			return conformance.Client{Locker: l}, err
		},
		TTL: 100 * time.Millisecond,
	})
}
