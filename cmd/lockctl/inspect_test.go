package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestInspectAndForceRelease: on every server backend, inspect shows the
// holder a lockctl run got (its token, and its fence where the backend
// mints one); release --force asks for --force and, without a terminal,
// --yes, then frees the key, so that the run's lock is lost (122); a
// second one finds nothing to release.
func TestInspectAndForceRelease(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		logPath, goPath, key, env := holderEnv(t, url)

		r := runLockctl(t, env, "inspect", "--json", key)
		wantCode(t, r, exitOK)
		var free inspectOutput
		if err := json.Unmarshal([]byte(r.stdout), &free); err != nil || free.Held {
			t.Fatalf("inspect of a free key: %v, %+v\n%s", err, free, r.stdout)
		}

		// A short TTL, so that the holder whose lock is freed learns of
		// it at its next refresh, a third of the TTL later.
		a := start(t, env, "run", "--ttl", "3s", "--grace", "1s", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "a enters", func() bool { return len(readLines(t, logPath)) == 1 })
		vars := lockVars(t, readLines(t, logPath)[0])

		r = runLockctl(t, env, "inspect", "--json", key)
		wantCode(t, r, exitOK)
		var held inspectOutput
		if err := json.Unmarshal([]byte(r.stdout), &held); err != nil {
			t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
		}
		// ZooKeeper and etcd keep no token on the server: their holder
		// is named by its node or entry (detail) and its fence.
		if !held.Held || (held.Token != "" && held.Token != vars["token"]) || (held.Token == "" && len(held.Detail) == 0) {
			t.Errorf("inspect of the held key: held %v, token %q, detail %v; the holder's token is %q", held.Held, held.Token, held.Detail, vars["token"])
		}
		if s.fencing && (held.Fence == nil || vars["fence"] == "" || strings.TrimSpace(vars["fence"]) != jsonNumber(*held.Fence)) {
			t.Errorf("inspect's fence %v, the holder's LOCKER_FENCE %q", held.Fence, vars["fence"])
		}
		r = runLockctl(t, env, "inspect", key)
		wantCode(t, r, exitOK)
		if !regexp.MustCompile(`(?m)^held +yes$`).MatchString(r.stdout) || (held.Token != "" && !strings.Contains(r.stdout, held.Token)) {
			t.Errorf("inspect's table does not show the holder:\n%s", r.stdout)
		}
		wantDistinctRows(t, r.stdout)

		wantCode(t, runLockctl(t, env, "release", key), exitError, "release takes --force")
		wantCode(t, runLockctl(t, env, "release", "--force", key), exitError, "add --yes")
		r = runLockctl(t, env, "release", "--force", "--yes", "--json", key)
		wantCode(t, r, exitOK)
		var rel releaseOutput
		if err := json.Unmarshal([]byte(r.stdout), &rel); err != nil || !rel.Released {
			t.Fatalf("release --force: %v, %+v\n%s", err, rel, r.stdout)
		}
		if code := a.wait(t, time.Minute); code != exitLockLost {
			t.Errorf("the run whose lock was freed by force: exit %d, want %d; stderr:\n%s", code, exitLockLost, a.stderr.String())
		}
		r = runLockctl(t, env, "release", "--force", "--yes", key)
		wantCode(t, r, exitOK)
		if !strings.Contains(r.stdout, "nothing to release") {
			t.Errorf("release --force of a free key says:\n%s", r.stdout)
		}
		os.WriteFile(goPath, nil, 0o600)
	})
}

// wantDistinctRows checks that no two rows of inspect's table (the lines
// before its first blank line) have the same label.
func wantDistinctRows(t *testing.T, text string) {
	t.Helper()
	table, _, _ := strings.Cut(text, "\n\n")
	seen := map[string]bool{}
	for _, line := range strings.Split(table, "\n") {
		label, _, _ := strings.Cut(line, "  ")
		if seen[label] {
			t.Errorf("inspect's table has two rows labelled %q:\n%s", label, text)
		}
		seen[label] = true
	}
}

func jsonNumber(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestInspectZooKeeperTTL: inspect from a process other than the holder's
// shows what the ZooKeeper server knows of the holder's lock: its
// session's timeout, which is the lock's TTL.
func TestInspectZooKeeperTTL(t *testing.T) {
	t.Parallel() // waits for servers, as the others do
	url := serverURL(t, "LOCKER_TEST_ZK_URL")
	logPath, goPath, key, env := holderEnv(t, url)
	a := start(t, env, "run", "--ttl", "3s", key, "--", "sh", "-c", holdScript)
	defer func() {
		os.WriteFile(goPath, nil, 0o600)
		a.wait(t, time.Minute)
	}()
	waitFor(t, 30*time.Second, "a enters", func() bool { return len(readLines(t, logPath)) == 1 })
	r := runLockctl(t, env, "inspect", "--json", key)
	wantCode(t, r, exitOK)
	var out inspectOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !out.Held {
		t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
	}
	if out.Detail["session timeout"] != "3s" {
		t.Errorf("the holder's session timeout is %q in the detail, want its TTL 3s:\n%s", out.Detail["session timeout"], r.stdout)
	}
	r = runLockctl(t, env, "inspect", key)
	wantCode(t, r, exitOK)
	if !regexp.MustCompile(`(?m)^ttl +.*3s`).MatchString(r.stdout) {
		t.Errorf("the ttl line does not show the session's timeout:\n%s", r.stdout)
	}
}
