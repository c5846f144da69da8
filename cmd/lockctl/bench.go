package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
	"github.com/distlock/locker/cmd/lockctl/internal/bench"
)

func init() {
	addCommand(newBenchCmd)
	addCommand(newBenchCampaignerCmd)
}

// benchCmd is one `lockctl bench`.
type benchCmd struct {
	app       *app
	urls      []string
	scenarios []string
	duration  time.Duration
	clients   []int
	waiters   []int
	rtt       time.Duration
	heldLocks int
	heldTTL   time.Duration
	out       string

	recoveryRounds int
	failoverRounds int
	readers        int
	writeEvery     time.Duration
	permits        int
}

func newBenchCmd(a *app) *cobra.Command {
	b := &benchCmd{app: a}
	c := &cobra.Command{
		Use:   "bench",
		Short: "Compare backends, raw server primitives and peer libraries on this machine",
		Long: `Bench measures each deployment a --url names, side by side in one run:
this library's Locker, the raw server primitives it is built on (the floor
the server sets; on PostgreSQL two: a lease row's INSERT and DELETE, "raw",
and a session advisory lock, "raw-advisory"), and the peer libraries one
would otherwise use (go-redsync/redsync and bsm/redislock on Redis, redsync
on Redlock, etcd's concurrency.Mutex, go-zookeeper's zk.Lock; none on
PostgreSQL). Designs take turns (one operation each, in a shuffled order,
or in rotating slices when many clients run at once), so that noise on the
machine hits them alike; every figure is also a ratio to the raw
primitives and the best peer.

Scenarios (--scenario, default all):
  uncontended  one client, Acquire+Release back to back: ops/s, p50/p99/p999
  throughput   N clients on N distinct keys, N swept by --clients
  hot-key      N waiters on one key (--waiters): handoff latency (release to
               the next holder's acquire), handoffs/s, fairness
  fresh-keys   every acquisition on a key never locked before
  fanout       Redlock on 3 nodes and on all given, against the raw fan-out
  held-locks   --held-locks locks held at once for two of their TTLs
               (--held-ttl): locks lost, client heap per lock, goroutines
  recovery     a holder process ("lockctl run") killed with SIGKILL while a
               waiter waits: the time until the waiter holds the lock,
               against TTL + ExpirySlack + one round trip
  failover     three campaigner processes ("lockctl bench-campaigner") contend
               for one election; the leader is killed with SIGKILL and the
               time until another leads is measured (p50, p90, slowest), a
               leader killed per round (--failover-rounds): the Locker's
               Election against etcd's concurrency.Election on etcd and an
               election on go-zookeeper's zk.Lock on ZooKeeper, all with the
               recovery scenario's TTL (2s, or the backend's smallest), which
               the report shows beside the figures
  read-write   --readers clients stream read locks on one key while a writer
               asks for the write lock every --write-every: the readers'
               rate, the writer's p50/p99 and longest wait, and the writes
               still waiting at a step's end (starved: where the backend
               keeps no queue, overlapping readers hold a writer off);
               against etcd's recipe.RWMutex on etcd
  semaphore    twice --permits clients on a semaphore of --permits: permits
               granted per second at the limit, the wait for one, and the
               most held at once

read-write and semaphore run the Locker where its backend admits shared
holds or semaphores (Capabilities.Shared, Capabilities.Permits), and say
so where it does not. No raw design takes part in them: the servers have
no primitive for either, and the raw designs never wait.

Latencies go into HDR histograms. The summary goes to standard output (a
table, or JSON with --json); --out DIR also writes report.json,
report.md and a self-contained report.html there. --rtt adds a round-trip
delay through a proxy in front of every server, as a network would: loopback
hides what a design's extra round trips cost. Keys start with
lockctl-bench/<random>/, so a run is safe on a shared deployment.`,
		Example: `  # Every backend of the test servers (make services-up), 2 s per design:
  lockctl bench --url redis://127.0.0.1:27000 --url etcd://127.0.0.1:23379 --out /tmp/bench

  # Redlock's fan-out with 1 ms of round trip added:
  lockctl bench --url redlock://h1:6379,h2:6379,h3:6379,h4:6379,h5:6379 --scenario fanout --rtt 1ms

  # A quick look, with a JSON summary:
  lockctl bench --url zookeeper://127.0.0.1:2181 --scenario uncontended,hot-key --duration 500ms --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return b.run(c.Context(), c) },
	}
	f := c.Flags()
	f.StringArrayVar(&b.urls, "url", nil, "a deployment to measure; repeat for several (else the URL lockctl --help describes)")
	f.StringSliceVar(&b.scenarios, "scenario", bench.Scenarios, "scenarios to run, comma-separated: "+strings.Join(bench.Scenarios, ", "))
	f.DurationVar(&b.duration, "duration", 2*time.Second, "how long each design runs in each scenario and parameter set")
	f.IntSliceVar(&b.clients, "clients", []int{1, 4, 16, 64}, "client counts swept by the throughput scenario")
	f.IntSliceVar(&b.waiters, "waiters", []int{2, 8, 32}, "waiter counts swept by the hot-key scenario")
	f.DurationVar(&b.rtt, "rtt", 0, "round-trip time to add in front of every server (e.g. 500us, 2ms); the report notes what this machine's timers make of it")
	f.IntVar(&b.heldLocks, "held-locks", 10000, "locks held at once in the held-locks scenario (100000 for the scale target)")
	f.DurationVar(&b.heldTTL, "held-ttl", 3*time.Second, "TTL of the locks of the held-locks scenario, held for two of them")
	f.IntVar(&b.recoveryRounds, "recovery-rounds", 3, "holders the recovery scenario kills per deployment")
	f.IntVar(&b.failoverRounds, "failover-rounds", 3, "leaders the failover scenario kills per deployment and election design")
	f.IntVar(&b.readers, "readers", bench.DefaultReaders, "clients streaming read locks in the read-write scenario")
	f.DurationVar(&b.writeEvery, "write-every", bench.DefaultWriteEvery, "the read-write scenario's writer's pause between write locks")
	f.IntVar(&b.permits, "permits", bench.DefaultPermits, "the semaphore scenario's permits (twice as many clients contend)")
	f.StringVar(&b.out, "out", "", "directory to write report.json, report.md and report.html to")
	return c
}

func (b *benchCmd) settings() (bench.Settings, error) {
	s := bench.Settings{Scenarios: b.scenarios, Duration: b.duration, Clients: b.clients, Waiters: b.waiters, RTT: b.rtt, HeldLocks: b.heldLocks, HeldTTL: b.heldTTL, RecoveryRounds: b.recoveryRounds, FailoverRounds: b.failoverRounds,
		Readers: b.readers, WriteEvery: b.writeEvery, Permits: b.permits}
	for _, sc := range s.Scenarios {
		if !bench.ValidScenario(sc) {
			return s, fmt.Errorf("--scenario %q: want one of %s", sc, strings.Join(bench.Scenarios, ", "))
		}
	}
	switch {
	case s.Duration <= 0:
		return s, fmt.Errorf("--duration %v: want a positive duration", s.Duration)
	case s.RTT < 0:
		return s, fmt.Errorf("--rtt %v: want zero or a positive duration", s.RTT)
	case s.HeldLocks <= 0:
		return s, fmt.Errorf("--held-locks %d: want a positive count", s.HeldLocks)
	case s.RecoveryRounds <= 0:
		return s, fmt.Errorf("--recovery-rounds %d: want a positive count", s.RecoveryRounds)
	case s.FailoverRounds <= 0:
		return s, fmt.Errorf("--failover-rounds %d: want a positive count", s.FailoverRounds)
	case s.HeldTTL <= 0:
		return s, fmt.Errorf("--held-ttl %v: want a positive duration", s.HeldTTL)
	case s.Readers <= 0 || s.Readers > 10000:
		return s, fmt.Errorf("--readers %d: want a count from 1 to 10000", s.Readers)
	case s.WriteEvery <= 0:
		return s, fmt.Errorf("--write-every %v: want a positive duration", s.WriteEvery)
	case s.Permits <= 0 || s.Permits > 5000:
		return s, fmt.Errorf("--permits %d: want a count from 1 to 5000 (twice as many clients contend)", s.Permits)
	}
	for _, n := range append(append([]int(nil), s.Clients...), s.Waiters...) {
		if n <= 0 || n > 10000 {
			return s, fmt.Errorf("--clients and --waiters take counts from 1 to 10000, not %d", n)
		}
	}
	return s, nil
}

func (b *benchCmd) run(ctx context.Context, c *cobra.Command) error {
	s, err := b.settings()
	if err != nil {
		return exitf(exitError, "%v", err)
	}
	urls := b.urls
	if len(urls) == 0 {
		t, err := b.app.resolve("")
		if err != nil {
			return exitf(exitError, "%v", err)
		}
		urls = []string{t.url}
	}
	if b.out != "" {
		if err := os.MkdirAll(b.out, 0o755); err != nil {
			return exitf(exitError, "--out: %v", err)
		}
	}
	rep, err := bench.Run(ctx, bench.Options{
		URLs: urls, Settings: s, Command: commandLine(c), Holder: holderCommand, Campaigner: campaignerCommand,
		Progress: func(p bench.Progress) { fmt.Fprintln(b.app.stderr, p) },
		Announce: func(s string) { fmt.Fprintln(b.app.stderr, s) },
	})
	if rep == nil {
		return exitf(exitError, "%v", err)
	}
	if err != nil {
		rep.Notes = append(rep.Notes, "the run was cut short: "+err.Error())
	}
	return writeOutputs(b.app, b.out, rep, bench.WriteText, map[string]func(io.Writer, *bench.Report) error{
		"report.json": func(w io.Writer, r *bench.Report) error { return writeJSON(w, r) },
		"report.md":   bench.WriteMarkdown,
		"report.html": bench.WriteHTML,
	})
}

// holderCommand is the holder the recovery scenario kills: this very
// lockctl, running "lockctl run" on key, printing a line once it holds it.
func holderCommand(url, key string, ttl time.Duration) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "run", "--url", url, "--ttl", ttl.String(), key, "--", "sh", "-c", "echo held; exec sleep 600")
	// Only the URL given: no profile or $LOCKER_URL of the user's.
	cmd.Env = append(os.Environ(), "LOCKER_URL=")
	return cmd
}

// campaignerCommand is a campaigner of the failover scenario: this very
// lockctl, running "lockctl bench-campaigner".
func campaignerCommand(design, url, name string, ttl time.Duration) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "bench-campaigner", "--design", design, "--url", url, "--ttl", ttl.String(), name)
	cmd.Env = append(os.Environ(), "LOCKER_URL=")
	return cmd
}

func newBenchCampaignerCmd(a *app) *cobra.Command {
	var (
		design string
		ttl    time.Duration
	)
	c := &cobra.Command{
		Use:   "bench-campaigner --design DESIGN --url URL --ttl D NAME",
		Short: "A campaigner process of lockctl bench's failover scenario",
		Long: `bench-campaigner is the process lockctl bench's failover scenario starts,
three at a time, and kills when it leads: it campaigns for NAME as DESIGN
(locker, concurrency.Election, zk.Lock) and writes "campaigning", then
"leading" once it leads, on standard output; it resigns and exits when its
standard input ends. It is not meant to be run by hand; the protocol is
documented in the bench package (internal/bench/campaign.go).`,
		Example: `  # Lead jobs/x on etcd with a 2 s lease until Ctrl-D:
  lockctl bench-campaigner --design concurrency.Election --url etcd://127.0.0.1:2379 --ttl 2s jobs/x`,
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if ttl <= 0 {
				return exitf(exitError, "--ttl %v: must be positive", ttl)
			}
			t, err := a.resolve("")
			if err != nil {
				return exitf(exitError, "%v", err)
			}
			if err := bench.Campaign(c.Context(), design, t.url, args[0], ttl, a.stdin, a.stdout); err != nil {
				return exitf(exitError, "%v", err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&design, "design", bench.KindLocker, "the election design: locker, "+bench.ElectionEtcd+" or "+bench.ElectionZK)
	c.Flags().DurationVar(&ttl, "ttl", 2*time.Second, "the leadership's TTL: the Locker's TTL, etcd's lease, ZooKeeper's session timeout")
	return c
}

// commandLine is the command as typed, passwords in URLs redacted.
func commandLine(c *cobra.Command) string {
	args := []string{"lockctl"}
	for _, a := range os.Args[1:] {
		flag, url, ok := strings.Cut(a, "=")
		switch {
		case !strings.Contains(a, "://"):
			args = append(args, a)
		case ok && strings.HasPrefix(flag, "-") && strings.Contains(url, "://"):
			args = append(args, flag+"="+locker.Redact(url))
		default:
			args = append(args, locker.Redact(a))
		}
	}
	if len(os.Args) <= 1 {
		args = append(args, c.Name())
	}
	return strings.Join(args, " ")
}

// writeOutputs writes rep to dir (if any) in every format of formats,
// which maps each file's name to what writes it, and the summary to
// standard output: JSON with --json, else text.
func writeOutputs[R any](a *app, dir string, rep R, text func(io.Writer, R) error, formats map[string]func(io.Writer, R) error) error {
	if dir != "" {
		if err := writeReports(dir, rep, formats); err != nil {
			return exitf(exitError, "--out: %v", err)
		}
	}
	if a.json {
		return writeJSON(a.stdout, rep)
	}
	if err := text(a.stdout, rep); err != nil {
		return err
	}
	if dir != "" {
		fmt.Fprintf(a.stdout, "\nReports: %s\n", filepath.Join(dir, "report.{json,md,html}"))
	}
	return nil
}

// writeReports writes rep to dir in every format: formats maps each
// file's name to what writes it.
func writeReports[R any](dir string, rep R, formats map[string]func(io.Writer, R) error) error {
	for name, write := range formats {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = write(f, rep)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}
