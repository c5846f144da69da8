package conformance_test

import (
	"context"
	"log/slog"
	"maps"
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

// electionCases are the cases about values, reentrant owners and
// elections.
var electionCases = []string{
	"values", "reentrancy", "election-one-leader", "election-terms",
	"election-resign", "election-observe", "election-owner-waits",
	"election-owner-resign", "election-run", "election-crashed-leader",
}

// quiet is the configuration of the cases' Lockers: a crashed client's
// failing refreshes, and the values case's release by force, are
// expected, and logged by none.
var quiet = &locker.Config{Logger: slog.New(slog.DiscardHandler)}

// electionHarness runs the cases about elections on clients of one
// memory store, through flawed.New with the given flaws (none: the memory
// backend as it is); driver, if set, makes what each client's Locker
// wraps of the flawed driver, and wrap, if set, makes what wraps each
// client's Locker.
func electionHarness(t *testing.T, flaws flawed.Flaw, driver func(*flawed.Driver) backend.Driver, wrap lockerFlaw) conformance.Harness {
	s := memstore.NewStore()
	var wrapLocker func(locker.Locker) locker.Locker
	if wrap != nil {
		wrapLocker = wrap(t, s)
	}
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			d := memstore.NewDriver(s)
			var bd backend.Driver = flawed.New(d, flaws)
			if driver != nil {
				bd = driver(bd.(*flawed.Driver))
			}
			l := locker.New(bd, quiet)
			if wrapLocker != nil {
				l = wrapLocker(l)
			}
			return conformance.Client{Locker: l, Crash: d.Crash}, nil
		},
		TTL:    250 * time.Millisecond,
		Select: func(name string) bool { return slices.Contains(electionCases, name) },
	}
}

// TestElectionCasesCorrectPass: the memory backend, wrapped as the flawed
// ones below are but with no flaw, passes every case about values,
// owners and elections, none skipped; so each failure below is its
// flaw's doing.
func TestElectionCasesCorrectPass(t *testing.T) {
	rep, err := conformance.Check(context.Background(), electionHarness(t, 0, nil, nil))
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	for _, r := range rep.Results {
		if r.Status != conformance.Pass {
			t.Errorf("%s: %s %s", r.Name, r.Status, r.Detail)
		}
	}
	if len(rep.Results) != len(electionCases) {
		t.Errorf("ran %d cases, want %d", len(rep.Results), len(electionCases))
	}
}

// lockerFlaw makes, for the clients of a store s, what wraps each
// client's Locker.
type lockerFlaw func(t *testing.T, s *memstore.Store) func(locker.Locker) locker.Locker

// lockers returns the lockerFlaw that wraps every Locker with f.
func lockers(f func(locker.Locker) locker.Locker) lockerFlaw {
	return func(*testing.T, *memstore.Store) func(locker.Locker) locker.Locker { return f }
}

// ownersAcross sends the owners of every client to one Locker of the
// store (flawed.OwnersAcross).
func ownersAcross(t *testing.T, s *memstore.Store) func(locker.Locker) locker.Locker {
	shared := locker.New(memstore.NewDriver(s), quiet)
	t.Cleanup(func() { shared.Close() })
	return func(l locker.Locker) locker.Locker { return flawed.OwnersAcross(l, shared) }
}

func TestElectionCasesBrokenFail(t *testing.T) {
	tests := []struct {
		name  string
		flaws flawed.Flaw
		wrap  lockerFlaw
		// caught maps the cases that must fail to what their failure
		// must say.
		caught map[string]string
	}{
		{"SetValue writes to whoever holds the key", flawed.BlindSetValue, nil, map[string]string{
			"values": "want " + locker.ErrNotHeld.Error(),
		}},
		{"SetValue is acknowledged but not stored", flawed.LostSetValue, nil, map[string]string{
			"values":           `SetValue replaced the value: Inspect`,
			"election-observe": "A proclaimed: the observer did not report",
		}},
		{"observers are not told of values replaced", flawed.DeafToValues, nil, map[string]string{
			"election-observe": "A proclaimed: the observer did not report",
		}},
		{"a mutex admits two holders", flawed.TwoExclusive, nil, map[string]string{
			"election-one-leader": "two leaders at once",
			"election-resign":     "B's Campaign got the key while A led",
		}},
		{"Inspect reports the fence minted before the holder's", flawed.PreviousFence, nil, map[string]string{
			"election-terms":   "A leads: Leader, asked by C, reports",
			"election-observe": "A leads: the observer reported",
		}},
		{"crashed holders' holds never expire", flawed.NeverExpires, nil, map[string]string{
			"election-crashed-leader": "A, leading with a TTL of 250ms, crashed: B's Campaign did not return",
		}},
		{"owners are not reentrant", 0, lockers(flawed.NotReentrant), map[string]string{
			"reentrancy": "by the owner that holds the key, through the same Locker",
		}},
		{"the first handle released releases the hold", 0, lockers(flawed.ReleasesAll), map[string]string{
			"reentrancy": "two of the owner's three handles still held: TryAcquire",
		}},
		{"owners are reentrant across Lockers", 0, ownersAcross, map[string]string{
			"reentrancy": "through another Locker (another client): TryAcquire",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := electionHarness(t, tt.flaws, nil, tt.wrap)
			h.Select = func(name string) bool { _, ok := tt.caught[name]; return ok }
			rep := wantCaught(t, h, "a backend where "+tt.name, slices.Collect(maps.Keys(tt.caught)))
			for name, says := range tt.caught {
				if r, ok := rep.Result(name); ok && r.Status == conformance.Fail && !strings.Contains(r.Detail, says) {
					t.Errorf("%s failed saying %q, which does not say %q", name, r.Detail, says)
				}
			}
		})
	}
}

// noInspector is a driver that cannot inspect keys (nor wait natively, nor
// observe): only backend.Driver's methods show.
type noInspector struct{ backend.Driver }

// TestElectionCasesSkipUnclaimed: the cases about values and elections
// run where the backend claims what they need and are skipped, naming
// it, where it does not; the others run anyway.
func TestElectionCasesSkipUnclaimed(t *testing.T) {
	const values, fencing, inspect = "Capabilities().MaxValueLen is 0", "Capabilities().Fencing is false", "cannot inspect keys"
	tests := []struct {
		name   string
		driver func(*flawed.Driver) backend.Driver
		// skipped maps the cases that must be skipped to what the reason
		// names; the others must pass.
		skipped map[string]string
	}{
		{"no values", func(d *flawed.Driver) backend.Driver {
			return claiming{d, func(c *backend.Capabilities) { c.MaxValueLen = 0 }}
		}, map[string]string{"values": values, "election-observe": values, "election-crashed-leader": values}},
		{"no fencing", func(d *flawed.Driver) backend.Driver {
			return claiming{d, func(c *backend.Capabilities) { c.Fencing = false }}
		}, map[string]string{"election-terms": fencing}},
		{"no inspector", func(d *flawed.Driver) backend.Driver {
			return noInspector{d}
		}, map[string]string{"values": inspect, "election-terms": inspect, "election-observe": inspect, "election-crashed-leader": inspect}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := conformance.Check(context.Background(), electionHarness(t, 0, tt.driver, nil))
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
				case skip && !strings.Contains(r.Detail, want):
					t.Errorf("%s skipped saying %q, which does not say %q", r.Name, r.Detail, want)
				}
			}
		})
	}
}
