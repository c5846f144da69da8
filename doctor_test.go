package locker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// TestDiagnoseURLErrorsAreOpens: a URL that cannot be read gets, from
// Diagnose, the very error Open gives, before any backend looks at it.
func TestDiagnoseURLErrorsAreOpens(t *testing.T) {
	for _, raw := range []string{
		"",
		"://nothing",
		"127.0.0.1:6379",
		"nosuchscheme://h",
		"memory://?ttl=-1s",
		"memory://?ttl=soon",
		"memory://?colour=blue",
		"memory://x/path",
		"redis://h1:1,h2:2:3",
	} {
		wantDiagnoseError(t, raw, nil)
	}
	wantDiagnoseError(t, "memory://", []locker.OpenOption{nil})
}

// wantDiagnoseError checks that Diagnose and Open refuse raw with the same
// error.
func wantDiagnoseError(t *testing.T, raw string, opts []locker.OpenOption) {
	t.Helper()
	l, openErr := locker.Open(context.Background(), raw, opts...)
	if openErr == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", raw)
	}
	d, err := locker.Diagnose(context.Background(), raw, opts...)
	if err == nil || err.Error() != openErr.Error() {
		t.Errorf("Diagnose(%q) = %+v, %v; want Open's error %v", raw, d, err, openErr)
	}
	if errors.Is(openErr, locker.ErrInvalidTTL) != errors.Is(err, locker.ErrInvalidTTL) {
		t.Errorf("Diagnose(%q): errors.Is(ErrInvalidTTL) differs from Open's", raw)
	}
}

// TestDiagnoseNilContext: a nil context is an error, as in Open.
func TestDiagnoseNilContext(t *testing.T) {
	var nilCtx context.Context
	if _, err := locker.Diagnose(nilCtx, "memory://"); err == nil || !strings.Contains(err.Error(), "nil context") {
		t.Errorf("Diagnose(nil, ...) = %v, want an error about the nil context", err)
	}
}

// TestDiagnoseMemory: the in-process backend has nothing to check, which
// is a single passing finding, not an error.
func TestDiagnoseMemory(t *testing.T) {
	d, err := locker.Diagnose(context.Background(), "memory://doctor?ttl=5s&prefix=p/")
	if err != nil {
		t.Fatal(err)
	}
	if d.Backend != "memory" || d.URL != "memory://doctor?ttl=5s&prefix=p/" || d.Worst() != locker.Pass {
		t.Errorf("Diagnose(memory) = %+v, want backend memory, the URL, and a pass", d)
	}
	if len(d.Findings) == 0 || !strings.Contains(d.Findings[0].Detail, "in-process") {
		t.Errorf("findings = %+v, want the first saying the store is in-process", d.Findings)
	}
}

// Test schemes, registered once per process, since registration is for
// good (go test -count runs the tests again in the same process).
var (
	registerTestSchemes sync.Once
	// test-nodiagnoser: an Opener and no Diagnoser; it fails when
	// noDiagFail is set, and counts the Lockers opened and closed.
	noDiagFail             atomic.Bool
	noDiagOpen, noDiagShut atomic.Int32
	// test-diagnoser: a Diagnoser that forgets CheckParams and records
	// the URL's DefaultTTL.
	diagTTL atomic.Int64
)

func testSchemes() {
	registerTestSchemes.Do(func() {
		locker.Register("test-nodiagnoser", func(ctx context.Context, u *locker.URL) (locker.Locker, error) {
			if err := u.CheckParams(); err != nil {
				return nil, err
			}
			if noDiagFail.Load() {
				return nil, errors.New("server unreachable")
			}
			noDiagOpen.Add(1)
			return closeCounter{memory.New(nil), &noDiagShut}, nil
		})
		locker.Register("test-diagnoser", func(context.Context, *locker.URL) (locker.Locker, error) {
			return nil, errors.New("not a backend")
		})
		locker.RegisterDiagnoser("test-diagnoser", func(_ context.Context, u *locker.URL) ([]locker.Finding, error) {
			u.Param("known")
			diagTTL.Store(int64(u.DefaultTTL()))
			return []locker.Finding{
				{Check: "a", Status: locker.Warn, Target: "h:1", Detail: "d", Fix: "f"},
				{Check: "b", Status: locker.Pass, Target: "h:1", Detail: "d"},
			}, nil
		})
	})
}

// TestDiagnoseWithoutDiagnoser: a scheme whose backend registered no
// Diagnoser is checked by opening a Locker and closing it: Open's error is
// Diagnose's, and success is one passing finding.
func TestDiagnoseWithoutDiagnoser(t *testing.T) {
	testSchemes()
	noDiagFail.Store(false)
	opened, closed := noDiagOpen.Load(), noDiagShut.Load()
	d, err := locker.Diagnose(context.Background(), "test-nodiagnoser://h")
	if err != nil {
		t.Fatal(err)
	}
	if d.Worst() != locker.Pass || len(d.Findings) != 1 || !strings.Contains(d.Findings[0].Detail, "no checks of its own") {
		t.Errorf("Diagnose = %+v, want one passing finding saying the backend has no checks", d)
	}
	if o, c := noDiagOpen.Load()-opened, noDiagShut.Load()-closed; o != 1 || c != 1 {
		t.Errorf("opened %d, closed %d Lockers; want 1 and 1", o, c)
	}
	wantDiagnoseError(t, "test-nodiagnoser://h?x=1", nil)
	noDiagFail.Store(true)
	defer noDiagFail.Store(false)
	wantDiagnoseError(t, "test-nodiagnoser://h", nil)
}

