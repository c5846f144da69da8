package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
)

// TestOwnCases checks that cases of one's own run after the built-in
// ones, with each way a case can end reported as such.
func TestOwnCases(t *testing.T) {
	h := harness(correct)
	h.Cases = []conformance.Case{
		{Name: "own-pass", Rule: "a case that keeps its rule passes", Func: func(t *conformance.T) {
			a, b := t.Locker(), t.Locker()
			lk := t.TryAcquire(a, t.Key("k"), locker.WithTTL(t.LongTTL()))
			t.WantNotAcquired(b, lk.Key(), "held by A")
			t.Release(lk)
		}},
		{Name: "own-error", Rule: "Errorf fails the case", Func: func(t *conformance.T) {
			t.Errorf("first")
			t.Errorf("second")
		}},
		{Name: "own-fatal", Rule: "Fatalf fails the case and ends it", Func: func(t *conformance.T) {
			t.Fatalf("fatal")
			t.Errorf("after Fatalf")
		}},
		{Name: "own-failnow", Rule: "FailNow fails the case and ends it", Func: func(t *conformance.T) {
			t.FailNow()
			t.Errorf("after FailNow")
		}},
		{Name: "own-wrong-error", Rule: "WantErr fails the case on another error", Func: func(t *conformance.T) {
			t.WantErr(errors.New("other"), locker.ErrNotHeld, "the call")
		}},
		{Name: "own-skip", Rule: "Skipf skips the case", Func: func(t *conformance.T) {
			t.Skipf("not here")
			t.Errorf("after Skipf")
		}},
		{Name: "own-panic", Rule: "a panic fails the case", Func: func(t *conformance.T) {
			panic("boom")
		}},
	}
	rep, err := conformance.Check(context.Background(), h)
	if err == nil {
		t.Fatalf("Check passed a run with failing cases of its own:\n%s", rep)
	}
	var names []string
	for _, r := range rep.Results {
		names = append(names, r.Name)
	}
	wantNames := conformance.Names()
	for _, c := range h.Cases {
		wantNames = append(wantNames, c.Name)
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("the report's cases are %v, want %v", names, wantNames)
	}
	want := []struct {
		name   string
		status conformance.Status
		detail string
	}{
		{"own-pass", conformance.Pass, ""},
		{"own-error", conformance.Fail, "first\nsecond"},
		{"own-fatal", conformance.Fail, "fatal"},
		{"own-failnow", conformance.Fail, "FailNow called"},
		{"own-wrong-error", conformance.Fail, "the call: got error other, want " + locker.ErrNotHeld.Error()},
		{"own-skip", conformance.Skip, "not here"},
		{"own-panic", conformance.Fail, "panic: boom"},
	}
	for i, w := range want {
		r, ok := rep.Result(w.name)
		if !ok {
			t.Errorf("no result for %s", w.name)
			continue
		}
		if r.Status != w.status || r.Detail != w.detail {
			t.Errorf("%s: got %s %q, want %s %q", w.name, r.Status, r.Detail, w.status, w.detail)
		}
		if r.Rule != h.Cases[i].Rule {
			t.Errorf("%s: Rule = %q, want %q", w.name, r.Rule, h.Cases[i].Rule)
		}
	}
	for _, name := range conformance.Names() {
		if r, _ := rep.Result(name); r.Status == conformance.Fail {
			t.Errorf("built-in case %s failed next to cases of one's own: %s", name, r.Detail)
		}
	}
}

// TestRunOwnCases checks that Run runs cases of one's own as subtests.
func TestRunOwnCases(t *testing.T) {
	h := harness(correct)
	var ran []string
	h.Cases = []conformance.Case{{
		Name: "own",
		Rule: "the case runs",
		Func: func(ct *conformance.T) {
			ran = append(ran, ct.Name())
		},
	}}
	conformance.Run(t, h)
	if !slices.Equal(ran, []string{"own"}) {
		t.Errorf("Run ran cases of its own %v, want [own]", ran)
	}
}

func TestOwnCasesInvalid(t *testing.T) {
	fn := func(*conformance.T) {}
	tests := []struct {
		name  string
		cases []conformance.Case
		want  string
	}{
		{"no name", []conformance.Case{{Rule: "r", Func: fn}}, "Harness.Cases[0] has no Name"},
		{"built-in name", []conformance.Case{{Name: "fencing", Rule: "r", Func: fn}}, `Harness.Cases[0]: "fencing" is the name of a built-in case`},
		{"name twice", []conformance.Case{{Name: "a", Rule: "r", Func: fn}, {Name: "a", Rule: "r", Func: fn}}, `Harness.Cases[1]: the name "a" is used twice`},
		{"no rule", []conformance.Case{{Name: "a", Func: fn}}, `Harness.Cases[0] ("a") has no Rule`},
		{"no func", []conformance.Case{{Name: "a", Rule: "r"}}, `Harness.Cases[0] ("a") has no Func`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := harness(correct)
			h.Cases = tt.cases
			rep, err := conformance.Check(context.Background(), h)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check = %v, want an error saying %q", err, tt.want)
			}
			if len(rep.Results) > 0 {
				t.Errorf("Check ran %d cases with invalid Harness.Cases", len(rep.Results))
			}
		})
	}
}

// TestSelectAndObserve: Select leaves the cases it does not pick out of
// the run and its Report; Observe sees each picked case start and end, in
// order; the Report names the run's key prefix.
func TestSelectAndObserve(t *testing.T) {
	h := harness(correct)
	before := conformance.Names()
	defer func() {
		if after := conformance.Names(); !slices.Equal(after, before) {
			t.Errorf("the built-in cases changed: %q, were %q", after, before)
		}
	}()
	picked := []string{"acquire-release", "fencing"}
	h.Select = func(name string) bool { return slices.Contains(picked, name) }
	var seen []string
	h.Observe = func(p conformance.Progress) {
		state := "start"
		if p.Result != nil {
			state = string(p.Result.Status)
		}
		if p.Total != len(picked) || p.Rule == "" {
			t.Errorf("progress %+v: want Total %d and the rule", p, len(picked))
		}
		seen = append(seen, fmt.Sprintf("%d %s %s", p.Index, p.Case, state))
	}
	rep, err := conformance.Check(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1 acquire-release start", "1 acquire-release pass", "2 fencing start", "2 fencing pass"}
	if !slices.Equal(seen, want) {
		t.Errorf("Observe saw %q, want %q", seen, want)
	}
	if len(rep.Results) != len(picked) || rep.Results[0].Name != picked[0] || rep.Results[1].Name != picked[1] {
		t.Errorf("Report has %+v, want only %q", rep.Results, picked)
	}
	if !strings.HasPrefix(rep.KeyPrefix, "conformance/") || !strings.HasSuffix(rep.KeyPrefix, "/") || len(rep.KeyPrefix) < len("conformance/x/") {
		t.Errorf("KeyPrefix %q", rep.KeyPrefix)
	}

	h.Select = func(string) bool { return false }
	if _, err := conformance.Check(context.Background(), h); err == nil || !strings.Contains(err.Error(), "picks no case") {
		t.Errorf("Check with a Select that picks nothing: %v", err)
	}
}
