package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
)

// The PostgreSQL servers of the restart and failover scenarios, started
// by the engine for each round, never the deployment given. The engine
// makes one database cluster per run, the template (initdb, then the lock
// tables created by the postgres backend's own Open, then a clean
// shutdown), and copies its data directory for every server of every
// round: a round starts from a fresh cluster in the time a copy takes,
// and a replica made from the same copy is a standby of the primary from
// the start, as a base backup would make it.
//
// PostgreSQL refuses to run as root: when lockctl runs as root, initdb,
// the servers and pg_ctl run as the postgres user, who then owns the
// servers' directories.

// pgPrograms are the programs of PostgreSQL the engine runs.
var pgPrograms = []string{"initdb", "postgres", "pg_ctl"}

// debianPGBin is where Debian's postgresql packages put the programs,
// one directory per major version.
const debianPGBin = "/usr/lib/postgresql/*/bin"

// findPGBin returns the directory of PostgreSQL's programs: dir if given,
// else $LOCKER_TEST_PG_BIN, else the directory of pg_ctl on $PATH, else
// Debian's of the highest version.
func findPGBin(dir string) (string, error) {
	if dir != "" {
		return dir, checkPGBin(dir, "--pg-bin "+dir)
	}
	if env := os.Getenv("LOCKER_TEST_PG_BIN"); env != "" {
		return env, checkPGBin(env, "$LOCKER_TEST_PG_BIN="+env)
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil && checkPGBin(filepath.Dir(p), "") == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob(debianPGBin)
	slices.SortFunc(dirs, func(a, b string) int { return pgMajor(b) - pgMajor(a) })
	for _, d := range dirs {
		if checkPGBin(d, "") == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL programs (%s) in $LOCKER_TEST_PG_BIN, on $PATH or in %s: the scenarios that restart servers need them (--pg-bin DIR)",
		strings.Join(pgPrograms, ", "), debianPGBin)
}

// pgMajor is the major version in a Debian directory of PostgreSQL's
// programs, /usr/lib/postgresql/15/bin, or 0.
func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// checkPGBin checks that dir holds PostgreSQL's programs; what names
// where dir came from, for the error.
func checkPGBin(dir, what string) error {
	for _, p := range pgPrograms {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err == nil && (fi.IsDir() || fi.Mode().Perm()&0o111 == 0) {
			err = errors.New("not an executable file")
		}
		if err != nil {
			return fmt.Errorf("%s: no PostgreSQL %s there: %w", what, p, err)
		}
	}
	return nil
}

// pgEnv is what the engine needs to start PostgreSQL servers: the
// programs, the user they run as, and the template cluster.
type pgEnv struct {
	bin string
	// as is the user the programs run as when lockctl runs as root (the
	// postgres user); nil otherwise.
	as       *syscall.Credential
	template string // the template's data directory
}

// pgSetup makes the run's template once, the first time a round needs a
// PostgreSQL server, and returns it; a failure is every round's.
func (e *engine) pgSetup(ctx context.Context) (*pgEnv, error) {
	e.pgMu.Lock()
	defer e.pgMu.Unlock()
	if e.pg == nil && e.pgErr == nil {
		e.pg, e.pgErr = newPGEnv(ctx, e.o.PGBin, e.dir)
	}
	return e.pg, e.pgErr
}

// newPGEnv finds the programs and the user, and makes the template
// under dir.
func newPGEnv(ctx context.Context, bin, dir string) (*pgEnv, error) {
	bin, err := findPGBin(bin)
	if err != nil {
		return nil, err
	}
	p := &pgEnv{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no postgres user to run it as: %w", err)
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("the postgres user's ids: %w", err)
		}
		p.as = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user must pass through dir to the servers'
		// directories; it lists nothing there.
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, err
		}
	}
	tdir, err := p.mkdir(dir, "postgres-template")
	if err != nil {
		return nil, err
	}
	p.template = filepath.Join(tdir, "data")
	initdb := p.command(tdir, "initdb", "-D", p.template, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		err = fmt.Errorf("initdb of the template cluster in %s: %w: %s", tdir, err, lastLines(out, 5))
		if p.as != nil {
			err = fmt.Errorf("%w (it runs as the postgres user, who must be able to reach %s: set TMPDIR to a directory it can)", err, dir)
		}
		return nil, err
	}
	s := &pgServer{env: p, dir: tdir, data: p.template}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	defer s.stop()
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := locker.Open(octx, s.url())
	if err != nil {
		return nil, fmt.Errorf("creating the lock tables in the template cluster: %w", err)
	}
	l.Close()
	// A clean shutdown: a copy then starts without recovery, and a
	// replica copied with it starts at the checkpoint the primary starts
	// from.
	if err := s.shutdown(); err != nil {
		return nil, fmt.Errorf("the template cluster did not shut down: %w", err)
	}
	return p, nil
}

