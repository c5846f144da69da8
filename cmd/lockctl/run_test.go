//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker/conformance"
)

// holdScript records its entry, with the LOCKER_* variables lockctl gave
// it, in $LOG (appending: one write per line, so lines of two processes
// never mix), holds until the file $GO exists, and records its exit.
const holdScript = `echo "enter $ID key=$LOCKER_KEY token=$LOCKER_TOKEN fence=$LOCKER_FENCE" >> "$LOG"
while [ ! -e "$GO" ]; do sleep 0.02; done
echo "exit $ID" >> "$LOG"`

// TestRunExclusive: two lockctl run on one key never overlap, the
// LOCKER_* variables reach the command, and while the key is held
// --no-wait and an elapsed --wait exit 124.
func TestRunExclusive(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		dir := t.TempDir()
		logPath, goPath := filepath.Join(dir, "log"), filepath.Join(dir, "go")
		key := testKey(t)
		env := func(id string) []string {
			return testEnv(t, "LOCKER_URL="+url, "ID="+id, "LOG="+logPath, "GO="+goPath)
		}
		a := start(t, env("a"), "run", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "a enters", func() bool { return len(readLines(t, logPath)) == 1 })
		b := start(t, env("b"), "run", "-v", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "b waits for the lock", func() bool { return strings.Contains(b.stderr.String(), "is held by someone else; waiting") })

		wantCode(t, runLockctl(t, env("c"), "run", "--no-wait", key, "--", "sh", "-c", holdScript),
			exitNotAcquired, fmt.Sprintf("lock %q is held by someone else (--no-wait)", key))
		wantCode(t, runLockctl(t, env("d"), "run", "--wait", "200ms", key, "--", "sh", "-c", holdScript),
			exitNotAcquired, fmt.Sprintf("lock %q not acquired within --wait 200ms", key))
		if lines := readLines(t, logPath); len(lines) != 1 {
			t.Fatalf("while a holds the lock, the log shows %q", lines)
		}

		if err := os.WriteFile(goPath, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if code := a.wait(t, time.Minute); code != 0 {
			t.Errorf("a: exit code %d; stderr:\n%s", code, a.stderr.String())
		}
		if code := b.wait(t, time.Minute); code != 0 {
			t.Errorf("b: exit code %d; stderr:\n%s", code, b.stderr.String())
		}
		lines := readLines(t, logPath)
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "enter a ") || lines[1] != "exit a" ||
			!strings.HasPrefix(lines[2], "enter b ") || lines[3] != "exit b" {
			t.Fatalf("the runs overlapped or are missing; the log:\n%s", strings.Join(lines, "\n"))
		}
		va, vb := lockVars(t, lines[0]), lockVars(t, lines[2])
		for _, v := range []map[string]string{va, vb} {
			if v["key"] != key || v["token"] == "" {
				t.Errorf("LOCKER_KEY=%q LOCKER_TOKEN=%q, want %q and a token", v["key"], v["token"], key)
			}
		}
		if va["token"] == vb["token"] {
			t.Errorf("both acquisitions have token %q", va["token"])
		}
		if !s.fencing {
			if va["fence"] != "" || vb["fence"] != "" {
				t.Errorf("%s mints no fence, yet LOCKER_FENCE is %q then %q", s.name, va["fence"], vb["fence"])
			}
			return
		}
		fa, errA := strconv.ParseUint(va["fence"], 10, 64)
		fb, errB := strconv.ParseUint(vb["fence"], 10, 64)
		if errA != nil || errB != nil || fb <= fa {
			t.Errorf("LOCKER_FENCE %q then %q, want increasing numbers", va["fence"], vb["fence"])
		}
	})
}

// lockVars parses holdScript's entry line.
func lockVars(t *testing.T, line string) map[string]string {
	t.Helper()
	v := map[string]string{}
	for _, f := range strings.Fields(line)[2:] {
		name, val, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad entry line %q", line)
		}
		v[name] = val
	}
	return v
}

