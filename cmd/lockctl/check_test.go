package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
)

// TestCheck: lockctl check passes against every deployment the dev
// servers offer, each way a user can name one: memory://name, every server
// backend, a ?prefix=, rediss:// and etcds:// with the test certificates,
// the Redis Cluster. Its reports say what ran against what.
func TestCheck(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	takeTurn(t)
	targets := []struct{ name, env, suffix string }{
		{"memory-name", "", ""},
		{"redis", "LOCKER_TEST_REDIS_URL", ""},
		{"redis-prefix", "LOCKER_TEST_REDIS_URL", "?prefix=team-a/"},
		{"redis-tls", "LOCKER_TEST_REDIS_TLS_URL", ""},
		{"redis-cluster", "LOCKER_TEST_REDIS_CLUSTER_URL", ""},
		{"redlock", "LOCKER_TEST_REDLOCK_URL", ""},
		{"zookeeper", "LOCKER_TEST_ZK_URL", ""},
		{"etcd", "LOCKER_TEST_ETCD_URL", ""},
		{"etcd-tls", "LOCKER_TEST_ETCD_TLS_URL", ""},
		{"postgres", "LOCKER_TEST_POSTGRES_URL", ""},
	}
	names := make([]string, len(targets))
	for i, tg := range targets {
		names[i] = tg.name
	}
	concurrently(t, names, func(t *testing.T, i int) {
		tg := targets[i]
		url := "memory://check-test"
		if tg.env != "" {
			url = serverURL(t, tg.env)
		}
		if tg.suffix != "" {
			sep := "?"
			if strings.Contains(url, "?") {
				sep = "&"
			}
			url += sep + strings.TrimPrefix(tg.suffix, "?")
		}
		dir := t.TempDir()
		jsonPath, junitPath, mdPath := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.xml"), filepath.Join(dir, "r.md")
		// Ten suites at once on a loaded machine: a server's expiry can
		// run late by more than the default slack (etcd's lease revocation
		// did, by over a second). The backends' own tests keep the default.
		r := runLockctl(t, testEnv(t), "check", "--url", url, "--slack", "3s", "--json-file", jsonPath, "--junit", junitPath, "--markdown", mdPath)
		if r.code != exitOK {
			t.Fatalf("check --url %s: exit %d\n%s\n%s", url, r.code, r.stdout, r.stderr)
		}
		var rep checkReport
		data, err := os.ReadFile(jsonPath)
		if err == nil {
			err = json.Unmarshal(data, &rep)
		}
		if err != nil {
			t.Fatalf("the JSON report: %v", err)
		}
		if rep.Failed != 0 || rep.Passed < 15 || rep.Passed+rep.Skipped != len(rep.Results) || rep.Backend == "" ||
			!strings.HasPrefix(rep.KeyPrefix, "conformance/") || rep.Library == "" || rep.Capabilities == "" {
			t.Errorf("report: %d passed, %d failed, %d skipped of %d; backend %q, keys %q, library %q",
				rep.Passed, rep.Failed, rep.Skipped, len(rep.Results), rep.Backend, rep.KeyPrefix, rep.Library)
		}
		if strings.Contains(rep.URL, "secret") {
			t.Errorf("the report shows the password: %s", rep.URL)
		}
		// Live progress: a line per case, each with its result.
		for _, res := range rep.Results {
			if !strings.Contains(r.stdout, "] "+res.Name) {
				t.Errorf("no progress line for %s:\n%s", res.Name, r.stdout)
				break
			}
		}
		var ju junitSuites
		if data, err := os.ReadFile(junitPath); err != nil || xml.Unmarshal(data, &ju) != nil || len(ju.Suites) != 1 || len(ju.Suites[0].Cases) != len(rep.Results) {
			t.Errorf("the JUnit report: %v, %+v", err, ju)
		}
		if md, err := os.ReadFile(mdPath); err != nil || !strings.Contains(string(md), "| acquire-release | pass |") {
			t.Errorf("the Markdown report: %v\n%s", err, md)
		}
	})
}

// TestCheckBrokenBackend: check fails (exit 1) against a backend whose
// Release does not check the owner (broken://, compiled in with the build
// tag lockctl_broken), and its reports name the rule that broke.
func TestCheckBrokenBackend(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	bin := filepath.Join(t.TempDir(), "lockctl-broken")
	if out, err := exec.Command("go", "build", "-tags", "lockctl_broken", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building lockctl with the broken backend: %v\n%s", err, out)
	}
	junitPath := filepath.Join(t.TempDir(), "r.xml")
	cmd := exec.Command(bin, "check", "--url", "broken://x", "--cases", "stale-owner|acquire-release", "--junit", junitPath)
	cmd.Env = testEnv(t)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitChecksFailed {
		t.Fatalf("check against the broken backend: %v, want exit %d\n%s", err, exitChecksFailed, out)
	}
	if !strings.Contains(string(out), "stale-owner") || !strings.Contains(string(out), "1 passed, 1 failed") {
		t.Errorf("the output does not name the broken rule:\n%s", out)
	}
	var ju junitSuites
	data, err := os.ReadFile(junitPath)
	if err != nil || xml.Unmarshal(data, &ju) != nil || len(ju.Suites) != 1 {
		t.Fatalf("the JUnit report: %v\n%s", err, data)
	}
	s := ju.Suites[0]
	if s.Tests != 2 || s.Failures != 1 {
		t.Errorf("JUnit: %d tests, %d failures; want 2 and 1", s.Tests, s.Failures)
	}
	for _, c := range s.Cases {
		if (c.Name == "stale-owner") != (c.Failure != nil) {
			t.Errorf("JUnit case %s: failure %+v", c.Name, c.Failure)
		}
	}
}

