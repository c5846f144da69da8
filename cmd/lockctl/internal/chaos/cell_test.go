package chaos

import (
	"slices"
	"strings"
	"testing"
)

func TestCellJudge(t *testing.T) {
	tests := []struct {
		name      string
		counts    Counts
		rounds    int
		recovered int
		stale     int // rounds with a stale write accepted
		errors    []string
		violates  bool
		fencing   bool

		expected bool
		expect   string   // a substring of Expect
		reasons  []string // substrings of Verdict
	}{
		{name: "fencing, stale write rejected", counts: Counts{StaleRejected: 3, Overlaps: 3}, rounds: 3, recovered: 3, fencing: true,
			expected: true, expect: "fence rejects", reasons: []string{"as expected"}},
		{name: "fencing, stale write accepted", counts: Counts{StaleAccepted: 1}, rounds: 3, recovered: 3, fencing: true,
			expect: "fence rejects", reasons: []string{"1 stale write(s) accepted although the backend fences"}},
		{name: "fencing, late write accepted", counts: Counts{LateAccepted: 2}, rounds: 3, recovered: 3, fencing: true,
			reasons: []string{"2 stale write(s) accepted although the backend fences"}},
		{name: "fencing, stale and late add up", counts: Counts{StaleAccepted: 1, LateAccepted: 2}, rounds: 3, recovered: 3, fencing: true,
			reasons: []string{"3 stale write(s)"}},
		{name: "fencing, rightful write rejected", counts: Counts{RightfulRejected: 1}, rounds: 1, recovered: 1, fencing: true,
			reasons: []string{"1 rightful write(s) rejected", "went backwards"}},
		{name: "not taken again in every round", rounds: 3, recovered: 2, fencing: true,
			reasons: []string{"taken again in 2 of 3 rounds"}},
		{name: "a round failed", rounds: 2, recovered: 2, errors: []string{"round 2: boom"}, fencing: true,
			reasons: []string{"1 round(s) failed"}},
		{name: "no fencing, nothing stale", counts: Counts{Skipped: 2, Overlaps: 1}, rounds: 2, recovered: 2,
			expected: true, expect: "holder knows it lost", reasons: []string{"as expected"}},
		{name: "no fencing, stale accepted", counts: Counts{StaleAccepted: 1}, rounds: 2, recovered: 2,
			expect: "holder knows it lost", reasons: []string{"1 stale write(s) accepted"}},
		{name: "no fencing, late accepted", counts: Counts{LateAccepted: 1}, rounds: 2, recovered: 2,
			reasons: []string{"1 stale write(s) accepted"}},
		{name: "violates, stale accepted every round", counts: Counts{StaleAccepted: 2}, stale: 2, rounds: 2, recovered: 2, violates: true,
			expected: true, expect: "cannot fence", reasons: []string{"as expected"}},
		{name: "violates, stale accepted in fewer rounds", counts: Counts{StaleAccepted: 1}, stale: 1, rounds: 2, recovered: 2, violates: true,
			expect: "cannot fence", reasons: []string{"fewer rounds than expected (1 of 2)"}},
		{name: "violates, nothing stale", counts: Counts{StaleRejected: 2}, rounds: 2, recovered: 2, violates: true,
			reasons: []string{"(0 of 2)"}},
		{name: "violates, two stale writes in one round of two", counts: Counts{StaleAccepted: 2}, stale: 1, rounds: 2, recovered: 2, violates: true,
			expected: false, expect: "cannot fence", reasons: []string{"fewer rounds than expected (1 of 2)"}},
		{name: "violates wins over fencing", counts: Counts{StaleAccepted: 1}, stale: 1, rounds: 1, recovered: 1, violates: true, fencing: true,
			expected: true, expect: "cannot fence"},
		{name: "violates still requires recovery", counts: Counts{StaleAccepted: 1}, stale: 1, rounds: 1, recovered: 0, violates: true,
			reasons: []string{"taken again in 0 of 1"}},
		{name: "every reason, joined", counts: Counts{StaleAccepted: 1, RightfulRejected: 1}, rounds: 2, recovered: 1,
			errors: []string{"round 1: x", "round 2: y"}, fencing: true,
			reasons: []string{"2 round(s) failed; the key was taken again in 1 of 2 rounds; 1 rightful write(s) rejected: a fence went backwards; 1 stale write(s) accepted although the backend fences"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cell{Scenario: "s", Backend: "b", Rounds: tt.rounds, Counts: tt.counts, Recovered: tt.recovered, StaleRounds: tt.stale, Errors: tt.errors}
			c.judge(expectation{violates: tt.violates, fencing: tt.fencing})
			if c.Expected != tt.expected {
				t.Errorf("Expected = %v, want %v (verdict %q)", c.Expected, tt.expected, c.Verdict)
			}
			if c.Expect == "" || !strings.Contains(c.Expect, tt.expect) {
				t.Errorf("Expect = %q, want it to contain %q", c.Expect, tt.expect)
			}
			if tt.expected != (c.Verdict == "as expected") {
				t.Errorf("Verdict = %q with Expected %v", c.Verdict, c.Expected)
			}
			if !tt.expected && !strings.HasPrefix(c.Verdict, "UNEXPECTED: ") {
				t.Errorf("Verdict = %q, want it to start with UNEXPECTED", c.Verdict)
			}
			for _, r := range tt.reasons {
				if !strings.Contains(c.Verdict, r) {
					t.Errorf("Verdict = %q, want it to name %q", c.Verdict, r)
				}
			}
		})
	}
}

