package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/internal/testenv"
)

// startRedis starts a redis-server of the test's own (internal/testenv,
// which the library's tests use too) and returns its address.
func startRedis(t *testing.T, args ...string) string {
	t.Helper()
	return testenv.StartRedis(t, args...).Addr()
}

// TestDoctor: doctor passes the dev servers of every backend, fails a
// Redis that evicts keys (exit 1, naming the policy and the fix), warns
// on a replica (exit 0, or 1 with --strict), and fails a PostgreSQL role
// that can neither find nor create the lock tables (naming the SQL).
func TestDoctor(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	t.Run("dev servers", func(t *testing.T) {
		forEachServer(t, func(t *testing.T, s server, url string) {
			r := runLockctl(t, testEnv(t), "doctor", "--json", "--url", url)
			wantCode(t, r, exitOK)
			var out doctorOutput
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Findings) == 0 || out.Worst == "fail" {
				t.Fatalf("doctor --json: %v, worst %q, %d findings\n%s", err, out.Worst, len(out.Findings), r.stdout)
			}
		})
	})
	t.Run("evicting redis", func(t *testing.T) {
		addr := startRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
		r := runLockctl(t, testEnv(t), "doctor", "--url", "redis://"+addr)
		wantCode(t, r, exitChecksFailed)
		if !strings.Contains(r.stdout, "FAIL    maxmemory-policy") && !strings.Contains(r.stdout, "FAIL maxmemory-policy") {
			t.Errorf("doctor does not fail the eviction policy:\n%s", r.stdout)
		}
		if !strings.Contains(r.stdout, "allkeys-lru") || !strings.Contains(r.stdout, "fix: ") {
			t.Errorf("doctor does not name the policy and the fix:\n%s", r.stdout)
		}
	})
	t.Run("replica", func(t *testing.T) {
		master := startRedis(t)
		host, port, _ := net.SplitHostPort(master)
		replica := startRedis(t, "--replicaof", host, port)
		r := runLockctl(t, testEnv(t), "doctor", "--json", "--url", "redis://"+replica)
		var out doctorOutput
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
		}
		warned := false
		for _, f := range out.Findings {
			if f.Check == "replication" && f.Status.String() == "warn" {
				warned = true
			}
		}
		if !warned {
			t.Errorf("doctor on a replica: no replication warning in %+v", out.Findings)
		}
		if out.Worst == "fail" {
			// A replica refuses the writes a lock needs: whatever failed
			// must say why, and the exit code must follow.
			wantCode(t, r, exitChecksFailed)
		} else {
			wantCode(t, r, exitOK)
			wantCode(t, runLockctl(t, testEnv(t), "doctor", "--strict", "--url", "redis://"+replica), exitChecksFailed)
		}
	})
	t.Run("postgres role that may not create the schema", func(t *testing.T) {
		u, err := url.Parse(serverURL(t, "LOCKER_TEST_POSTGRES_URL"))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User("locker_noddl")
		schema := fmt.Sprintf("lockctl_doctor_%d", time.Now().UnixNano())
		q := u.Query()
		q.Set("schema", schema)
		u.RawQuery = q.Encode()
		r := runLockctl(t, testEnv(t), "doctor", "--url", u.String())
		wantCode(t, r, exitChecksFailed)
		if !regexp.MustCompile(`(?m)^FAIL +schema `).MatchString(r.stdout) || !strings.Contains(r.stdout, "fix: have an administrator run the SQL that `lockctl schema --schema "+schema+"` prints") {
			t.Errorf("doctor does not fail the schema check, naming the SQL to run:\n%s", r.stdout)
		}
	})
	t.Run("bad URL", func(t *testing.T) {
		r := runLockctl(t, testEnv(t), "doctor", "--url", "redis://127.0.0.1:1?nosuch=1")
		wantCode(t, r, exitError, "nosuch")
	})
}

// TestDoctorJSONNames: doctor --json names every field in lower case, the
// findings' as well as the top level's.
func TestDoctorJSONNames(t *testing.T) {
	r := runLockctl(t, testEnv(t), "doctor", "--json", "--url", "memory://doctor-json")
	wantCode(t, r, exitOK)
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	fs, _ := out["findings"].([]any)
	if len(fs) == 0 {
		t.Fatalf("no findings:\n%s", r.stdout)
	}
	for k := range out {
		if k != strings.ToLower(k) {
			t.Errorf("top-level field %q is not lower-case", k)
		}
	}
	for _, f := range fs {
		for k := range f.(map[string]any) {
			if k != strings.ToLower(k) {
				t.Errorf("finding field %q is not lower-case:\n%s", k, r.stdout)
			}
		}
	}
}

// TestDoctorGroupsNodes: on Redlock, a finding every node shares (the dev
// servers' persistence warning) is one row naming the nodes, and the
// target column stays narrow however many nodes the URL names.
func TestDoctorGroupsNodes(t *testing.T) {
	t.Parallel() // waits for servers, as the others do
	url := serverURL(t, "LOCKER_TEST_REDLOCK_URL")
	r := runLockctl(t, testEnv(t), "doctor", "--url", url)
	table, _, _ := strings.Cut(r.stdout, "\n\n"+"WARN") // the table, before the details
	var header string
	rows := 0
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "STATUS") {
			header = l
		}
		if strings.Contains(l, " persistence ") {
			rows++
		}
	}
	if rows != 1 {
		t.Errorf("%d persistence rows, want one for all the nodes:\n%s", rows, r.stdout)
	}
	if w := strings.Index(header, "FOUND") - strings.Index(header, "TARGET"); w > 30 {
		t.Errorf("the target column is %d characters wide:\n%s", w, r.stdout)
	}
	hosts := strings.Split(strings.TrimPrefix(strings.SplitN(url, "?", 2)[0], "redlock://"), ",")
	if !strings.Contains(r.stdout, "persistence on "+strings.Join(hosts, ", ")+":") {
		t.Errorf("the persistence warning does not name the nodes %v:\n%s", hosts, r.stdout)
	}
	r = runLockctl(t, testEnv(t), "doctor", "--json", "--url", url)
	var out struct {
		Findings []struct {
			Check   string   `json:"check"`
			Targets []string `json:"targets"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r.stdout)
	}
	n := 0
	for _, f := range out.Findings {
		if f.Check == "persistence" {
			n++
			if len(f.Targets) != len(hosts) {
				t.Errorf("the persistence finding's targets %q, want the %d nodes", f.Targets, len(hosts))
			}
		}
	}
	if n != 1 {
		t.Errorf("%d persistence findings in JSON, want one:\n%s", n, r.stdout)
	}
}
