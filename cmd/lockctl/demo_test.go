package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/memory"
)

// TestDemoJSON runs the binary's demo on the embedded backend: it ends
// well, every line is a JSON object, and exactly one stale write is
// rejected, none accepted.
func TestDemoJSON(t *testing.T) {
	t.Parallel()
	r := runLockctl(t, testEnv(t), "demo", "--json")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	types := map[string]int{}
	var sum summary
	for i, line := range lines {
		var v struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i+1, err, line)
		}
		types[v.Type]++
		if i == len(lines)-1 {
			if v.Type != "summary" {
				t.Fatalf("the last line is a %q, want the summary", v.Type)
			}
			json.Unmarshal([]byte(line), &sum)
		}
	}
	if types["start"] != 1 || types["phase"] != 5 || types["summary"] != 1 || types["event"] < 10 {
		t.Errorf("lines by type %v, want 1 start, 5 phases, events, 1 summary", types)
	}
	if rw, sem := sum.ReadWrite, sum.Semaphore; rw == nil || rw.ReadersTogether != 2 || rw.Overtaken != 0 || sem == nil || sem.MostHeld != sem.Limit {
		t.Errorf("the read/write and semaphore phases' accounts: %+v, %+v", rw, sem)
	}
	if sum.Backend != "memory" || !sum.Fencing || sum.URL != "memory://" {
		t.Errorf("summary names backend %q at %q, fencing %v; want memory, memory://, true", sum.Backend, sum.URL, sum.Fencing)
	}
	if sum.StaleRejected != 1 || sum.WritesRejected != 1 || sum.StaleAccepted != 0 {
		t.Errorf("stale writes rejected %d, accepted %d, writes rejected %d; want 1, 0, 1",
			sum.StaleRejected, sum.StaleAccepted, sum.WritesRejected)
	}
	if sum.Acquisitions != len(sum.Fences) || sum.Acquisitions < 4*contendRounds+4 || sum.WritesAccepted != sum.Acquisitions {
		t.Errorf("acquisitions %d, fences %v, writes accepted %d: want a fence and an accepted write per acquisition",
			sum.Acquisitions, sum.Fences, sum.WritesAccepted)
	}
	for i := 1; i < len(sum.Fences); i++ {
		if sum.Fences[i] <= sum.Fences[i-1] {
			t.Errorf("fences %v do not increase", sum.Fences)
			break
		}
	}
}

// TestDemoText tells the story in this process (under -race, its
// goroutines are checked too) and looks for its turns.
func TestDemoText(t *testing.T) {
	t.Parallel()
	r := runApp(t, nil, "demo", "--workers", "3")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"lockctl demo: 3 workers", "on memory://\n",
		"== 1. Contention", "== 2. A paused holder", "== 3. A crashed holder", "== Summary",
		"w1   PAUSED while holding the lock",
		"w2   acquired the lock from w1, fence 8: w1's lock expired",
		"w1   writes with fence 7: REJECTED, stale: the storage has accepted fence 8 (w2 holds the lock)",
		"w1   release refused: not held",
		"w3   CRASHED while holding the lock",
		"w3's lock expired",
		"writes rejected   1 (stale: 1)",
		"Fencing worked",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the story does not tell %q:\n%s", want, r.stdout)
		}
	}
	if n := strings.Count(r.stdout, "REJECTED"); n != 2 { // the write, and the verdict
		t.Errorf("REJECTED %d times, want the stale write and the verdict:\n%s", n, r.stdout)
	}
}

// TestDemoServers runs the story on every server backend: the stale
// write is rejected where the backend mints fencing tokens, and accepted,
// with the reason given, on Redlock.
func TestDemoServers(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		r := runLockctl(t, testEnv(t), "demo", "--url", url, "--workers", "3", "--json")
		if r.code != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
		}
		lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		var sum summary
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
			t.Fatal(err)
		}
		want := summary{StaleRejected: 1}
		if !s.fencing {
			want = summary{StaleAccepted: 1}
		}
		if sum.Fencing != s.fencing || sum.StaleRejected != want.StaleRejected || sum.StaleAccepted != want.StaleAccepted {
			t.Errorf("fencing %v, stale writes rejected %d, accepted %d; want %v, %d, %d",
				sum.Fencing, sum.StaleRejected, sum.StaleAccepted, s.fencing, want.StaleRejected, want.StaleAccepted)
		}
		if !s.fencing && !strings.Contains(sum.Verdict, "cannot mint safe fencing tokens") {
			t.Errorf("the verdict does not say why the stale write went through: %q", sum.Verdict)
		}
		checkKindsPhases(t, capabilitiesOf(t, url), sum)
	})
}

