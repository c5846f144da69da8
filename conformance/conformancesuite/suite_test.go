package conformancesuite_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/conformance/conformancesuite"
	"github.com/distlock/locker/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A conformance.T can stand in for testify's *testing.T.
var _ require.TestingT = (*conformance.T)(nil)

// harness makes clients of one memory Store that can crash, so that no
// case is skipped for want of a crash. The clients log nothing: a crashed
// client's failing refreshes are expected here.
func harness() conformance.Harness {
	s := memory.NewStore()
	return conformance.Harness{
		NewClient: func(context.Context) (conformance.Client, error) {
			c := memory.NewClient(&memory.Options{Store: s, Config: locker.Config{Logger: slog.New(slog.DiscardHandler)}})
			return conformance.Client{Locker: c.Locker, Crash: c.Crash}, nil
		},
		TTL: 250 * time.Millisecond,
	}
}

func TestSuite(t *testing.T) {
	suite.Run(t, &conformancesuite.Suite{Harness: harness()})
}

// TestLockSuite runs the package example's suite, which embeds Suite.
func TestLockSuite(t *testing.T) {
	suite.Run(t, &LockSuite{URL: "memory://lock-suite"})
}

// brokenEnv, set in the environment, makes TestBrokenSuite run: it is run
// in a process of its own by TestBrokenCaseFails, since it fails.
const brokenEnv = "CONFORMANCESUITE_BROKEN"

// brokenCase breaks its rule on purpose: the memory backend keeps mutual
// exclusion, so the second TryAcquire fails and so does the case.
var brokenCase = conformance.Case{
	Name: "broken-two-holders",
	Rule: "A second client can take a held key (deliberately wrong)",
	Func: func(t *conformance.T) {
		key := t.Key("k")
		lk := t.TryAcquire(t.Locker(), key, locker.WithTTL(t.LongTTL()))
		defer lk.Release(t.Context())
		_, err := t.Locker().TryAcquire(t.Context(), key)
		require.NoError(t, err, "second holder")
	},
}

func TestBrokenSuite(t *testing.T) {
	if os.Getenv(brokenEnv) == "" {
		t.Skipf("run by TestBrokenCaseFails, with %s set", brokenEnv)
	}
	h := harness()
	h.Cases = []conformance.Case{brokenCase}
	suite.Run(t, &conformancesuite.Suite{Harness: h})
}

// TestBrokenCaseFails shows the suite failing under testify: run in a
// process of its own, TestBrokenSuite fails the broken case, with its rule
// and testify's message, while every built-in case still runs and passes.
func TestBrokenCaseFails(t *testing.T) {
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBrokenSuite$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), brokenEnv+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("TestBrokenSuite with a broken case: err = %v, want exit status 1; output:\n%s", err, out)
	}
	const prefix = "TestBrokenSuite/TestConformance/"
	text := string(out)
	for _, want := range []string{
		"--- FAIL: " + prefix + brokenCase.Name + " ",
		"rule broken: " + brokenCase.Rule,
		"second holder",
		locker.ErrNotAcquired.Error(),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the output does not say %q:\n%s", want, out)
		}
	}
	for _, name := range conformance.Names() {
		if !strings.Contains(text, "--- PASS: "+prefix+name+" ") {
			t.Errorf("built-in case %s did not pass next to the broken case:\n%s", name, out)
		}
	}
}
