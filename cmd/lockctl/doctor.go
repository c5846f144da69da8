package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
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
             the ensemble's size and quorum, the round trip
  etcd       member health, the leader, the cluster size, the smallest lease
             TTL against the TTL, alarms, the round trip

The TTL checked against is the URL's ?ttl=, else the library's default.
Doctor works where Open refuses the deployment (an evicting Redis): that is
one of its findings. It exits 0 when nothing failed (warnings are printed),
1 when a check failed (with --strict, also when one warned), 125 when the
URL cannot be read.`,
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
	URL      string           `json:"url"` // password redacted
	Backend  string           `json:"backend"`
	Worst    string           `json:"worst"` // pass, warn or fail
	Findings []locker.Finding `json:"findings"`
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
	if a.json {
		if err := writeJSON(a.stdout, doctorOutput{URL: dg.URL, Backend: dg.Backend, Worst: worst.String(), Findings: dg.Findings}); err != nil {
			return err
		}
	} else {
		printDiagnosis(a.stdout, dg)
	}
	if worst == locker.Fail || (d.strict && worst == locker.Warn) {
		return &codeError{code: exitChecksFailed}
	}
	return nil
}

// printDiagnosis prints the findings as a table, then the reason and the
// fix of each one that did not pass, then a count.
func printDiagnosis(w io.Writer, dg locker.Diagnosis) {
	fmt.Fprintf(w, "%s (%s)\n\n", dg.URL, dg.Backend)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STATUS\tCHECK\tTARGET\tFOUND\n")
	counts := map[locker.Status]int{}
	for _, f := range dg.Findings {
		counts[f.Status]++
		target := f.Target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.ToUpper(f.Status.String()), f.Check, target, firstSentence(f.Detail))
	}
	tw.Flush()
	for _, f := range dg.Findings {
		if f.Status == locker.Pass {
			continue
		}
		where := f.Check
		if f.Target != "" {
			where += " on " + f.Target
		}
		fmt.Fprintf(w, "\n%s %s: %s\n  fix: %s\n", strings.ToUpper(f.Status.String()), where, f.Detail, f.Fix)
	}
	fmt.Fprintf(w, "\n%d passed, %d warned, %d failed\n", counts[locker.Pass], counts[locker.Warn], counts[locker.Fail])
}

// firstSentence shortens a detail for the table: its first sentence, at
// most 100 characters; the whole text follows below the table for what
// did not pass.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if r := []rune(s); len(r) > 100 {
		s = string(r[:99]) + "…"
	}
	return s
}
