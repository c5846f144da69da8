package main

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: lockctl check passes against every deployment the dev
// servers offer, each way a user can name one: memory://name, every server
// backend, a ?prefix=, rediss:// and etcds:// with the test certificates,
// the Redis Cluster. Its reports say what ran against what.
func TestCheck(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
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
		r := runLockctl(t, testEnv(t), "check", "--url", url, "--json", jsonPath, "--junit", junitPath, "--markdown", mdPath)
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
