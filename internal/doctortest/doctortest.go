// Package doctortest holds what the backends' tests of locker.Diagnose
// share: running it, finding a finding, and checking one.
package doctortest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
)

// Diagnose runs locker.Diagnose on raw and fails the test on an error.
func Diagnose(t testing.TB, raw string) locker.Diagnosis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := locker.Diagnose(ctx, raw)
	if err != nil {
		t.Fatalf("Diagnose(%q): %v", raw, err)
	}
	return d
}

// Finding returns d's finding of check about target, failing the test if
// there is none.
func Finding(t testing.TB, d locker.Diagnosis, check, target string) locker.Finding {
	t.Helper()
	for _, f := range d.Findings {
		if f.Check == check && f.Target == target {
			return f
		}
	}
	t.Fatalf("no %s finding about %q in %s", check, target, Show(d))
	return locker.Finding{}
}

// Show formats d's findings for a failure message.
func Show(d locker.Diagnosis) string {
	var b strings.Builder
	b.WriteString(d.URL + ":")
	for _, f := range d.Findings {
		b.WriteString("\n  [" + f.Status.String() + "] " + f.Check + " " + f.Target + ": " + f.Detail)
	}
	return b.String()
}

// WantStatus checks a finding's status and that its detail says detail,
// and that it has a fix exactly when it did not pass.
func WantStatus(t testing.TB, f locker.Finding, want locker.Status, detail string) {
	t.Helper()
	if f.Status != want || !strings.Contains(f.Detail, detail) || (f.Fix == "") != (want == locker.Pass) {
		t.Errorf("%s %s = [%v] %q (fix %q); want [%v] with %q, and a fix unless it passes", f.Check, f.Target, f.Status, f.Detail, f.Fix, want, detail)
	}
}
