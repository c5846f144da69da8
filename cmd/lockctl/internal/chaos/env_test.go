package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any of them leaves a goroutine
// behind: a Serve that never returns, a watchdog of a Locker not closed,
// a lost-notice goroutine still waiting.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
