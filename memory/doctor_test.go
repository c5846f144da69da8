package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/distlock/locker"
)

// TestDiagnose: an in-process store has no server to check, which is one
// passing finding; a URL that Open refuses gets Open's error.
func TestDiagnose(t *testing.T) {
	d, err := locker.Diagnose(context.Background(), "memory://doctor")
	if err != nil {
		t.Fatal(err)
	}
	if d.Backend != "memory" || d.Worst() != locker.Pass || len(d.Findings) != 2 || !strings.Contains(d.Findings[0].Detail, "no server to check") {
		t.Errorf("Diagnose(memory://doctor) = %+v, want two passing findings, the first saying there is no server", d)
	}
	if f := d.Findings[1]; f.Check != "ttl" || !strings.Contains(f.Detail, "the TTL 30s is within the backend's range (from 5ms)") {
		t.Errorf("TTL finding = %+v, want the default TTL within range", f)
	}
	// A TTL that Open refuses (below the range) is a failing finding.
	d, err = locker.Diagnose(context.Background(), "memory://doctor?ttl=1ms")
	if err != nil {
		t.Fatal(err)
	}
	if f := d.Findings[1]; f.Status != locker.Fail || !strings.Contains(f.Detail, "below this backend's minimum of 5ms") || f.Fix == "" {
		t.Errorf("TTL finding for 1ms = %+v, want a failure naming the minimum, with a fix", f)
	}
	for _, raw := range []string{"memory://doctor/path", "memory://doctor?colour=blue", "memory://?ttl=x"} {
		l, openErr := locker.Open(context.Background(), raw)
		if openErr == nil {
			l.Close()
			t.Fatalf("Open(%q) succeeded; the case is wrong", raw)
		}
		if _, err := locker.Diagnose(context.Background(), raw); err == nil || err.Error() != openErr.Error() {
			t.Errorf("Diagnose(%q) = %v, want Open's error %v", raw, err, openErr)
		}
	}
}