// TestCellJudgeKeepsLoses: where the lock must survive the fault, a
// second holder in any round is unexpected; where the fault loses the
// lock and its fence, a second holder and a repeated fence are expected
// in every round, and a rightful write refused is what shows the fence.
func TestCellJudgeKeepsLoses(t *testing.T) {
	rounds := func(cs ...Counts) []RoundResult {
		var h []RoundResult
		for _, c := range cs {
			h = append(h, RoundResult{Counts: c})
		}
		return h
	}
	broken := Counts{Overlaps: 1, RightfulRejected: 1, LateAccepted: 1}
	tests := []struct {
		name     string
		x        expectation
		history  []RoundResult
		expected bool
		expect   string
		reasons  []string
	}{
		{name: "keeps, no second holder", x: expectation{fencing: true, keeps: true}, history: rounds(Counts{}, Counts{}),
			expected: true, expect: "the lock survives the fault (no second holder); no stale write accepted"},
		{name: "keeps, a second holder", x: expectation{fencing: true, keeps: true}, history: rounds(Counts{}, Counts{Overlaps: 1, StaleRejected: 1}),
			expect: "survives", reasons: []string{"the lock was lost to the fault: a second holder in 1 round(s)"}},
		{name: "keeps, a fence gone backwards", x: expectation{fencing: true, keeps: true}, history: rounds(Counts{RightfulRejected: 1}),
			reasons: []string{"1 rightful write(s) rejected"}},
		{name: "loses in every round", x: expectation{fencing: true, loses: true}, history: rounds(broken, Counts{Overlaps: 1, StaleAccepted: 1}),
			expected: true, expect: "a second holder and a repeated fence in every round"},
		{name: "loses, one round without a second holder", x: expectation{fencing: true, loses: true}, history: rounds(broken, Counts{RightfulRejected: 1}),
			reasons: []string{"a second holder in fewer rounds than expected (1 of 2)"}},
		{name: "loses, one round whose fence held", x: expectation{fencing: true, loses: true}, history: rounds(broken, Counts{Overlaps: 1, StaleRejected: 1}),
			reasons: []string{"a repeated fence in fewer rounds than expected (1 of 2)"}},
		{name: "loses, nothing lost", x: expectation{fencing: true, loses: true}, history: rounds(Counts{}, Counts{}),
			reasons: []string{"(0 of 2)", "a repeated fence in fewer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cell{Rounds: len(tt.history), Recovered: len(tt.history), History: tt.history}
			for _, h := range tt.history {
				c.Counts.add(h.Counts)
			}
			c.judge(tt.x)
			if c.Expected != tt.expected {
				t.Errorf("Expected = %v, want %v (verdict %q)", c.Expected, tt.expected, c.Verdict)
			}
			if !strings.Contains(c.Expect, tt.expect) {
				t.Errorf("Expect = %q, want it to contain %q", c.Expect, tt.expect)
			}
			for _, r := range tt.reasons {
				if !strings.Contains(c.Verdict, r) {
					t.Errorf("Verdict = %q, want it to name %q", c.Verdict, r)
				}
			}
		})
	}
}

