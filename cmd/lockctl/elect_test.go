//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// electScript records its entry, with the LOCKER_* variables lockctl
// elect gave it, in $LOG, holds until the file $GO exists, and records
// its exit (holdScript's protocol, with the term and the value).
const electScript = `echo "enter $ID key=$LOCKER_KEY token=$LOCKER_TOKEN fence=$LOCKER_FENCE term=$LOCKER_TERM value=$LOCKER_VALUE" >> "$LOG"
while [ ! -e "$GO" ]; do sleep 0.02; done
echo "exit $ID" >> "$LOG"`

// storesValues reports whether the backend at url stores values with its
// holds (Capabilities.MaxValueLen), as lockctl elect --value needs.
func storesValues(t *testing.T, url string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := locker.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Capabilities().MaxValueLen > 0
}

// TestElect: on every server backend, lockctl elect runs its command
// while it leads, with the term and the value in its environment;
// lockctl leader shows that leader; a second elect waits as a standby
// (and one bounded by --wait gives up, 124), and leads once the first
// command ends and its lockctl resigns, with a larger term; then no one
// leads. A backend that stores no values refuses --value (125).
func TestElect(t *testing.T) {
	t.Parallel() // waits for servers, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		dir := t.TempDir()
		logPath, goPath := filepath.Join(dir, "log"), filepath.Join(dir, "go")
		name := testKey(t)
		env := func(id string) []string {
			return testEnv(t, "LOCKER_URL="+url, "ID="+id, "LOG="+logPath, "GO="+goPath)
		}
		valued := storesValues(t, url)
		elect := func(id string, flags ...string) []string {
			if valued {
				flags = append(flags, "--value", "host-"+id)
			}
			return append(append([]string{"elect"}, flags...), name, "--", "sh", "-c", electScript)
		}
		if !valued {
			wantCode(t, runLockctl(t, env("x"), "elect", "--value", "v", name, "--", "true"), exitError,
				"--value: backend "+s.name+" stores no values")
		}

		a := start(t, env("a"), elect("a")...)
		waitFor(t, 30*time.Second, "a leads", func() bool { return len(readLines(t, logPath)) == 1 })
		va := electVars(t, readLines(t, logPath)[0])
		checkLeader(t, env("x"), name, va, s, valued)

		b := start(t, env("b"), elect("b", "-v")...)
		waitFor(t, 30*time.Second, "b waits to lead", func() bool { return strings.Contains(b.stderr.String(), "is led by someone else") })
		wantCode(t, runLockctl(t, env("c"), elect("c", "--wait", "200ms")...), exitNotAcquired,
			fmt.Sprintf("not elected to lead %q within --wait 200ms", name))

		if err := os.WriteFile(goPath, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, p := range []*proc{a, b} {
			if code := p.wait(t, time.Minute); code != 0 {
				t.Errorf("exit code %d; stderr:\n%s", code, p.stderr.String())
			}
		}
		if !strings.Contains(b.stderr.String(), fmt.Sprintf("lockctl: resigned %q", name)) {
			t.Errorf("b -v does not say it resigned:\n%s", b.stderr.String())
		}
		lines := readLines(t, logPath)
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "enter a ") || lines[1] != "exit a" || !strings.HasPrefix(lines[2], "enter b ") {
			t.Fatalf("the leaders overlapped or one is missing; the log:\n%s", strings.Join(lines, "\n"))
		}
		vb := electVars(t, lines[2])
		if s.fencing {
			ta, _ := strconv.ParseUint(va["term"], 10, 64)
			tb, err := strconv.ParseUint(vb["term"], 10, 64)
			if err != nil || tb <= ta {
				t.Errorf("LOCKER_TERM %q, then %q: want larger terms", va["term"], vb["term"])
			}
		}
		r := runLockctl(t, env("x"), "leader", name)
		if r.code != 0 || !regexp.MustCompile(`(?m)^leader +no leader$`).MatchString(r.stdout) {
			t.Errorf("leader after both resigned: exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}

		// A leadership freed by force is lost: the command is stopped, and
		// lockctl exits 122. A short TTL, so that a backend that learns of
		// it at the next refresh does so within a second.
		d := start(t, env("d"), "elect", "--ttl", "3s", "--grace", "1s", name, "--", "sh", "-c", `echo leads >> "$LOG.d"; exec sleep 600`)
		waitFor(t, 30*time.Second, "d leads", func() bool { return len(readLines(t, logPath+".d")) == 1 })
		wantCode(t, runLockctl(t, env("x"), "release", "--force", "--yes", name), exitOK)
		if code := d.wait(t, time.Minute); code != exitLockLost || !strings.Contains(d.stderr.String(), fmt.Sprintf("leadership of %q lost while the command ran", name)) {
			t.Errorf("a leader whose leadership was freed by force: exit %d, want %d; stderr:\n%s", code, exitLockLost, d.stderr.String())
		}
	})
}