// TestCheckUnreachable: check against a server that is down says what
// the library says (connection refused), not what its own proxies, which
// accept a connection and then close it, would make of it.
func TestCheckUnreachable(t *testing.T) {
	t.Parallel() // etcd's Open waits seconds for an answer
	// Port 1: a port from the ephemeral range, free a moment ago, can be
	// the source port the kernel picks for a client's own connection to
	// it, which then connects to itself.
	const down = "127.0.0.1:1"
	for _, scheme := range []string{"redis", "zookeeper", "etcd"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			url := scheme + "://" + down
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := locker.Open(ctx, url)
			if err == nil {
				l.Close()
				t.Fatalf("Open(%s) succeeded: nothing listens there, the case is wrong", url)
			}
			r := runLockctl(t, testEnv(t), "check", "--url", url)
			wantCode(t, r, exitError, err.Error())
			if strings.Contains(r.stderr, "EOF") {
				t.Errorf("check blames a closed connection:\n%s", r.stderr)
			}
		})
	}
}

// TestCheckJSON: --json means JSON on standard output, as on every other
// command (the progress then goes to standard error); --json-file writes
// the same report to a file. Progress lines estimate the time left.
func TestCheckJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "r.json")
	r := runLockctl(t, testEnv(t), "check", "--json", "--url", "memory://check-json", "--cases", "acquire-release|double-release|independent-keys", "--json-file", file)
	wantCode(t, r, exitOK)
	var rep checkReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Results) != 3 || rep.Passed != 3 {
		t.Fatalf("check --json: %v, %+v\nstdout:\n%s\nstderr:\n%s", err, rep, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(file)
	var fromFile checkReport
	if err == nil {
		err = json.Unmarshal(data, &fromFile)
	}
	if err != nil || fromFile.KeyPrefix != rep.KeyPrefix {
		t.Errorf("--json-file: %v, key prefix %q, want the report of standard output's run (%q)", err, fromFile.KeyPrefix, rep.KeyPrefix)
	}
	if !strings.Contains(r.stderr, "] acquire-release") {
		t.Errorf("no progress on standard error:\n%s", r.stderr)
	}
	// After the first case, each line estimates what is left; the last
	// says the run is done.
	lines := regexp.MustCompile(`(?m)^\[ ?\d+/3\] .*$`).FindAllString(r.stderr, -1)
	if len(lines) != 3 {
		t.Fatalf("%d progress lines, want 3:\n%s", len(lines), r.stderr)
	}
	for _, l := range lines[:2] {
		if !regexp.MustCompile(`about \S+ left`).MatchString(l) {
			t.Errorf("progress line %q has no estimate of the time left", l)
		}
	}
	r = runLockctl(t, testEnv(t), "check", "--list", "--json", "--cases", "^fencing$")
	var cases []map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &cases); err != nil || len(cases) != 1 || cases[0]["name"] != "fencing" || cases[0]["rule"] == "" {
		t.Errorf("check --list --json: %v\n%s", err, r.stdout)
	}
}

// TestTimeLeft: the estimate is the cases left at the mean pace so far.
func TestTimeLeft(t *testing.T) {
	for _, tc := range []struct {
		elapsed     time.Duration
		done, total int
		want        string
	}{
		{10 * time.Second, 1, 3, "about 20s left"},
		{10 * time.Second, 2, 3, "about 5s left"},
		{100 * time.Millisecond, 1, 2, "about 1s left"},
		{time.Minute, 1, 24, "about 23m0s left"},
		{95 * time.Second, 3, 5, "about 1m0s left"},
		{time.Minute, 24, 24, "done"},
	} {
		if got := timeLeft(tc.elapsed, tc.done, tc.total); got != tc.want {
			t.Errorf("timeLeft(%v, %d, %d) = %q, want %q", tc.elapsed, tc.done, tc.total, got, tc.want)
		}
	}
}

// TestCheckSlack: --slack sets the harness's allowance; a negative one is
// refused before anything runs.
func TestCheckSlack(t *testing.T) {
	r := runLockctl(t, testEnv(t), "check", "--url", "memory://check-slack", "--slack", "-1s")
	wantCode(t, r, exitError, "--slack -1s: the allowance cannot be negative")
	r = runLockctl(t, testEnv(t), "check", "--url", "memory://check-slack", "--slack", "2s", "--cases", "^crashed-holder-expiry$")
	wantCode(t, r, exitOK)
}
