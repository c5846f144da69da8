//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/memory"
)

// TestRunKindFlagsRefused: a combination of --shared, --limit and
// --weight that the library refuses fails with its reason and exit 125
// before any server is contacted (the URL names none that answers) or
// the command is looked up.
func TestRunKindFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--shared", "--limit", "2"}, "--shared --limit 2: invalid option: Shared and Limit together"},
		{[]string{"--weight", "2"}, "--weight 2: invalid option: Weight(2) without Limit"},
		{[]string{"--limit", "0"}, "--limit 0: invalid option: Limit(0): a semaphore has at least one permit"},
		{[]string{"--limit", "-3"}, "Limit(-3)"},
		{[]string{"--limit", "2", "--weight", "3"}, "--limit 2 --weight 3: invalid option: Weight(3): a hold takes from 1 to the Limit of 2 permits"},
		{[]string{"--limit", "2", "--weight", "0"}, "Weight(0)"},
	} {
		args := append(append([]string{"run", "--url", "redis://127.0.0.1:1"}, tc.flags...), "k", "--", "no-such-command-here")
		r := runApp(t, nil, args...)
		if r.code != exitError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("lockctl %q: exit %d, stderr %q; want %d and %q", args, r.code, r.stderr, exitError, tc.want)
		}
	}
}

// kindRun parses args as lockctl run's flags and returns the options
// they give the library.
func kindRun(t *testing.T, args ...string) []locker.Option {
	t.Helper()
	r := &runCmd{app: &app{getenv: func(string) string { return "" }}}
	c := r.command()
	if err := c.ParseFlags(args); err != nil {
		t.Fatalf("flags %q: %v", args, err)
	}
	if err := r.checkFlags(c); err != nil {
		t.Fatalf("flags %q refused: %v", args, err)
	}
	return append(r.kindOptions(c), locker.WithTTL(time.Minute))
}

// TestRunKindOptions: the flags become the holds they name, on the
// memory backend: shared holds coexist and keep a writer out; a
// semaphore admits its limit, counting weights; a run that disagrees
// with the key's holders is refused with ErrKindMismatch.
func TestRunKindOptions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	take := func(key string, args ...string) (locker.Lock, error) {
		t.Helper()
		lk, err := l.TryAcquire(ctx, key, kindRun(t, args...)...)
		if err == nil {
			t.Cleanup(func() { lk.Release(context.Background()) })
		}
		return lk, err
	}
	must := func(key string, args ...string) {
		t.Helper()
		if _, err := take(key, args...); err != nil {
			t.Fatalf("run %q on %s: %v, want it held", args, key, err)
		}
	}
	refused := func(key string, want error, args ...string) {
		t.Helper()
		if _, err := take(key, args...); !errors.Is(err, want) {
			t.Fatalf("run %q on %s: %v, want %v", args, key, err, want)
		}
	}

	must("rw", "--shared")
	must("rw", "--shared")
	refused("rw", locker.ErrNotAcquired)                  // a writer
	refused("rw", locker.ErrKindMismatch, "--limit", "2") // a read/write lock is no semaphore

	must("sem", "--limit", "3")
	must("sem", "--limit", "3", "--weight", "2")
	refused("sem", locker.ErrNotAcquired, "--limit", "3")
	refused("sem", locker.ErrKindMismatch, "--limit", "4")
	refused("sem", locker.ErrKindMismatch, "--shared")
	refused("sem", locker.ErrKindMismatch)

	h, err := locker.Inspect(ctx, l, "sem")
	if err != nil {
		t.Fatal(err)
	}
	var weights []int
	for _, hd := range h.Holds {
		if hd.Kind != backend.Permit || hd.Limit != 3 {
			t.Errorf("a hold of --limit 3: %+v", hd)
		}
		weights = append(weights, hd.Weight)
	}
	if len(weights) != 2 || weights[0] != 1 || weights[1] != 2 {
		t.Errorf("the semaphore's holds weigh %v, want [1 2]", weights)
	}

	must("mutex")
	refused("mutex", locker.ErrNotAcquired)
}

// TestRunKinds: on every server backend that admits them, lockctl run
// --shared runs two commands at once and keeps a writer out, and
// --limit 2 runs two and refuses a third and a disagreeing limit; on a
// backend that does not, the flag is refused with exit 125, naming the
// capability the backend lacks. The test follows each backend's
// Capabilities, so that it checks the holds once a backend admits them.
func TestRunKinds(t *testing.T) {
	t.Parallel() // waits for servers, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		caps := capabilitiesOf(t, url)
		t.Run("shared", func(t *testing.T) {
			if !caps.Shared {
				wantCode(t, runLockctl(t, testEnv(t, "LOCKER_URL="+url), "run", "--shared", testKey(t), "--", "true"),
					exitError, "--shared: backend "+s.name+" does not admit shared holds (Capabilities.Shared is false)")
				return
			}
			together(t, url, []string{"--shared"}, []string{})
		})
		t.Run("limit", func(t *testing.T) {
			if !caps.Permits {
				wantCode(t, runLockctl(t, testEnv(t, "LOCKER_URL="+url), "run", "--limit", "2", testKey(t), "--", "true"),
					exitError, "--limit: backend "+s.name+" does not admit semaphores (Capabilities.Permits is false)")
				return
			}
			together(t, url, []string{"--limit", "2"}, []string{"--limit", "2"})
		})
	})
}

// together runs two lockctl run with flags on one key and checks that
// both hold it at once; meanwhile a third run with third's flags and
// --no-wait finds the key taken (124), and on a semaphore a run with
// another limit is refused (125).
func together(t *testing.T, url string, flags, third []string) {
	t.Helper()
	dir := t.TempDir()
	logPath, goPath := filepath.Join(dir, "log"), filepath.Join(dir, "go")
	key := testKey(t)
	env := func(id string) []string {
		return testEnv(t, "LOCKER_URL="+url, "ID="+id, "LOG="+logPath, "GO="+goPath)
	}
	run := func(id string, extra ...string) []string {
		return append(append([]string{"run"}, extra...), key, "--", "sh", "-c", holdScript)
	}
	a := start(t, env("a"), run("a", flags...)...)
	b := start(t, env("b"), run("b", flags...)...)
	waitFor(t, 30*time.Second, "a and b hold the key together", func() bool { return len(readLines(t, logPath)) == 2 })
	wantCode(t, runLockctl(t, env("c"), run("c", append([]string{"--no-wait"}, third...)...)...), exitNotAcquired, "is held by someone else")
	if slices.Contains(flags, "--limit") {
		wantCode(t, runLockctl(t, env("d"), run("d", "--no-wait", "--limit", "3")...), exitError, "disagrees")
	}
	if err := os.WriteFile(goPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*proc{a, b} {
		if code := p.wait(t, time.Minute); code != 0 {
			t.Errorf("exit code %d; stderr:\n%s", code, p.stderr.String())
		}
	}
}

// capabilitiesOf opens url and returns what its backend claims.
func capabilitiesOf(t *testing.T, url string) locker.Capabilities {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	l, err := locker.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Capabilities()
}
