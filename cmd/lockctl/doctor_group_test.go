package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/distlock/locker"
)

// TestGroupFindings: findings that differ only in their server become one
// that lists the servers, in the order seen; a deployment-wide finding's
// comma-separated servers are split; differing details stay apart.
func TestGroupFindings(t *testing.T) {
	warn := func(target string) locker.Finding {
		return locker.Finding{Check: "persistence", Status: locker.Warn, Target: target, Detail: "AOF is off", Fix: "turn it on"}
	}
	fs := []locker.Finding{
		{Check: "nodes", Detail: "3 nodes"},
		{Check: "quorum", Target: "a:1,b:1,c:1", Detail: "3 of 3 answer"},
		warn("a:1"),
		{Check: "rtt", Target: "a:1", Detail: "120us"},
		warn("b:1"),
		{Check: "rtt", Target: "b:1", Detail: "130us"},
		warn("c:1"),
		warn("c:1"),
	}
	got := groupFindings(fs)
	want := []doctorFinding{
		{Check: "nodes", Targets: []string{}, Detail: "3 nodes"},
		{Check: "quorum", Targets: []string{"a:1", "b:1", "c:1"}, Detail: "3 of 3 answer"},
		{Check: "persistence", Status: locker.Warn, Targets: []string{"a:1", "b:1", "c:1"}, Detail: "AOF is off", Fix: "turn it on"},
		{Check: "rtt", Targets: []string{"a:1"}, Detail: "120us"},
		{Check: "rtt", Targets: []string{"b:1"}, Detail: "130us"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groupFindings =\n%+v\nwant\n%+v", got, want)
	}

	var b bytes.Buffer
	printDiagnosis(&b, doctorOutput{URL: "redlock://a:1,b:1,c:1", Backend: "redlock", Findings: got})
	out := b.String()
	if got := targetCell([]string{"a:1", "b:1"}, 3); got != "a:1 +1 more" {
		t.Errorf("targetCell of two of three servers = %q, want the first and how many more", got)
	}
	for _, s := range []string{"WARN    persistence  all 3 servers  AOF is off", "rtt          a:1", "WARN persistence on a:1, b:1, c:1: AOF is off\n  fix: turn it on", "4 passed, 1 warned, 0 failed"} {
		if !strings.Contains(out, s) {
			t.Errorf("the text does not say %q:\n%s", s, out)
		}
	}
}

// TestDoctorFoundUncutWhenPiped: written to what is not a terminal (a
// pipe into tail or grep, a file), the FOUND column keeps the whole first
// sentence of a long detail; a terminal gets it cut to maxFound.
func TestDoctorFoundUncutWhenPiped(t *testing.T) {
	long := "the server's maxmemory-policy is allkeys-lru, which evicts any key when memory runs short, lock keys included, so a held lock can vanish"
	out := doctorOutput{URL: "redis://a:1", Backend: "redis", Findings: []doctorFinding{
		{Check: "eviction", Status: locker.Fail, Targets: []string{"a:1"}, Detail: long, Fix: "set maxmemory-policy noeviction"},
	}}
	var b bytes.Buffer
	printDiagnosis(&b, out)
	table, _, _ := strings.Cut(b.String(), "\nFAIL eviction")
	if !strings.Contains(table, long) || strings.Contains(table, "…") {
		t.Errorf("the table written to a buffer cuts the detail:\n%s", table)
	}
	if got := firstSentence(long, maxFound); len([]rune(got)) != maxFound || !strings.HasSuffix(got, "…") {
		t.Errorf("firstSentence for a terminal = %q, want it cut to %d characters", got, maxFound)
	}
}
