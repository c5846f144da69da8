package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
	"github.com/distlock/locker/cmd/lockctl/internal/chaos"
)

func init() {
	addCommand(newChaosCmd)
	addCommand(newChaosWorkerCmd)
}

type chaosCmd struct {
	app         *app
	urls        []string
	scenarios   []string
	rounds      int
	ttl         time.Duration
	redisServer string
	etcd        string
	zkClasspath string
	pgBin       string
	out         string
}

func newChaosCmd(a *app) *cobra.Command {
	ch := &chaosCmd{app: a}
	c := &cobra.Command{
		Use:   "chaos",
		Short: "Inject faults into real servers and holder processes; count what each backend lets through",
		Long: `Chaos runs, on each deployment a --url names, rounds of a fault: a holder
process (lockctl chaos-worker) takes a key and writes to a shared
resource with its fencing token; the fault strikes; a rival process takes
the key and writes; the first holder, if it still believes it holds the
key, writes again. The resource checks fences where the backend has them,
and the checker, which knows who was granted the lock last, counts:

  overlaps           two clients believed they held the key at once
  stale rejected     a superseded holder's write refused by the fence
  stale accepted     a superseded holder's write accepted after the newer
                     holder's write: what fencing must prevent
  rightful rejected  the current holder refused: a fence went backwards
  skipped            writes a holder did not make because it knew its
                     lock was lost (the lost-lock signal at work)

and, per round, the time from the fault until a rival held the key, and
whether the key could be taken again once every fault had cleared.

Scenarios (--scenario, default all; each runs on the backends it applies to):
` + scenarioHelp() + `
The scenarios of shared holds and semaphores (pause-writer, pause-shared,
pause-permit, kill-shared, kill-permit) run where the backend admits them
(Capabilities.Shared, Capabilities.Permits); elsewhere the report notes
that they did not run, and why. For them the resource judges a shared
holder's access as a read and the others' as writes, by the key's rule
applied to fences: a reader is refused once a newer writer has written, a
writer once anyone newer has accessed, a permit holder once newer holders
take the permits it needs. Overlaps count beliefs against the rule: a
writer beside anyone, more permits than the limit.

pause-leader is the pause of an election's leader (locker.Election, as
lockctl elect campaigns): its writes carry its term, which is its lock's
fence, and each campaigner's reading of the leader (Election.Leader) must
name the one elected, with its term, token and value, or the round fails.

The scenarios that restart servers or move a server's clock run on Redis
servers lockctl starts itself (redis-server on $PATH, or --redis-server),
PostgreSQL's restart and failover on PostgreSQL servers it starts (initdb,
postgres and pg_ctl from --pg-bin; as the postgres user when lockctl runs
as root), and the server-leader scenarios (leader-kill, leader-partition:
the cluster's own Raft or Zab leader) on a three-member etcd cluster or
ZooKeeper ensemble it starts (--etcd, --zk-classpath): never on the
deployment given, which only says which backends to test. Keys start with lockctl-chaos/<random>/.
The exit code is 1 when a cell's outcome is not what the backend's
guarantees say it should be (the report's verdict column says why).`,
		Example: `  # Every scenario on the test servers (make services-up), 3 rounds each:
  lockctl chaos --url redis://127.0.0.1:27000 --url redlock://127.0.0.1:27001,127.0.0.1:27002,127.0.0.1:27003,127.0.0.1:27004,127.0.0.1:27005 \
    --url zookeeper://127.0.0.1:22181 --url etcd://127.0.0.1:23379 --rounds 3 --out /tmp/chaos

  # One scenario, with a JSON summary:
  lockctl chaos --url etcd://127.0.0.1:2379 --scenario pause --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return ch.run(c.Context(), c) },
	}
	f := c.Flags()
	f.StringArrayVar(&ch.urls, "url", nil, "a deployment to put under faults; repeat for several (else the URL lockctl --help describes)")
	f.StringSliceVar(&ch.scenarios, "scenario", nil, "scenarios to run, comma-separated (default all): "+strings.Join(chaos.ScenarioNames(), ", "))
	f.IntVar(&ch.rounds, "rounds", 3, "rounds of each scenario on each backend")
	f.DurationVar(&ch.ttl, "ttl", 2*time.Second, "TTL of the locks of the scenarios that wait for an expiry (raised to a backend's smallest)")
	f.StringVar(&ch.redisServer, "redis-server", "", "redis-server binary for the scenarios that restart servers (default: $PATH's)")
	f.StringVar(&ch.etcd, "etcd", "", "etcd binary for the server-leader scenarios' own three-member cluster (default: $LOCKER_TEST_ETCD_BIN, else $PATH's)")
	f.StringVar(&ch.zkClasspath, "zk-classpath", "", "ZooKeeper's Java classpath for the server-leader scenarios' own ensemble (default: $LOCKER_TEST_ZK_CLASSPATH, else Debian's jars)")
	f.StringVar(&ch.pgBin, "pg-bin", "", "directory of PostgreSQL's programs for the PostgreSQL restart and failover's own servers (default: $LOCKER_TEST_PG_BIN, else pg_ctl's on $PATH, else Debian's /usr/lib/postgresql/N/bin)")
	f.StringVar(&ch.out, "out", "", "directory to write report.json, report.md and report.html to")
	return c
}

// scenarioHelp lists the scenarios for the command's help.
func scenarioHelp() string {
	var b strings.Builder
	for _, sc := range chaos.Scenarios {
		fmt.Fprintf(&b, "  %-16s %s (%s)\n", sc.Name, sc.About, strings.Join(sc.Backends, ", "))
	}
	return b.String()
}

func (ch *chaosCmd) run(ctx context.Context, c *cobra.Command) error {
	if ch.rounds <= 0 || ch.ttl <= 0 {
		return exitf(exitError, "--rounds and --ttl must be positive")
	}
	urls := ch.urls
	if len(urls) == 0 {
		t, err := ch.app.resolve("")
		if err != nil {
			return exitf(exitError, "%v", err)
		}
		urls = []string{t.url}
	}
	if ch.out != "" {
		if err := os.MkdirAll(ch.out, 0o755); err != nil {
			return exitf(exitError, "--out: %v", err)
		}
	}
	rep, err := chaos.Run(ctx, chaos.Options{
		URLs: urls, Scenarios: ch.scenarios, Rounds: ch.rounds, TTL: ch.ttl, RedisServer: ch.redisServer, Etcd: ch.etcd, ZKClasspath: ch.zkClasspath, PGBin: ch.pgBin,
		Worker: chaosWorkerCommand, Command: commandLine(c),
		Progress: func(p bench.Progress) { fmt.Fprintln(ch.app.stderr, p) },
		Announce: func(s string) { fmt.Fprintln(ch.app.stderr, s) },
	})
	if rep == nil {
		return exitf(exitError, "%v", err)
	}
	if err != nil {
		rep.Notes = append(rep.Notes, "the run was cut short: "+err.Error())
	}
	if err := ch.report(rep); err != nil {
		return err
	}
	for _, cell := range rep.Cells {
		if !cell.Expected {
			return exitf(exitChecksFailed, "%s on %s: %s", cell.Scenario, cell.Backend, cell.Verdict)
		}
	}
	return nil
}

// report writes rep to --out in every format, and the summary to
// standard output.
func (ch *chaosCmd) report(rep *chaos.Report) error {
	return writeOutputs(ch.app, ch.out, rep, chaos.WriteText, map[string]func(io.Writer, *chaos.Report) error{
		"report.json": func(w io.Writer, r *chaos.Report) error { return writeJSON(w, r) },
		"report.md":   chaos.WriteMarkdown,
		"report.html": chaos.WriteHTML,
	})
}

// chaosWorkerCommand is a chaos holder: this very lockctl, running
// "lockctl chaos-worker".
func chaosWorkerCommand(url, key string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, "chaos-worker", "--url", url, key)
	cmd.Env = append(os.Environ(), "LOCKER_URL=")
	return cmd
}

func newChaosWorkerCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "chaos-worker --url URL KEY",
		Short: "A holder process of lockctl chaos: commands on stdin, events on stdout",
		Long: `chaos-worker is the holder process lockctl chaos starts: it reads one
command a line on standard input (acquire TTL WAIT, campaign TTL WAIT,
leader, write, write-if-held, release, fault ...) and writes one JSON
event a line on standard output.
It is not meant to be run by hand; the protocol is documented in the
chaos package (internal/chaos/worker.go).`,
		Example: `  # Take a key for 10 s, write once, release:
  printf 'acquire 10s 5s\nwrite\nrelease\n' | lockctl chaos-worker --url redis://127.0.0.1:6379 orders/42`,
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			t, err := a.resolve("")
			if err != nil {
				return exitf(exitError, "%v", err)
			}
			ctx, cancel := context.WithTimeout(c.Context(), openTimeout)
			l, f, err := chaos.Open(ctx, t.url)
			cancel()
			if err != nil {
				return exitf(exitError, "%v", err)
			}
			defer f.Close()
			defer l.Close()
			return chaos.Serve(c.Context(), l, f, args[0], a.stdin, a.stdout)
		},
	}
}