// TestRunLockLost: a lockctl cut off from its servers loses the lock; it
// sends the command SIGTERM, then SIGKILL after --grace to a command
// that ignores SIGTERM (and to the processes it started), and exits 122.
func TestRunLockLost(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	const (
		stubborn = `trap "" TERM
sleep 1000 & echo $! > "$PIDFILE"
echo started >> "$LOG"
wait`
		polite = `trap 'echo "got TERM" >> "$LOG"; exit 0' TERM
echo started >> "$LOG"
while :; do sleep 0.05; done`
	)
	cases := []struct {
		name, script string
		grace        string
		killed       bool // SIGTERM is ignored: SIGKILL is needed
	}{
		{"ignores-SIGTERM", stubborn, "1s", true},
		// A grace no loaded machine runs out of before sh runs its trap.
		{"ends-on-SIGTERM", polite, "1m", false},
	}
	concurrently(t, []string{cases[0].name, cases[1].name}, func(t *testing.T, i int) {
		tc := cases[i]
		forEachServer(t, func(t *testing.T, s server, url string) {
			proxied, proxies, err := conformance.ProxyURL(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				for _, p := range proxies {
					p.Close()
				}
			})
			dir := t.TempDir()
			logPath, pidPath := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
			p := start(t, testEnv(t, "LOG="+logPath, "PIDFILE="+pidPath),
				"run", "--url", proxied, "--ttl", "2s", "--grace", tc.grace, testKey(t), "--", "sh", "-c", tc.script)
			waitFor(t, 30*time.Second, "the command starts", func() bool { return len(readLines(t, logPath)) > 0 })
			for _, p := range proxies {
				p.Cut()
			}
			if code := p.wait(t, time.Minute); code != exitLockLost {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitLockLost, p.stderr.String())
			}
			stderr := p.stderr.String()
			if !strings.Contains(stderr, "lost while the command ran") {
				t.Errorf("stderr does not say the lock was lost:\n%s", stderr)
			}
			if got := strings.Contains(stderr, "sending SIGKILL"); got != tc.killed {
				t.Errorf("SIGKILL sent: %v, want %v; stderr:\n%s", got, tc.killed, stderr)
			}
			if tc.killed {
				// The command's own child went with it: it was in its
				// process group.
				pid, err := strconv.Atoi(strings.TrimSpace(strings.Join(readLines(t, pidPath), "")))
				if err != nil {
					t.Fatalf("pid file: %v", err)
				}
				waitFor(t, 10*time.Second, "the command's child is gone", func() bool { return !alive(pid) })
			} else if lines := readLines(t, logPath); len(lines) != 2 || lines[1] != "got TERM" {
				t.Errorf("the command's log %q, want it to end with got TERM", lines)
			}
		})
	})
}

// alive reports whether process pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err)
	}
	// pid (comm) state ...: the state follows the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) == 0 || fields[0] != "Z"
}