func TestPick(t *testing.T) {
	names := func(scs []*Scenario) []string {
		var s []string
		for _, sc := range scs {
			s = append(s, sc.Name)
		}
		return s
	}
	all := ScenarioNames()
	if len(all) != len(Scenarios) || len(all) == 0 {
		t.Fatalf("ScenarioNames() = %v for %d scenarios", all, len(Scenarios))
	}
	tests := []struct {
		name  string
		names []string
		want  []string
	}{
		{"nil means all", nil, all},
		{"empty means all", []string{}, all},
		{"one", []string{"kill"}, []string{"kill"}},
		{"order follows Scenarios, not the arguments", []string{"restart", "pause", "clock-fast"}, []string{"pause", "clock-fast", "restart"}},
		{"a name given twice once", []string{"kill", "kill"}, []string{"kill"}},
		{"every one by name", slices.Clone(all), all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scs, err := pick(tt.names)
			if err != nil {
				t.Fatalf("pick(%q): %v", tt.names, err)
			}
			if got := names(scs); !slices.Equal(got, tt.want) {
				t.Errorf("pick(%q) = %v, want %v", tt.names, got, tt.want)
			}
		})
	}

	for _, bad := range [][]string{{"nosuch"}, {"pause", "nosuch"}, {"Pause"}, {""}} {
		scs, err := pick(bad)
		if err == nil {
			t.Errorf("pick(%q) = %v, want an error", bad, names(scs))
			continue
		}
		unknown := bad[len(bad)-1]
		if !strings.Contains(err.Error(), `"`+unknown+`"`) {
			t.Errorf("pick(%q): error %q does not name %q", bad, err, unknown)
		}
		for _, n := range all {
			if !strings.Contains(err.Error(), n) {
				t.Errorf("pick(%q): error %q does not list %q", bad, err, n)
			}
		}
	}
}

// TestScenarios checks the table's own consistency: unique names, a run
// function each, and Violates, Keeps and Loses subsets of Backends.
func TestScenarios(t *testing.T) {
	seen := map[string]bool{}
	for _, sc := range Scenarios {
		if sc.Name == "" || seen[sc.Name] {
			t.Errorf("scenario name %q empty or repeated", sc.Name)
		}
		seen[sc.Name] = true
		if sc.run == nil || sc.About == "" || len(sc.Backends) == 0 {
			t.Errorf("scenario %q: run, About and Backends must be set", sc.Name)
		}
		for what, bs := range map[string][]string{"violates": sc.Violates, "keeps": sc.Keeps, "loses": sc.Loses} {
			for _, v := range bs {
				if !slices.Contains(sc.Backends, v) {
					t.Errorf("scenario %q %s on %q, which is not one of its backends %v", sc.Name, what, v, sc.Backends)
				}
			}
		}
		for _, v := range sc.Loses {
			if slices.Contains(sc.Keeps, v) || slices.Contains(sc.Violates, v) {
				t.Errorf("scenario %q: loses on %q and also keeps or violates there", sc.Name, v)
			}
		}
	}
}

func TestGlobEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain/key-1", "plain/key-1"},
		{`a*b?[c]\`, `a\*b\?\[c\]\\`},
		{`\*`, `\\\*`},
		{"lockctl-chaos/0a1b/pause/redis/0", "lockctl-chaos/0a1b/pause/redis/0"},
		{"{k:x}", "{k:x}"}, // braces are not special in KEYS patterns
	}
	for _, tt := range tests {
		if got := globEscape(tt.in); got != tt.want {
			t.Errorf("globEscape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
