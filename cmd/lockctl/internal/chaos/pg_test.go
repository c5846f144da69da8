package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker/internal/testenv"
	_ "github.com/distlock/locker/postgres" // postgres://
)

// urlProcess is a worker run in this process on the real backend at its
// URL, its connections through proxies of its own (Open), for the
// scenarios whose faults strike servers, not workers: it neither pauses
// nor dies as a process does (SIGSTOP is refused; SIGKILL ends it).
type urlProcess struct {
	url, key  string
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
}

func urlWorkers() func(url, key string) process {
	return func(url, key string) process {
		p := &urlProcess{url: url, key: key, done: make(chan struct{})}
		p.inR, p.inW = io.Pipe()
		p.outR, p.outW = io.Pipe()
		return p
	}
}

func (p *urlProcess) start(io.Writer) (io.WriteCloser, io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	l, f, err := Open(ctx, p.url)
	cancel()
	if err != nil {
		close(p.done)
		return nil, nil, err
	}
	go func() {
		defer close(p.done)
		Serve(context.Background(), l, f, p.key, p.inR, p.outW)
		p.outW.Close()
		l.Close()
		f.Close()
	}()
	return p.inW, p.outR, nil
}

func (p *urlProcess) signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGCONT:
		return nil
	case syscall.SIGKILL:
		p.inR.CloseWithError(io.EOF)
		p.outW.Close()
		return nil
	}
	return fmt.Errorf("an in-process worker cannot take %v", sig)
}

func (p *urlProcess) wait() { <-p.done }

func (p *urlProcess) pid() int { return 0 }

// pgEngine is an engine for one PostgreSQL deployment whose rounds start
// their own servers under a directory the postgres user can reach when
// the tests run as root, with workers in this process.
func pgEngine(t *testing.T, bin string, rounds int) (*engine, *deployment) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lockctl-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &deployment{backend: "postgres", label: "postgres", fencing: true, shared: true, permits: true, values: true,
		ttl: 2 * time.Second, slack: 100 * time.Millisecond}
	e := memEngine(d, rounds)
	e.o.PGBin, e.dir, e.spawn = bin, dir, urlWorkers()
	return e, d
}

// TestPostgresServerScenarios runs the scenarios that start PostgreSQL
// servers of their own, on servers made from the binaries the tests use:
// a server killed and started again keeps the lock (the rival is refused
// while the holder holds) and hands the next holder a larger fence; a
// replica promoted while replication was held back grants the lock a
// second time with the fence the old primary had given, and the checker
// counts both. Each round's servers are gone once it ends.
func TestPostgresServerScenarios(t *testing.T) {
	bin := testenv.Get(t, testenv.PGBin)
	t.Parallel()
	e, d := pgEngine(t, bin, 1)
	restart, failover := scenario(t, "restart"), scenario(t, "failover")
	e.plan([]*Scenario{restart, failover})
	ctx := context.Background()

	c := e.cell(ctx, restart, d)
	if !c.Expected || c.Counts.Overlaps != 0 || c.Counts.RightfulRejected != 0 || c.NewHolder != 0 {
		t.Errorf("restart: %s; counts %+v; errors %q", c.Verdict, c.Counts, c.Errors)
	}
	if ws := c.History[0].Writes; len(ws) != 3 || ws[2].Client != "B" || ws[2].Fence <= ws[1].Fence || ws[2].Verdict != "rightful" {
		t.Errorf("restart: writes %+v: want A's two, then B's with a larger fence", ws)
	}

	c = e.cell(ctx, failover, d)
	if !c.Expected || c.Counts.Overlaps != 1 || c.Counts.RightfulRejected != 1 || c.NewHolder == 0 {
		t.Errorf("failover: %s; counts %+v; errors %q", c.Verdict, c.Counts, c.Errors)
	}
	if ws := c.History[0].Writes; len(ws) != 3 || ws[0].Fence != ws[1].Fence {
		t.Errorf("failover: writes %+v: want B's fence to repeat A's", ws)
	}
	if !strings.Contains(c.Expect, "repeated fence") {
		t.Errorf("failover: Expect %q does not say what breaks", c.Expect)
	}

	left, _ := filepath.Glob(filepath.Join(e.dir, "postgres-*"))
	if len(left) != 1 || filepath.Base(left[0]) != "postgres-template" {
		t.Errorf("server directories left after the rounds: %q, want only the template", left)
	}
}

// TestPGBinErrors: a directory without PostgreSQL's programs is an error
// that names the flag or variable it came from and the program missing.
func TestPGBinErrors(t *testing.T) {
	empty := t.TempDir()
	if _, err := findPGBin(filepath.Join(empty, "nosuch")); err == nil || !strings.Contains(err.Error(), "--pg-bin "+filepath.Join(empty, "nosuch")) || !strings.Contains(err.Error(), "initdb") {
		t.Errorf("findPGBin of a missing directory: %v", err)
	}
	for _, p := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(empty, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(empty, "pg_ctl"), nil, 0o644)
	_, err := findPGBin(empty)
	if err == nil || !strings.Contains(err.Error(), "pg_ctl") || !strings.Contains(err.Error(), "not an executable") {
		t.Errorf("findPGBin of a directory whose pg_ctl cannot run: %v", err)
	}
	t.Setenv("LOCKER_TEST_PG_BIN", filepath.Join(empty, "nosuch"))
	if _, err := findPGBin(""); err == nil || !strings.Contains(err.Error(), "$LOCKER_TEST_PG_BIN=") {
		t.Errorf("findPGBin with a bad $LOCKER_TEST_PG_BIN: %v", err)
	}
}

func TestPGURL(t *testing.T) {
	if got, want := pgURL("127.0.0.1:5"), "postgres://postgres@127.0.0.1:5/postgres?sslmode=disable&connect_timeout=5"; got != want {
		t.Errorf("pgURL = %q, want %q", got, want)
	}
	got := pgURL("127.0.0.1:5", "127.0.0.1:6")
	if !strings.HasPrefix(got, "postgres://postgres@127.0.0.1:5,127.0.0.1:6/postgres?") || !strings.HasSuffix(got, "&target_session_attrs=read-write") {
		t.Errorf("pgURL of a pair = %q: want both hosts and the read-write target", got)
	}
	if hosts := urlHosts(got); len(hosts) != 2 || hosts[1] != "127.0.0.1:6" {
		t.Errorf("urlHosts(%q) = %q", got, hosts)
	}
}

func TestPGMajor(t *testing.T) {
	for dir, want := range map[string]int{"/usr/lib/postgresql/15/bin": 15, "/usr/lib/postgresql/9/bin": 9, "/opt/pg/bin": 0} {
		if got := pgMajor(dir); got != want {
			t.Errorf("pgMajor(%q) = %d, want %d", dir, got, want)
		}
	}
}