// TestRunExitStatus: lockctl exits with the command's code, or 128+N for
// a command killed by signal N; it forwards its signals to the command,
// and a signal while it waits for the lock stops the wait.
func TestRunExitStatus(t *testing.T) {
	url := serverURL(t, servers[0].env)
	env := testEnv(t, "LOCKER_URL="+url)
	key := testKey(t)
	wantCode(t, runLockctl(t, env, "run", key, "--", "sh", "-c", "exit 3"), 3)
	wantCode(t, runLockctl(t, env, "run", key, "--", "sh", "-c", "kill -TERM $$"), 128+int(syscall.SIGTERM))
	r := runLockctl(t, env, "run", key, "--", "sh", "-c", `echo "out:$LOCKER_KEY"; echo err >&2`)
	if r.code != 0 || r.stdout != "out:"+key+"\n" || r.stderr != "err\n" {
		t.Errorf("run passed through code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	t.Run("forwards SIGINT", func(t *testing.T) {
		logPath := filepath.Join(t.TempDir(), "log")
		p := start(t, append(env, "LOG="+logPath), "run", key, "--", "sh", "-c",
			`trap 'echo "got INT" >> "$LOG"; exit 7' INT; echo ready >> "$LOG"; while :; do sleep 0.05; done`)
		waitFor(t, 30*time.Second, "the command starts", func() bool { return len(readLines(t, logPath)) > 0 })
		p.cmd.Process.Signal(syscall.SIGINT)
		if code := p.wait(t, time.Minute); code != 7 {
			t.Errorf("exit code %d, want the command's 7; stderr:\n%s", code, p.stderr.String())
		}
		if lines := readLines(t, logPath); len(lines) != 2 || lines[1] != "got INT" {
			t.Errorf("the command's log %q, want ready then got INT", lines)
		}
	})

	t.Run("signal while waiting", func(t *testing.T) {
		dir := t.TempDir()
		logPath, goPath := filepath.Join(dir, "log"), filepath.Join(dir, "go")
		henv := append(env, "LOG="+logPath, "GO="+goPath)
		holder := start(t, append(henv, "ID=holder"), "run", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "the holder enters", func() bool { return len(readLines(t, logPath)) == 1 })
		waiter := start(t, append(henv, "ID=waiter"), "run", "-v", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "the waiter waits", func() bool { return strings.Contains(waiter.stderr.String(), "waiting") })
		waiter.cmd.Process.Signal(syscall.SIGTERM)
		if code := waiter.wait(t, time.Minute); code != 128+int(syscall.SIGTERM) {
			t.Errorf("waiter: exit code %d, want %d; stderr:\n%s", code, 128+int(syscall.SIGTERM), waiter.stderr.String())
		}
		os.WriteFile(goPath, nil, 0o600)
		if code := holder.wait(t, time.Minute); code != 0 {
			t.Errorf("holder: exit code %d; stderr:\n%s", code, holder.stderr.String())
		}
		if lines := readLines(t, logPath); len(lines) != 2 {
			t.Errorf("log %q: want the holder's lines only", lines)
		}
	})
}

// TestRunLossSaidOnce: a lock freed by force under a lockctl run
// --verbose is reported once, in lockctl's own words: the library's log
// line for the same loss does not follow it in slog's format.
func TestRunLossSaidOnce(t *testing.T) {
	t.Parallel() // waits for servers and TTLs, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		logPath, goPath, key, env := holderEnv(t, url)
		a := start(t, env, "run", "--verbose", "--ttl", "3s", "--grace", "1s", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "a enters", func() bool { return len(readLines(t, logPath)) == 1 })
		wantCode(t, runLockctl(t, env, "release", "--force", "--yes", key), exitOK)
		if code := a.wait(t, time.Minute); code != exitLockLost {
			t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitLockLost, a.stderr.String())
		}
		stderr := a.stderr.String()
		var lost []string
		for _, l := range strings.Split(stderr, "\n") {
			if strings.Contains(l, "lost") || strings.Contains(l, "no longer") {
				lost = append(lost, l)
			}
			if strings.Contains(l, "level=") || strings.Contains(l, "msg=") {
				t.Errorf("a line in slog's format, not lockctl's: %q", l)
			}
		}
		if len(lost) != 1 {
			t.Errorf("the loss is reported %d times, want once:\n%s", len(lost), stderr)
		}
		os.WriteFile(goPath, nil, 0o600)
	})
}

// holderEnv sets up a holder for holdScript run by lockctl run on url as
// client "a": the file it logs its entry to, the file whose creation
// makes it leave, a fresh key, and its environment.
func holderEnv(t *testing.T, url string) (logPath, goPath, key string, env []string) {
	t.Helper()
	dir := t.TempDir()
	logPath, goPath = filepath.Join(dir, "log"), filepath.Join(dir, "go")
	key = testKey(t)
	env = testEnv(t, "LOCKER_URL="+url, "ID=a", "LOG="+logPath, "GO="+goPath)
	return logPath, goPath, key, env
}