// checkKindsPhases checks the demo's read/write and semaphore phases by
// what the backend claims: skipped, naming the capability, where it does
// not admit the kind; else readers together, no violation, and no reader
// overtaking the writer where the backend claims FIFO.
func checkKindsPhases(t *testing.T, caps locker.Capabilities, sum summary) {
	t.Helper()
	rw, sem := sum.ReadWrite, sum.Semaphore
	if rw == nil || sem == nil {
		t.Fatalf("the summary lacks the read/write or the semaphore phase: %+v, %+v", rw, sem)
	}
	switch {
	case !caps.Shared && !strings.Contains(rw.Skipped, "Capabilities.Shared is false"):
		t.Errorf("%s admits no shared holds, yet the read/write phase says %+v", caps.Name, rw)
	case caps.Shared && (rw.Skipped != "" || rw.ReadersTogether != 2 || rw.Violations != 0 || caps.FIFO && rw.Overtaken != 0):
		t.Errorf("the read/write phase on %s: %+v", caps.Name, rw)
	}
	switch {
	case !caps.Permits && !strings.Contains(sem.Skipped, "Capabilities.Permits is false"):
		t.Errorf("%s admits no semaphores, yet the semaphore phase says %+v", caps.Name, sem)
	case caps.Permits && (sem.Skipped != "" || sem.MostHeld < 1 || sem.MostHeld > sem.Limit || sem.Waited < 1 || sem.Violations != 0):
		// Where admission is not one atomic step (Redlock's votes), a
		// client may find a free permit busy and wait: at least one
		// waits, and no more than the limit are held.
		t.Errorf("the semaphore phase on %s: %+v", caps.Name, sem)
	}
}

