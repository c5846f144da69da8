package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker/internal/testenv"
	"go.uber.org/goleak"
)

// lockctlBin is the lockctl binary TestMain builds for the end-to-end
// tests.
var lockctlBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockctl-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lockctlBin = filepath.Join(dir, "lockctl")
	args := []string{"build", "-o", lockctlBin}
	if raceEnabled {
		args = append(args, "-race") // the binary is checked for races too
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building lockctl: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// What ran in this process (the demo's story, the usage checks)
		// must leave no goroutine behind.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// The variables scripts/services.sh exports, as internal/testenv of the
// library names them (an internal package of another module, which this
// one cannot import).
const requireServers = "LOCKER_REQUIRE_SERVERS"

// server is a server backend the end-to-end tests run against.
type server struct {
	name    string
	env     string // the variable with its URL
	fencing bool
}

var servers = []server{
	{"redis", "LOCKER_TEST_REDIS_URL", true},
	{"redlock", "LOCKER_TEST_REDLOCK_URL", false},
	{"zookeeper", "LOCKER_TEST_ZK_URL", true},
	{"etcd", "LOCKER_TEST_ETCD_URL", true},
	{"postgres", "LOCKER_TEST_POSTGRES_URL", true},
}

// serverURL returns the URL in the variable env. When it is unset the
// test skips, or fails under LOCKER_REQUIRE_SERVERS=1, so that a run that
// silently tested nothing cannot pass.
func serverURL(t *testing.T, env string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		if env == "LOCKER_TEST_REDLOCK_URL" && !strings.Contains(v, "node_timeout=") {
			// The lockctl under test is built with the race detector and
			// several run at once on what may be a two-core machine: a
			// Redlock node's answer is awaited 300 ms here, not the
			// default 100 ms that bursts of requests from such processes
			// missed now and then, failing a run for no fault of the code.
			sep := "?"
			if strings.Contains(v, "?") {
				sep = "&"
			}
			v += sep + "node_timeout=300ms"
		}
		return v
	}
	msg := env + " is not set; start the servers with `make services-up` and `eval $(scripts/services.sh env)`, or run `make test`"
	if os.Getenv(requireServers) == "1" {
		t.Fatalf("%s (and %s=1 forbids skipping)", msg, requireServers)
	}
	t.Skip(msg)
	return ""
}

// forEachServer runs f against every server backend, as subtests that
// run at the same time.
func forEachServer(t *testing.T, f func(t *testing.T, s server, url string)) {
	t.Helper()
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.name
	}
	concurrently(t, names, func(t *testing.T, i int) {
		f(t, servers[i], serverURL(t, servers[i].env))
	})
}

// concurrently runs f(t, i) as the subtest names[i] for every name, all at
// once, and returns when all have ended. Unlike t.Parallel, which -parallel
// bounds (by default the number of CPUs), this runs them all together: the
// end-to-end tests spend their time waiting for TTLs, not computing.
// heavy is held by the tests that load every server at full speed
// (TestCheck's ten suites at once, TestBench's scenarios): run together,
// beside the rest of the package, they stalled the test etcd for seconds
// (its fsyncs, which the test servers have since stopped making), and
// each failed on the other's load. They take turns; the lighter tests
// still run beside them.
var heavy sync.Mutex

// takeTurn holds heavy for the rest of t.
func takeTurn(t *testing.T) {
	heavy.Lock()
	t.Cleanup(heavy.Unlock)
}

func concurrently(t *testing.T, names []string, f func(t *testing.T, i int)) {
	t.Helper()
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, func(t *testing.T) { f(t, i) })
		}()
	}
	wg.Wait()
}

// waitFor polls cond every 10 ms until it holds, and fails the test if it
// still does not after d; what says what was awaited.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// testKey returns a key no other test or run uses.
func testKey(t *testing.T) string {
	return fmt.Sprintf("lockctl-test/%s/%d", t.Name(), time.Now().UnixNano())
}

// testEnv is the environment of a lockctl the tests run: this one's, with
// no URL or config file of the user's, plus extra.
func testEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "LOCKER_URL", "XDG_CONFIG_HOME", "HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+t.TempDir()), extra...)
}

// proc is a lockctl the test started.
type proc struct {
	cmd    *exec.Cmd
	stdout testenv.SyncBuffer
	stderr testenv.SyncBuffer
	done   chan struct{}
	err    error
}

// start starts lockctl with args, in env (see testEnv); the test's end
// kills it if it still runs.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(lockctlBin, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits up to d for lockctl to exit and returns its exit code.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		// SIGQUIT: the Go runtime writes every goroutine's stack to
		// stderr and exits, which shows where it waited. Killed if
		// that does not end it.
		p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		t.Fatalf("lockctl %q still ran after %v; stdout:\n%s\nstderr (with its goroutines):\n%s",
			p.cmd.Args[1:], d, p.stdout.String(), p.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	}
	t.Fatalf("lockctl %q: %v; stderr:\n%s", p.cmd.Args[1:], p.err, p.stderr.String())
	return -1
}

// result is the outcome of a lockctl run to its end.
type result struct {
	code           int
	stdout, stderr string
}

// runLockctl runs lockctl with args to its end. The bound, three minutes,
// catches a hang, not slowness: check runs its whole suite, about half a
// minute alone on one backend, and make test runs every backend's at once
// beside other packages.
func runLockctl(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := start(t, env, args...)
	code := p.wait(t, 3*time.Minute)
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

// wantCode fails the test unless r ended with code and its standard
// error contains every fragment.
func wantCode(t *testing.T, r result, code int, fragments ...string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d; stderr:\n%s", r.code, code, r.stderr)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stderr, f) {
			t.Errorf("stderr does not say %q:\n%s", f, r.stderr)
		}
	}
}

// runApp runs lockctl in this process with args and env (name=value) as
// its whole environment, and returns its exit code and output.
func runApp(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	a := &app{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return env[k] }}
	code := execute(context.Background(), a, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// readLines returns the lines of the file at path ("" if it is missing).
func readLines(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || len(data) == 0 {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}
