// Package conformancesuite runs the conformance suite as a testify suite
// (github.com/stretchr/testify/suite), for teams whose tests are organised
// that way. It is a package of its own so that importing conformance does
// not import testify.
//
// Construct a Suite with the harness of the deployment under test:
//
//	func TestLocks(t *testing.T) {
//		suite.Run(t, &conformancesuite.Suite{Harness: conformance.URLHarness(url)})
//	}
//
// or embed it in a suite of your own, next to your own test methods, and
// set Harness before suite.Run or in SetupSuite. Cases of your own go in
// Harness.Cases and run with the built-in ones.
package conformancesuite

import (
	"github.com/stretchr/testify/suite"

	"github.com/distlock/locker/conformance"
)

// Suite is a testify suite whose test method TestConformance runs the
// conformance cases against Harness.
type Suite struct {
	suite.Suite
	// Harness makes the clients of the deployment under test. Set it
	// before suite.Run, or in the SetupSuite of a suite that embeds Suite.
	Harness conformance.Harness
}

// TestConformance runs every case, the built-in ones and then
// Harness.Cases, as a subtest, with conformance.Run. The suite's
// SetupSubTest and TearDownSubTest do not run around the cases, and a
// suite that embeds Suite and has a TestConformance method of its own
// replaces this one.
func (s *Suite) TestConformance() {
	if s.Harness.NewClient == nil {
		s.T().Fatal("conformancesuite: Suite.Harness.NewClient is nil: set Harness before suite.Run or in SetupSuite")
	}
	conformance.Run(s.T(), s.Harness)
}
