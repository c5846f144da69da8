package main

import (
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/distlock/locker/internal/testenv"
)

// startRedis starts a redis-server of the test's own (internal/testenv,
// which the library's tests use too) and returns its address.
func startRedis(t *testing.T, args ...string) string {
	t.Helper()
	return testenv.StartRedis(t, args...).Addr()
}

// TestDoctor: doctor passes the dev servers of every backend, fails a
// Redis that evicts keys (exit 1, naming the policy and the fix), and
// warns on a replica (exit 0, or 1 with --strict).
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
	t.Run("bad URL", func(t *testing.T) {
		r := runLockctl(t, testEnv(t), "doctor", "--url", "redis://127.0.0.1:1?nosuch=1")
		wantCode(t, r, exitError, "nosuch")
	})
}
