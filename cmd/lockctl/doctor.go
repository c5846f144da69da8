package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
)

func init() { addCommand(newDoctorCmd) }

// doctorTimeout bounds a whole diagnosis; each backend bounds its own
// requests to a server far more tightly.
const doctorTimeout = 2 * time.Minute

// doctorCmd is one `lockctl doctor`.
type doctorCmd struct {
	app    *app
	strict bool
}

func newDoctorCmd(a *app) *cobra.Command {
	d := &doctorCmd{app: a}
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Check a deployment for what silently breaks locks",
		Long: `Doctor checks the deployment a URL names for what silently breaks locks,
and reports each check as pass, warn or fail, with what it found, what it
does to locks, and the fix:

  Redis      every node's maxmemory-policy (eviction deletes locks),
             persistence (a restart without AOF forgets every lock),
             replication (a replica promoted by a failover loses the writes
             it had not copied: a lost-lock risk), the round trip
  Redlock    the node count, each node's reachability, whether a majority
             answers, the clock skew between nodes (TIME), and each node's
             Redis checks
  ZooKeeper  the session-timeout range each server grants against the TTL,
             the ensemble's size and quorum, each server's limit on
             connections per client address (maxClientCnxns, where the
             server allows the four-letter word conf), the round trip
  etcd       member health, the leader, the cluster size, the smallest lease
             TTL against the TTL, alarms, the round trip
  PostgreSQL the server's release and whether it is a standby (which refuses
             writes), its replicas and whether they are synchronous (a
             failover to an asynchronous one loses acquisitions and repeats
             fences), synchronous_commit, the lock tables in the URL's schema
             and the role's privileges on them (or whether it may create
             them), statement_timeout and the other timeouts, connections in
             use against max_connections, the clock against this machine's,
             the round trip

The TTL checked against is the URL's ?ttl=, else the library's default.
Doctor works where Open refuses the deployment (an evicting Redis): that is
one of its findings. Findings that are the same on several servers (the
same check, status, detail and fix) are shown once, with the servers they
concern. It exits 0 when nothing failed (warnings are printed), 1 when a
check failed (with --strict, also when one warned), 125 when the URL cannot
be read.

--json prints one JSON object, every name in lower case:

  {"url": "redlock://...",        the URL, passwords redacted
   "backend": "redlock",          the URL's scheme
   "worst": "warn",               pass, warn or fail: the worst finding
   "findings": [
     {"check": "persistence",     what was checked; stable from run to run
      "status": "warn",           pass, warn or fail
      "targets": ["10.0.0.1:6379", "10.0.0.2:6379"],
                                  the servers it is about ([]: the
                                  deployment as a whole)
      "detail": "AOF is off ...", what was found, and what it does to locks
      "fix": "set appendonly ..."}]}   how to mend it ("" when it passed)`,
		Example: `  lockctl doctor --url redis://10.0.0.5:6379
  lockctl doctor --url 'redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?ttl=10s'
  lockctl doctor --profile prod --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return d.run(c.Context()) },
	}
	c.Flags().BoolVar(&d.strict, "strict", false, "exit 1 on a warning too")
	return c
}

// doctorOutput is what lockctl doctor prints with --json.
type doctorOutput struct {
	URL      string          `json:"url"` // password redacted
	Backend  string          `json:"backend"`
	Worst    string          `json:"worst"` // pass, warn or fail
	Findings []doctorFinding `json:"findings"`
}

// doctorFinding is a locker.Finding as doctor shows it: with lower-case
// JSON names, as the rest of lockctl's JSON has them (the library's
// Finding has no JSON tags), and with the servers of identical findings
// gathered in one, so that five Redlock nodes with one configuration make
// one line, not five.
type doctorFinding struct {
	Check  string        `json:"check"`
	Status locker.Status `json:"status"`
	// Targets are the servers the finding is about (host:port), empty for
	// the deployment as a whole; never null, so that tools can range over
	// it.
	Targets []string `json:"targets"`
	Detail  string   `json:"detail"`
	Fix     string   `json:"fix"`
}

// groupFindings gathers the findings that differ only in their targets,
// in the order each first appears. A target that lists several servers
// (a deployment-wide finding names them all, comma-separated) is split.
func groupFindings(fs []locker.Finding) []doctorFinding {
	type same struct {
		check, detail, fix string
		status             locker.Status
	}
	at := map[same]int{}
	var out []doctorFinding
	for _, f := range fs {
		var targets []string
		if f.Target != "" {
			targets = strings.Split(f.Target, ",")
		}
		k := same{f.Check, f.Detail, f.Fix, f.Status}
		if i, ok := at[k]; ok {
			for _, t := range targets {
				if !slices.Contains(out[i].Targets, t) {
					out[i].Targets = append(out[i].Targets, t)
				}
			}
			continue
		}
		at[k] = len(out)
		out = append(out, doctorFinding{Check: f.Check, Status: f.Status, Targets: append([]string{}, targets...), Detail: f.Detail, Fix: f.Fix})
	}
	return out
}

func (d *doctorCmd) run(ctx context.Context) error {
	a := d.app
	t, err := a.resolve("")
	if err != nil {
		return withCode(exitError, err)
	}
	ctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	// The findings say what went wrong; the library's own warnings
	// (retries, reconnects) would only repeat them.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dg, err := locker.Diagnose(ctx, t.url, locker.WithLogger(quiet))
	if err != nil {
		return exitf(exitError, "%w (URL from %s)", err, t.source)
	}
	worst := dg.Worst()
	out := doctorOutput{URL: dg.URL, Backend: dg.Backend, Worst: worst.String(), Findings: groupFindings(dg.Findings)}
	if a.json {
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		printDiagnosis(a.stdout, out)
	}
	if worst == locker.Fail || (d.strict && worst == locker.Warn) {
		return &codeError{code: exitChecksFailed}
	}
	return nil
}

// printDiagnosis prints the findings as a table, then the reason and the
// fix of each one that did not pass, then a count.
func printDiagnosis(w io.Writer, out doctorOutput) {
	fmt.Fprintf(w, "%s (%s)\n\n", out.URL, out.Backend)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STATUS\tCHECK\tTARGET\tFOUND\n")
	counts := map[locker.Status]int{}
	servers := serverCount(out.Findings)
	// A terminal's width is a reader's; a pipe's reader (tail, grep) is
	// owed the whole sentence.
	cut := 0
	if r, ok := w.(io.Reader); ok && isTerminal(r) {
		cut = maxFound
	}
	for _, f := range out.Findings {
		counts[f.Status]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.ToUpper(f.Status.String()), f.Check, targetCell(f.Targets, servers), firstSentence(f.Detail, cut))
	}
	tw.Flush()
	for _, f := range out.Findings {
		if f.Status == locker.Pass {
			continue
		}
		where := f.Check
		if len(f.Targets) > 0 {
			where += " on " + strings.Join(f.Targets, ", ")
		}
		fmt.Fprintf(w, "\n%s %s: %s\n  fix: %s\n", strings.ToUpper(f.Status.String()), where, f.Detail, f.Fix)
	}
	fmt.Fprintf(w, "\n%d passed, %d warned, %d failed\n", counts[locker.Pass], counts[locker.Warn], counts[locker.Fail])
}

// serverCount returns how many distinct servers the findings name.
func serverCount(fs []doctorFinding) int {
	seen := map[string]bool{}
	for _, f := range fs {
		for _, t := range f.Targets {
			seen[t] = true
		}
	}
	return len(seen)
}

// targetCell is the table's TARGET for a finding about targets, of all
// servers: one server by its address; every server as such; some by the
// first and how many more. That keeps the column narrow however many
// servers the URL names; the lines below the table name them all for
// what did not pass, and --json always does.
func targetCell(targets []string, all int) string {
	switch n := len(targets); {
	case n == 0:
		return "-"
	case n == 1:
		return targets[0]
	case n == all:
		return fmt.Sprintf("all %d servers", n)
	default:
		return fmt.Sprintf("%s +%d more", targets[0], n-1)
	}
}

// maxFound is how many characters of a detail the table shows on a
// terminal.
const maxFound = 100

// firstSentence shortens a detail for the table: its first sentence, cut
// to at most limit characters unless limit is 0; the whole text follows
// below the table for what did not pass.
func firstSentence(s string, limit int) string {
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if r := []rune(s); limit > 0 && len(r) > limit {
		s = string(r[:limit-1]) + "…"
	}
	return s
}
