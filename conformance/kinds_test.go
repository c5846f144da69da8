package conformance_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/faulttest/flawed"
	"github.com/distlock/locker/internal/memstore"
)

// kindCases are the cases about shared holds and semaphores.
var kindCases = []string{
	"semaphore-limit", "readers-writers", "kinds-fifo", "kinds-fencing",
	"crashed-shared-holder", "cancelled-writer", "readers-after-writer", "writer-after-readers", "kind-mismatch",
}

// kindsHarness runs the cases about kinds on clients of one memory store,
// through flawed.New with the given flaws (none: the memory backend as
// it is), claiming the capabilities caps leaves on.
func kindsHarness(flaws flawed.Flaw, caps func(*backend.Capabilities)) conformance.Harness {
	s := memstore.NewStore()
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := memstore.NewDriver(s)
			var bd backend.Driver = flawed.New(d, flaws)
			if caps != nil {
				bd = claiming{bd.(*flawed.Driver), caps}
			}
			// A crashed client's failing refreshes are expected: no logs.
			cfg := &locker.Config{Logger: slog.New(slog.DiscardHandler)}
			return conformance.Client{Locker: locker.New(bd, cfg), Crash: d.Crash}, nil
		},
		TTL:    250 * time.Millisecond,
		Select: func(name string) bool { return slices.Contains(kindCases, name) },
	}
}

// claiming is a driver that claims other capabilities than its own.
type claiming struct {
	*flawed.Driver
	caps func(*backend.Capabilities)
}

func (c claiming) Capabilities() backend.Capabilities {
	caps := c.Driver.Capabilities()
	c.caps(&caps)
	return caps
}

// TestKindsCorrectPass: the memory backend, wrapped as the flawed ones
// below are but with no flaw, passes every case about kinds, none
// skipped; so each failure below is its flaw's doing.
func TestKindsCorrectPass(t *testing.T) {
	rep, err := conformance.Check(context.Background(), kindsHarness(0, nil))
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	for _, r := range rep.Results {
		if r.Status != conformance.Pass {
			t.Errorf("%s: %s %s", r.Name, r.Status, r.Detail)
		}
	}
	if len(rep.Results) != len(kindCases) {
		t.Errorf("ran %d cases, want %d", len(rep.Results), len(kindCases))
	}
}

func TestKindsBrokenFail(t *testing.T) {
	tests := []struct {
		name   string
		flaws  flawed.Flaw
		caught []string // cases that must fail
	}{
		{"a semaphore of n admits n + 1", flawed.ExtraPermit, []string{"semaphore-limit", "kinds-fifo"}},
		{"a read lock admits a writer beside its readers", flawed.WriterBesideReaders, []string{"readers-writers", "kinds-fifo", "cancelled-writer", "readers-after-writer", "writer-after-readers"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantCaught(t, kindsHarness(tt.flaws, nil), "a backend where "+tt.name, tt.caught)
		})
	}
}

// TestKindsSkipUnclaimed: the cases about kinds run where the backend
// claims what they need and are skipped, naming the capability, where it
// does not; a backend that claims one kind runs the cases that check it.
func TestKindsSkipUnclaimed(t *testing.T) {
	const shared, permits = "Capabilities().Shared is false", "Capabilities().Permits is false"
	tests := []struct {
		name string
		caps func(*backend.Capabilities)
		// skipped maps the cases that must be skipped to what the reason
		// names; the others must pass.
		skipped map[string][]string
	}{
		{"neither", func(c *backend.Capabilities) { c.Shared, c.Permits = false, false }, map[string][]string{
			"semaphore-limit": {permits}, "readers-writers": {shared}, "kinds-fifo": {shared, permits},
			"kinds-fencing": {shared, permits}, "crashed-shared-holder": {shared, permits},
			"cancelled-writer": {shared}, "readers-after-writer": {shared}, "writer-after-readers": {shared}, "kind-mismatch": {permits},
		}},
		{"shared only", func(c *backend.Capabilities) { c.Permits = false }, map[string][]string{
			"semaphore-limit": {permits}, "kind-mismatch": {permits},
		}},
		{"semaphores only", func(c *backend.Capabilities) { c.Shared = false }, map[string][]string{
			"readers-writers": {shared}, "cancelled-writer": {shared}, "readers-after-writer": {shared}, "writer-after-readers": {shared},
		}},
		{"no FIFO, no fencing", func(c *backend.Capabilities) { c.FIFO, c.Fencing = false, false }, map[string][]string{
			"kinds-fifo": {"Capabilities().FIFO is false"}, "kinds-fencing": {"Capabilities().Fencing is false"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := conformance.Check(context.Background(), kindsHarness(0, tt.caps))
			if err != nil {
				t.Fatalf("%v\n%s", err, rep)
			}
			for _, r := range rep.Results {
				want, skip := tt.skipped[r.Name]
				switch {
				case !skip && r.Status != conformance.Pass:
					t.Errorf("%s: %s %s, want it to pass", r.Name, r.Status, r.Detail)
				case skip && r.Status != conformance.Skip:
					t.Errorf("%s: %s %s, want it skipped", r.Name, r.Status, r.Detail)
				case skip:
					for _, w := range want {
						if !strings.Contains(r.Detail, w) {
							t.Errorf("%s skipped saying %q, which does not say %q", r.Name, r.Detail, w)
						}
					}
				}
			}
		})
	}
}