type closeCounter struct {
	locker.Locker
	n *atomic.Int32
}

func (c closeCounter) Close() error {
	c.n.Add(1)
	return c.Locker.Close()
}

// TestDiagnoseChecksParams: a Diagnoser that forgot CheckParams still
// does not let an unknown parameter pass; its findings are returned as
// given, under the redacted URL.
func TestDiagnoseChecksParams(t *testing.T) {
	testSchemes()
	_, err := locker.Diagnose(context.Background(), "test-diagnoser://h?known=1&unknown=2")
	if err == nil || !strings.Contains(err.Error(), `invalid query parameter "unknown"`) {
		t.Errorf("Diagnose with an unknown parameter = %v, want an error naming it", err)
	}
	d, err := locker.Diagnose(context.Background(), "test-diagnoser://u:secret@h?known=1&ttl=7s")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.URL, "secret") || d.Backend != "test-diagnoser" || d.Worst() != locker.Warn || len(d.Findings) != 2 {
		t.Errorf("Diagnose = %+v, want the redacted URL, backend test-diagnoser, 2 findings, worst warn", d)
	}
	if got := time.Duration(diagTTL.Load()); got != 7*time.Second {
		t.Errorf("URL.DefaultTTL with ttl=7s = %v, want 7s", got)
	}
	if _, err := locker.Diagnose(context.Background(), "test-diagnoser://h"); err != nil {
		t.Fatal(err)
	}
	if got := time.Duration(diagTTL.Load()); got != locker.DefaultTTL {
		t.Errorf("URL.DefaultTTL without ttl = %v, want DefaultTTL %v", got, locker.DefaultTTL)
	}
}

// TestRegisterDiagnoserPanics: registering twice, or nothing, is a
// programming error caught at start-up, as with Register.
func TestRegisterDiagnoserPanics(t *testing.T) {
	noop := func(context.Context, *locker.URL) ([]locker.Finding, error) { return nil, nil }
	for name, reg := range map[string]func(){
		"twice":  func() { locker.RegisterDiagnoser("memory", noop) },
		"empty":  func() { locker.RegisterDiagnoser("", noop) },
		"nil fn": func() { locker.RegisterDiagnoser("test-nil", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterDiagnoser %s did not panic", name)
				}
			}()
			reg()
		}()
	}
}

// TestDiagnoseRTTFinding: a round trip passes up to a tenth of the TTL, warns up
// to a third, and fails beyond, with a fix naming a TTL of ten round trips.
func TestDiagnoseRTTFinding(t *testing.T) {
	ttl := 3 * time.Second
	for _, tc := range []struct {
		rtt  time.Duration
		want locker.Status
	}{
		{time.Millisecond, locker.Pass},
		{ttl / 10, locker.Pass},
		{ttl/10 + time.Millisecond, locker.Warn},
		{ttl / 3, locker.Warn},
		{ttl/3 + time.Millisecond, locker.Fail},
	} {
		f := locker.RTTFinding("h:1", tc.rtt, ttl, "median of 5")
		if f.Status != tc.want || f.Check != "rtt" || f.Target != "h:1" || !strings.Contains(f.Detail, "median of 5") {
			t.Errorf("RTTFinding(%v, TTL %v) = %+v, want status %v", tc.rtt, ttl, f, tc.want)
		}
		if (f.Fix == "") != (tc.want == locker.Pass) {
			t.Errorf("RTTFinding(%v): fix %q; want one exactly when the check does not pass", tc.rtt, f.Fix)
		}
	}
	if f := locker.RTTFinding("h:1", time.Second, ttl, "x"); !strings.Contains(f.Fix, "10s") {
		t.Errorf("fix for a 1s round trip = %q, want a TTL of 10s", f.Fix)
	}
}

// TestDiagnoseStatusText: statuses read and write as words, in JSON too.
func TestDiagnoseStatusText(t *testing.T) {
	b, err := json.Marshal(locker.Diagnosis{Findings: []locker.Finding{{Status: locker.Fail}}})
	if err != nil || !strings.Contains(string(b), `"Status":"fail"`) {
		t.Fatalf("JSON of a failing finding = %s, %v; want Status \"fail\"", b, err)
	}
	var d locker.Diagnosis
	if err := json.Unmarshal(b, &d); err != nil || d.Findings[0].Status != locker.Fail {
		t.Errorf("round trip = %+v, %v", d, err)
	}
	var s locker.Status
	if err := s.UnmarshalText([]byte("fine")); err == nil {
		t.Error("UnmarshalText(fine) succeeded")
	}
	if _, err := locker.Status(7).MarshalText(); err == nil || locker.Status(7).String() != "Status(7)" {
		t.Errorf("Status(7): MarshalText error %v, String %q", err, locker.Status(7).String())
	}
	if got := (locker.Diagnosis{}).Worst(); got != locker.Pass {
		t.Errorf("Worst of no findings = %v, want pass", got)
	}
}