// mkdir makes the directory dir/name, owned by the user the programs run
// as.
func (p *pgEnv) mkdir(dir, name string) (string, error) {
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	if p.as != nil {
		if err := os.Chown(d, int(p.as.Uid), int(p.as.Gid)); err != nil {
			return "", err
		}
	}
	return d, nil
}

// command is PostgreSQL's program name with args, run as the user the
// programs run as, in dir (one that user may enter).
func (p *pgEnv) command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = dir
	if p.as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.as}
	}
	return cmd
}

// newServer prepares a server on a copy of the template, in dir/name, on
// a free loopback port, without starting it.
func (p *pgEnv) newServer(dir, name string) (*pgServer, error) {
	sdir, err := p.mkdir(dir, name)
	if err != nil {
		return nil, err
	}
	s := &pgServer{env: p, dir: sdir, data: filepath.Join(sdir, "data")}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	// cp -a keeps the copy's owner and modes (PostgreSQL wants its data
	// directory private to it).
	if out, err := exec.Command("cp", "-a", p.template, s.data).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copying the template cluster to %s: %w: %s", s.data, err, lastLines(out, 3))
	}
	return s, nil
}

// pgServer is one PostgreSQL server (a postmaster) the engine started.
type pgServer struct {
	env  *pgEnv
	dir  string // its directory: data/ and postgres.log
	data string
	port int
	// primary, for a replica: the address it streams from (the primary's
	// link).
	primary string
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has exited
	// link, for a primary with a replica: the proxy the replica streams
	// through, which holds replication back when cut.
	link *conformance.Proxy
}

