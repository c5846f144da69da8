package conformancesuite_test

import (
	"context"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/conformance/conformancesuite"
	_ "github.com/distlock/locker/memory"
)

// LockSuite is a platform team's suite: the conformance cases against its
// deployment, a case of its own, and a test method of its own.
type LockSuite struct {
	conformancesuite.Suite
	URL string // the deployment, e.g. redis://10.0.0.5:6379
}

// SetupSuite sets the harness before any test method runs.
func (s *LockSuite) SetupSuite() {
	s.Harness = conformance.URLHarness(s.URL)
	s.Harness.Cases = []conformance.Case{{
		Name: "fencing-required",
		Rule: "Locks carry fencing tokens: the team's storage rejects writes without one",
		Func: func(t *conformance.T) {
			// A conformance.T works with testify's require and assert.
			require.True(t, t.Capabilities().Fencing, "the backend mints no fencing tokens")
			lk := t.Acquire(t.Locker(), t.Key("k"))
			_, ok := lk.Fence()
			require.True(t, ok, "Fence() reports ok=false")
			t.Release(lk)
		},
	}}
}

// TestServiceTTL is a test of the team's own, next to TestConformance.
func (s *LockSuite) TestServiceTTL() {
	ctx := context.Background()
	l, err := locker.Open(ctx, s.URL)
	s.Require().NoError(err)
	defer l.Close()
	lk, err := l.TryAcquire(ctx, "lock-suite/service-ttl", locker.WithTTL(2*time.Minute))
	s.Require().NoError(err)
	defer lk.Release(ctx)
	d, err := lk.TTL(ctx)
	s.Require().NoError(err)
	s.Greater(d, time.Minute)
}

// A suite of one's own embeds Suite, sets Harness in SetupSuite, and may
// add cases to Harness.Cases and test methods next to TestConformance. A
// test function hands it to testify:
//
//	func TestLockSuite(t *testing.T) {
//		suite.Run(t, &LockSuite{URL: os.Getenv("LOCKER_URL")})
//	}
//
// go test -v then reports TestLockSuite/TestConformance/<case> for every
// case, and TestLockSuite/TestServiceTTL.
func Example() {}