// electVars parses electScript's entry line, checks that LOCKER_TERM is
// LOCKER_FENCE (a number where the backend fences, empty on Redlock), and
// returns the variables.
func electVars(t *testing.T, line string) map[string]string {
	t.Helper()
	v := lockVars(t, line)
	if v["term"] != v["fence"] || v["key"] == "" || v["token"] == "" {
		t.Errorf("LOCKER_TERM %q, LOCKER_FENCE %q, LOCKER_KEY %q, LOCKER_TOKEN %q: want the term twice, a key and a token", v["term"], v["fence"], v["key"], v["token"])
	}
	return v
}

// checkLeader checks that lockctl leader --json shows the leader whose
// variables are v: its term where the backend fences, none on Redlock;
// its token where the backend stores tokens; its value where values are
// stored.
func checkLeader(t *testing.T, env []string, name string, v map[string]string, s server, valued bool) {
	t.Helper()
	r := runLockctl(t, env, "leader", "--json", name)
	var out leaderOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil {
		t.Fatalf("leader --json: exit %d, %v\n%s\nstderr:\n%s", r.code, err, r.stdout, r.stderr)
	}
	term := ""
	if out.Term != nil {
		term = strconv.FormatUint(*out.Term, 10)
	}
	switch {
	case !out.Leader || out.Name != name || out.Backend != s.name:
		t.Errorf("leader --json: %+v; want %s leading %q", out, s.name, name)
	case term != v["term"]:
		t.Errorf("leader's term %q, the leader's LOCKER_TERM %q", term, v["term"])
	case out.Token != "" && out.Token != v["token"]:
		t.Errorf("leader's token %q, the leader's LOCKER_TOKEN %q", out.Token, v["token"])
	case valued && (out.Value != v["value"] || v["value"] == ""):
		t.Errorf("leader's value %q, the leader's LOCKER_VALUE %q", out.Value, v["value"])
	}
}

// memElection is an election on a memory store of its own (memory://name),
// which lockctl leader and inspect in this process open too.
func memElection(t *testing.T) (url, name string, l locker.Locker) {
	t.Helper()
	url = fmt.Sprintf("memory://lockctl-leader-%d", time.Now().UnixNano())
	l, err := locker.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return url, "jobs/primary", l
}

