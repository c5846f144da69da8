package main

import (
	"encoding/json"
	"strings"
	"testing"
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
	if types["start"] != 1 || types["phase"] != 3 || types["summary"] != 1 || types["event"] < 10 {
		t.Errorf("lines by type %v, want 1 start, 3 phases, events, 1 summary", types)
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
	})
}