func (s *pgServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// url is the server's URL as superuser postgres, whom the template
// trusts, for the engine's own queries and the workers' Lockers.
func (s *pgServer) url() string { return pgURL(s.addr()) }

// pgURL is the URL of the engine's servers at hosts: a multi-host URL
// when there are several, whose clients take the one that accepts writes
// (target_session_attrs=read-write), as a client configured for failover
// does.
func pgURL(hosts ...string) string {
	u := "postgres://postgres@" + strings.Join(hosts, ",") + "/postgres?sslmode=disable&connect_timeout=5"
	if len(hosts) > 1 {
		u += "&target_session_attrs=read-write"
	}
	return u
}

// args are the postmaster's arguments: loopback TCP only, small, no
// fsync (a kill loses nothing a commit wrote: the WAL is in the
// operating system's cache; only a crash of the machine would lose it),
// and for a replica, where it streams from.
func (s *pgServer) args() []string {
	a := []string{"-D", s.data, "-c", "port=" + strconv.Itoa(s.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=16MB", "-c", "max_connections=100", "-c", "logging_collector=off"}
	if s.primary != "" {
		host, port, _ := net.SplitHostPort(s.primary)
		a = append(a, "-c", fmt.Sprintf("primary_conninfo=host=%s port=%s user=postgres application_name=replica", host, port))
	}
	return a
}

// pgStartTries bounds how long start tries again after a postmaster
// that exits at once: one killed a moment before leaves children that
// still hold its shared memory until they notice its death.
const pgStartTries = 10 * time.Second

// start runs the server and waits until it accepts connections (for a
// replica: read-only ones, in recovery).
func (s *pgServer) start(ctx context.Context) error {
	if s.primary != "" {
		if err := s.writeFile("standby.signal"); err != nil {
			return err
		}
	}
	logPath := filepath.Join(s.dir, "postgres.log")
	until := time.Now().Add(pgStartTries)
	for {
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		s.cmd = s.env.command(s.dir, "postgres", s.args()...)
		// A file, not a pipe: the children of a killed postmaster keep
		// their standard error open until they exit.
		s.cmd.Stdout, s.cmd.Stderr = log, log
		err = s.cmd.Start()
		log.Close()
		if err != nil {
			return fmt.Errorf("starting PostgreSQL: %w", err)
		}
		s.done = make(chan struct{})
		go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
		exited, err := s.ready(ctx, 30*time.Second)
		switch {
		case err == nil:
			return nil
		case !exited:
			s.kill()
			return fmt.Errorf("PostgreSQL on %s did not accept connections within 30s: %w; the end of %s: %s", s.addr(), err, logPath, tailFile(logPath))
		case time.Now().After(until) || ctx.Err() != nil:
			return fmt.Errorf("PostgreSQL on %s exited at start; the end of %s: %s", s.addr(), logPath, tailFile(logPath))
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// writeFile writes an empty file name in the data directory, owned by
// the user the server runs as.
func (s *pgServer) writeFile(name string) error {
	p := filepath.Join(s.data, name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return err
	}
	if s.env.as != nil {
		return os.Chown(p, int(s.env.as.Uid), int(s.env.as.Gid))
	}
	return nil
}

// ready waits up to within for the server to answer a query; exited
// reports that it exited first.
func (s *pgServer) ready(ctx context.Context, within time.Duration) (exited bool, err error) {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-s.done:
			return true, errors.New("exited")
		default:
		}
		if err = s.query(ctx, "SELECT 1", nil); err == nil || time.Now().After(deadline) {
			return false, err
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return false, err
		}
	}
}

// query runs sql on the server with a connection of its own, scanning
// its one row into dst (none for nil), within a second or two.
func (s *pgServer) query(ctx context.Context, sql string, dst []any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.url())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if dst == nil {
		_, err = c.Exec(ctx, sql, args...)
		return err
	}
	return c.QueryRow(ctx, sql, args...).Scan(dst...)
}

// kill kills the postmaster with SIGKILL, as a crash would: its children
// notice and exit; what it committed is in its WAL.
func (s *pgServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
	}
}

// restart kills the server and starts it again at once, on its port.
func (s *pgServer) restart(ctx context.Context) error {
	s.kill()
	return s.start(ctx)
}

// shutdown stops the server cleanly (a fast shutdown: SIGINT), or kills
// it if it has not stopped within 30 s.
func (s *pgServer) shutdown() error {
	if s.cmd == nil || s.cmd.Process == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
		return nil
	case <-time.After(30 * time.Second):
		s.kill()
		return errors.New("no fast shutdown within 30s")
	}
}

// stop ends the server for good (an immediate shutdown: SIGQUIT; SIGKILL
// after 10 s), with the proxy its replica used, and removes its files.
func (s *pgServer) stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.kill()
		}
	}
	if s.link != nil {
		s.link.Close()
	}
	if s.data != s.env.template {
		os.RemoveAll(s.dir)
	}
}

// promote makes a replica a primary, and returns once it accepts writes.
func (s *pgServer) promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := s.env.command(s.dir, "pg_ctl", "promote", "-w", "-t", "60", "-s", "-D", s.data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("promoting the replica on %s: %w: %s", s.addr(), err, lastLines(out, 3))
	}
	for {
		var recovery bool
		err := s.query(ctx, "SELECT pg_is_in_recovery()", []any{&recovery})
		if err == nil && !recovery {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("the replica on %s was promoted but does not accept writes: %w", s.addr(), err)
		}
	}
}

// pgSingle starts one server for a round, under dir.
func (p *pgEnv) pgSingle(ctx context.Context, dir string) ([]*pgServer, string, error) {
	s, err := p.newServer(dir, "postgres-"+runID())
	if err != nil {
		return nil, "", err
	}
	if err := s.start(ctx); err != nil {
		s.stop()
		return nil, "", err
	}
	return []*pgServer{s}, s.url(), nil
}