// TestLeaderAndInspect: lockctl leader says "no leader" of an election no
// one leads, then shows the leader's value, term and token, as text and
// JSON; inspect shows the value of the hold; a value that is not UTF-8
// comes in base64 in JSON and quoted in text.
func TestLeaderAndInspect(t *testing.T) {
	t.Parallel()
	url, name, l := memElection(t)
	r := runApp(t, nil, "leader", "--url", url, name)
	if r.code != 0 || !regexp.MustCompile(`(?m)^leader +no leader$`).MatchString(r.stdout) {
		t.Errorf("leader of no one: exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = runApp(t, nil, "leader", "--url", url, "--json", name)
	if r.code != 0 || !strings.Contains(r.stdout, `"leader": false`) {
		t.Errorf("leader --json of no one: exit %d, stdout:\n%s", r.code, r.stdout)
	}

	ctx := context.Background()
	lead, err := locker.NewElection(l, name).Campaign(ctx, []byte("host-a:8080"))
	if err != nil {
		t.Fatal(err)
	}
	term, _ := lead.Fence()
	var out leaderOutput
	r = runApp(t, nil, "leader", "--url", url, "--json", name)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("leader --json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if !out.Leader || out.Value != "host-a:8080" || out.Term == nil || *out.Term != term || out.Token != lead.Token() || out.Backend != "memory" {
		t.Errorf("leader --json: %+v; want host-a:8080, term %d, token %s", out, term, lead.Token())
	}
	r = runApp(t, nil, "leader", "--url", url, name)
	for _, re := range []string{`(?m)^leader +yes$`, `(?m)^value +host-a:8080$`, fmt.Sprintf(`(?m)^term +%d$`, term), `(?m)^token +` + lead.Token() + `$`} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("leader's text does not match %s:\n%s", re, r.stdout)
		}
	}
	var in inspectOutput
	r = runApp(t, nil, "inspect", "--url", url, "--json", name)
	if err := json.Unmarshal([]byte(r.stdout), &in); err != nil || r.code != 0 {
		t.Fatalf("inspect --json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if in.Value != "host-a:8080" || len(in.Holds) != 1 || in.Holds[0].Value != "host-a:8080" {
		t.Errorf("inspect --json: value %q, holds %+v; want host-a:8080", in.Value, in.Holds)
	}
	if r = runApp(t, nil, "inspect", "--url", url, name); !regexp.MustCompile(`(?m)^value +host-a:8080$`).MatchString(r.stdout) {
		t.Errorf("inspect's text does not show the value:\n%s", r.stdout)
	}

	if err := lead.SetValue(ctx, []byte{0xff, 'x', 0}); err != nil {
		t.Fatal(err)
	}
	r = runApp(t, nil, "leader", "--url", url, "--json", name)
	if !strings.Contains(r.stdout, `"value_base64": "/3gA"`) || strings.Contains(r.stdout, `"value":`) {
		t.Errorf("leader --json of a binary value:\n%s", r.stdout)
	}
	if r = runApp(t, nil, "inspect", "--url", url, name); !strings.Contains(r.stdout, `"\xffx\x00"`) {
		t.Errorf("inspect's text of a binary value:\n%s", r.stdout)
	}
}

// TestLeaderWatch: lockctl leader --watch --json says once that no one
// leads, then prints each leader and each new value in order, one JSON
// line each, and exits 0 when it is stopped.
func TestLeaderWatch(t *testing.T) {
	t.Parallel()
	url, name, l := memElection(t)
	var stdout, stderr testenv.SyncBuffer
	a := &app{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- execute(ctx, a, []string{"leader", "--watch", "--json", "--url", url, name}) }()
	lines := func() []leaderOutput {
		var outs []leaderOutput
		for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
			var o leaderOutput
			if line != "" && json.Unmarshal([]byte(line), &o) == nil {
				outs = append(outs, o)
			}
		}
		return outs
	}
	seen := func(n int) {
		t.Helper()
		waitFor(t, 30*time.Second, fmt.Sprintf("line %d of the watch", n), func() bool { return len(lines()) >= n })
	}
	seen(1)
	first, err := locker.NewElection(l, name).Campaign(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	seen(2)
	if err := first.SetValue(ctx, []byte("a2")); err != nil { // Proclaim
		t.Fatal(err)
	}
	seen(3)
	if err := first.Release(ctx); err != nil { // Resign
		t.Fatal(err)
	}
	second, err := locker.NewElection(l, name).Campaign(ctx, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	seen(4)
	cancel()
	if c := <-code; c != 0 {
		t.Errorf("leader --watch stopped: exit %d; stderr:\n%s", c, stderr.String())
	}
	got := lines()
	t1, _ := first.Fence()
	t2, _ := second.Fence()
	want := []struct {
		leader bool
		value  string
		term   uint64
	}{{false, "", 0}, {true, "a", t1}, {true, "a2", t1}, {true, "b", t2}}
	if len(got) != len(want) {
		t.Fatalf("the watch printed %d lines, want %d:\n%s", len(got), len(want), stdout.String())
	}
	for i, w := range want {
		g := got[i]
		if g.Leader != w.leader || g.Value != w.value || (w.leader && (g.Term == nil || *g.Term != w.term)) || g.At == nil {
			t.Errorf("line %d: %+v; want leader %v, value %q, term %d, stamped", i+1, g, w.leader, w.value, w.term)
		}
	}
}

// TestElectUsageErrors: mistakes on lockctl elect's and lockctl leader's
// command lines exit 125 with a message that names them, before anything
// is contacted.
func TestElectUsageErrors(t *testing.T) {
	const nowhere = "redis://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"elect"}, "missing NAME and COMMAND (want: lockctl elect [flags] NAME -- COMMAND [ARGS...])"},
		{[]string{"elect", "--url", nowhere, "n", "ls"}, "missing -- between NAME and COMMAND"},
		{[]string{"elect", "--url", nowhere, "a", "b", "--", "ls"}, `want one NAME before --, got 2`},
		{[]string{"elect", "--url", nowhere, "--ttl", "0", "n", "--", "ls"}, "--ttl 0s: must be positive"},
		{[]string{"elect", "--url", nowhere, "--no-wait", "n", "--", "ls"}, "unknown flag: --no-wait"},
		{[]string{"elect", "--url", "memory://", "n", "--", "ls"}, "so lockctl elect would always lead"},
		{[]string{"elect", "--url", nowhere, "n", "--", "no-such-command-anywhere"}, "command not found"},
		{[]string{"leader"}, "accepts 1 arg(s), received 0"},
		{[]string{"leader", "--url", "memory://", ""}, "key is empty"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runApp(t, nil, tc.args...)
			want := exitError
			if strings.Contains(tc.want, "not found") {
				want = exitNotFound
			}
			wantCode(t, r, want, "lockctl: ", tc.want)
		})
	}
}