// TestDemoReadWrite tells the rw story on the embedded backend: two
// readers hold together, the writer waits for them, the reader that asks
// after the writer waits behind it (memory queues), and fences increase
// in grant order across kinds; a semaphore admits its limit and makes
// the last client wait.
func TestDemoReadWrite(t *testing.T) {
	t.Parallel()
	r := runApp(t, nil, "demo", "--story", "rw", "--workers", "4")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, re := range []string{
		`== 1\. Readers share, a writer waits\n`,
		`r1 +acquired a read lock, fence (\d+)\n`,
		`r2 +acquired a read lock, fence \d+; reading together with r1\n`,
		`W +asks for the write lock: r1 and r2 hold a read lock, so it waits for them\n`,
		`r1 +asks for a read lock: W waits for the write lock ahead of it, so it waits too \(queue order\)\n`,
		`r2 +releases its read lock\n.*W +acquired the write lock, fence \d+, after waiting`,
		`W +releases the write lock\n.*r1 +acquired a read lock, fence \d+\n`,
		`== 2\. A semaphore\n`,
		`p\d +asks for a permit: all 3 are taken, so it waits\n`,
		`semaphore +3 permits, 4 clients: at most 3 in use, 1 waited\n`,
		`a stream of readers cannot starve a writer`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("the story does not match %q:\n%s", re, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "== 3.") || strings.Contains(r.stdout, "PAUSED") {
		t.Errorf("--story rw told the fencing story too:\n%s", r.stdout)
	}

	r = runApp(t, nil, "demo", "--story", "rw", "--json")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	var sum summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || r.code != 0 {
		t.Fatalf("exit %d, summary %v:\n%s", r.code, err, r.stdout)
	}
	if sum.Story != "rw" || sum.Acquisitions != 0 {
		t.Errorf("summary of --story rw: %+v", sum)
	}
	checkKindsPhases(t, locker.Capabilities{Name: "memory", Shared: true, Permits: true, FIFO: true}, sum)
	if sem := sum.Semaphore; sem.MostHeld != sem.Limit || sem.Waited != 1 {
		t.Errorf("on memory, the semaphore's permits all held at once and one client waiting: %+v", sem)
	}
	// r1, r2, W, then r1 again: the writer's fence above both readers',
	// the returning reader's above the writer's.
	if f := sum.ReadWrite.Fences; len(f) != 4 || !slices.IsSorted(f) || f[0] == f[1] || f[2] == f[3] {
		t.Errorf("read/write fences %v, want 4 increasing in grant order", f)
	}
	// The semaphore's holders are granted together and report in any
	// order: their fences are 4 distinct ones, all after the read/write
	// story's.
	f := slices.Clone(sum.Semaphore.Fences)
	slices.Sort(f)
	if len(f) != 4 || len(slices.Compact(slices.Clone(f))) != 4 || f[0] <= sum.ReadWrite.Fences[3] {
		t.Errorf("semaphore fences %v, want 4 distinct ones, after the read/write ones", sum.Semaphore.Fences)
	}
}

// TestDemoStoryFlag: an unknown --story is refused; --story fencing
// tells phases 1 to 3 only.
func TestDemoStoryFlag(t *testing.T) {
	t.Parallel()
	wantCode(t, runApp(t, nil, "demo", "--story", "epic"), exitError, `--story "epic": want fencing, rw or all`)
	r := runApp(t, nil, "demo", "--story", "fencing", "--workers", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "== 3. A crashed holder") || strings.Contains(r.stdout, "== 4.") || strings.Contains(r.stdout, "readers together") {
		t.Errorf("--story fencing: exit %d:\n%s", r.code, r.stdout)
	}
}

// TestSummaryBroken: the demo fails (exit 1) on what breaks a rule the
// backend claims, and only on that.
func TestSummaryBroken(t *testing.T) {
	for _, tc := range []struct {
		name string
		sum  summary
		want string // "" for nothing broken
	}{
		{"fencing held", summary{Fencing: true, StaleRejected: 1}, ""},
		{"stale accepted with fencing", summary{Fencing: true, StaleAccepted: 1}, "accepted 1 stale write"},
		{"stale accepted without fencing", summary{StaleAccepted: 1}, ""},
		{"rw story ignores fencing counts", summary{Story: storyKinds, Fencing: true, StaleAccepted: 1}, ""},
		{"writer beside a reader", summary{ReadWrite: &rwSummary{Violations: 1}}, "write lock beside another holder"},
		{"overtaken on FIFO", summary{ReadWrite: &rwSummary{FIFO: true, Overtaken: 1}}, "claims FIFO, yet 1 reader"},
		{"overtaken without a queue", summary{ReadWrite: &rwSummary{Overtaken: 2}}, ""},
		{"permits beyond the limit", summary{Semaphore: &semSummary{Limit: 2, Violations: 1}}, "beyond the semaphore's limit of 2"},
	} {
		got := tc.sum.broken()
		if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s: broken() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBookCountsViolations: the story's book of holders flags a grant
// that the kinds' rules forbid, and only those.
func TestBookCountsViolations(t *testing.T) {
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	lock, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	sem := backend.Claim{Kind: backend.Permit, Limit: 2, Weight: 1}
	for _, tc := range []struct {
		name   string
		claims []backend.Claim
		bad    int
	}{
		{"readers together", []backend.Claim{sharedClaim, sharedClaim, sharedClaim}, 0},
		{"a writer beside a reader", []backend.Claim{sharedClaim, exclusiveClaim}, 1},
		{"a reader beside a writer", []backend.Claim{exclusiveClaim, sharedClaim}, 1},
		{"two writers", []backend.Claim{exclusiveClaim, exclusiveClaim}, 1},
		{"a semaphore at its limit", []backend.Claim{sem, sem}, 0},
		{"a permit beyond the limit", []backend.Claim{sem, sem, sem}, 1},
	} {
		bk := newBook()
		for i, c := range tc.claims {
			bk.grant(fmt.Sprint(i), c, lock)
		}
		if bk.bad != tc.bad {
			t.Errorf("%s: %d violations, want %d", tc.name, bk.bad, tc.bad)
		}
	}
}