// pgPair starts a primary and its asynchronous streaming replica for a
// round, under dir: the replica streams through a proxy of the engine's
// (the primary's link), so that a scenario can hold replication back. It
// returns once the replica streams and has replayed all the primary
// wrote, with the URL that names both.
func (p *pgEnv) pgPair(ctx context.Context, dir string) (servers []*pgServer, url string, err error) {
	defer func() {
		if err != nil {
			stopPG(servers)
			servers = nil
		}
	}()
	name := runID()
	primary, err := p.newServer(dir, "postgres-"+name)
	if err != nil {
		return nil, "", err
	}
	servers = append(servers, primary)
	if err := primary.start(ctx); err != nil {
		return servers, "", err
	}
	if primary.link, err = conformance.NewProxy(primary.addr()); err != nil {
		return servers, "", err
	}
	replica, err := p.newServer(dir, "postgres-replica-"+name)
	if err != nil {
		return servers, "", err
	}
	servers = append(servers, replica)
	replica.primary = primary.link.Addr()
	if err := replica.start(ctx); err != nil {
		return servers, "", err
	}
	if err := waitReplayed(ctx, primary, replica); err != nil {
		return servers, "", err
	}
	return servers, pgURL(primary.addr(), replica.addr()), nil
}

// waitReplayed waits until the replica streams from the primary and has
// replayed what the primary had written.
func waitReplayed(ctx context.Context, primary, replica *pgServer) error {
	var lsn string
	if err := primary.query(ctx, "SELECT pg_current_wal_lsn()::text", []any{&lsn}); err != nil {
		return fmt.Errorf("the primary on %s: %w", primary.addr(), err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var streaming, replayed bool
		err := replica.query(ctx, `SELECT coalesce((SELECT status = 'streaming' FROM pg_stat_wal_receiver), false),
			coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)`, []any{&streaming, &replayed}, lsn)
		if err == nil && streaming && replayed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica on %s did not stream and replay the primary's WAL up to %s within 15s (streaming %v, replayed %v, %v); the end of its log: %s",
				replica.addr(), lsn, streaming, replayed, err, tailFile(filepath.Join(replica.dir, "postgres.log")))
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func stopPG(servers []*pgServer) {
	for _, s := range servers {
		s.stop()
	}
}

// pgServersFor starts the PostgreSQL servers a scenario of set needs:
// one, or a primary and its replica.
func (e *engine) pgServersFor(ctx context.Context, set serverSet) ([]*pgServer, string, error) {
	p, err := e.pgSetup(ctx)
	if err != nil {
		return nil, "", err
	}
	switch set {
	case ownServers:
		return p.pgSingle(ctx, e.dir)
	case ownFailover:
		return p.pgPair(ctx, e.dir)
	}
	return nil, "", fmt.Errorf("no PostgreSQL servers of set %d", set)
}

// lastLines returns the last n lines of out, trimmed, on one line.
func lastLines(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}

// tailFile returns the last lines of the file at path, for an error.
func tailFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(b, 5)
}

// runFailoverPG: replication is held back, A takes the lock on the
// primary, and the primary is killed; the replica, promoted, has neither
// A's row nor the fence A was given, and B, whose client finds the new
// primary by target_session_attrs, takes the lock there. A, which has not
// refreshed yet, still believes it holds the lock and writes.
//
// The fence repeats: A's is the first the template's sequence hands out,
// and the replica, which never heard of it, hands it out again to B; the
// resource, which accepted A's first write with it, refuses B's and
// accepts A's late one. A sequence logs 32 values ahead of those it hands
// out, so on a primary whose earlier fences the replica had received, B's
// fence would land above A's unless the primary had drawn past the values
// logged before replication stopped: whether a failover repeats a fence
// depends on the traffic, and this round shows that it can.
func runFailoverPG(ctx context.Context, r *round, d *deployment) error {
	primary, replica := d.pg[0], d.pg[1]
	primary.link.Cut()
	r.mark("replication from the primary held back")
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	primary.kill()
	at := r.mark("the primary killed before its replica had the lock's row")
	if err := replica.promote(ctx); err != nil {
		return err
	}
	r.mark("the replica promoted")
	if err := rival(ctx, r, b, 30*time.Second, at); err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}
