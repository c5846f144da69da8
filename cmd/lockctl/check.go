package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
	"github.com/distlock/locker/cmd/lockctl/internal/buildinfo"
	"github.com/distlock/locker/conformance"
)

func init() { addCommand(newCheckCmd) }

// checkCmd is one `lockctl check`.
type checkCmd struct {
	app      *app
	cases    string
	jsonFile string
	junit    string
	markdown string
	list     bool
	slack    time.Duration
}

func newCheckCmd(a *app) *cobra.Command {
	k := &checkCmd{app: a}
	c := &cobra.Command{
		Use:   "check",
		Short: "Run the conformance suite against a live deployment",
		Long: `Check runs the locker conformance suite against the deployment a URL names:
mutual exclusion, auto-expiry of crashed holders, safe release, fencing, the
lost-lock signal, FIFO order where the backend claims it, bad input. Each
case is a rule; a failure says which rule broke and how.

The suite makes several independent clients, each through loopback proxies
of its own, so that it can cut one off as a crash or a partition would,
without touching the servers or the other clients; TLS is verified against
each server's own name. Every key it uses is under a random prefix
(conformance/<run id>/), so a run is safe on a shared deployment; each case
releases what it takes, and what a cut-off client held expires with its
TTL. Expect a few minutes: the expiry cases wait out TTLs.

Before it starts its proxies, check connects to the deployment once
directly, as an application would: a server that is down or refuses the
client is reported as the library reports it (connection refused, a TLS
mismatch), not as the proxies would see it.

Progress shows case by case as the run goes, with an estimate of the time
left (from the pace of the cases so far: the expiry cases wait out TTLs,
so it moves as they run); then a summary table, the backend's
capabilities, the library version (as "lockctl version" names it) and the
URL (passwords redacted). --json prints the report as JSON on standard
output, as --json does on every command; --json-file, --junit and
--markdown write it to a file ("-": standard output). Whenever a report
goes to standard output, the progress and the summary go to standard
error. Check exits 0 when every case passed or was skipped, 1
when one failed, 125 when the suite could not run (a bad URL, a backend
that cannot be reached).`,
		Example: `  lockctl check --url redis://10.0.0.5:6379
  lockctl check --url 'etcds://10.0.0.1:2379?cacert=ca.pem' --junit report.xml
  lockctl check --url zookeeper://10.0.0.7:2181 --json > report.json
  lockctl check --profile prod --cases 'expiry|fencing' --markdown report.md
  lockctl check --list
  lockctl check --list --json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return k.run(c.Context()) },
	}
	f := c.Flags()
	f.StringVar(&k.cases, "cases", "", "run only the cases whose name matches this regular expression")
	f.StringVar(&k.jsonFile, "json-file", "", "write the report as JSON to this file (-: standard output, as --json)")
	f.StringVar(&k.junit, "junit", "", "write the report as JUnit XML to this file, for CI (-: standard output)")
	f.StringVar(&k.markdown, "markdown", "", "write the report as Markdown to this file (-: standard output)")
	f.BoolVar(&k.list, "list", false, "list the cases and their rules, and run nothing")
	f.DurationVar(&k.slack, "slack", conformance.DefaultSlack, "how much longer than TTL + the backend's expiry slack a case waits for a lock to go, for timers and scheduling on a loaded machine or a slow link")
	return c
}

// checkReport is the report check writes: the conformance report, and
// what it ran against.
type checkReport struct {
	URL          string        `json:"url"` // password redacted
	Backend      string        `json:"backend"`
	Capabilities string        `json:"capabilities"`
	Library      string        `json:"library"` // the locker library's version, as lockctl version says it
	KeyPrefix    string        `json:"key_prefix"`
	Started      time.Time     `json:"started"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	Passed       int           `json:"passed"`
	Failed       int           `json:"failed"`
	Skipped      int           `json:"skipped"`
	Results      []checkResult `json:"results"`
}

type checkResult struct {
	Name    string        `json:"name"`
	Rule    string        `json:"rule"`
	Status  string        `json:"status"` // pass, fail or skip
	Detail  string        `json:"detail,omitempty"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

func (k *checkCmd) run(ctx context.Context) error {
	if k.slack < 0 {
		return exitf(exitError, "--slack %v: the allowance cannot be negative", k.slack)
	}
	a := k.app
	var sel *regexp.Regexp
	if k.cases != "" {
		re, err := regexp.Compile(k.cases)
		if err != nil {
			return exitf(exitError, "--cases: %v", err)
		}
		sel = re
	}
	if k.list {
		return k.listCases(sel)
	}
	t, err := a.resolve("")
	if err != nil {
		return withCode(exitError, err)
	}
	// The suite cuts clients off on purpose: their warnings (refreshes
	// that fail, reconnects) are expected, and the report says what broke.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := k.reach(ctx, t, quiet); err != nil {
		return err
	}
	progress := k.progressWriter()
	h := conformance.URLHarness(t.url, locker.WithLogger(quiet))
	h.Slack = k.slack
	if sel != nil {
		h.Select = sel.MatchString
	}
	start := time.Now()
	fmt.Fprintf(progress, "checking %s (URL from %s)\n", locker.Redact(t.url), t.source)
	h.Observe = (&checkProgress{w: progress, start: start}).observe
	rep, err := conformance.Check(ctx, h)
	if err != nil && len(rep.Results) == 0 {
		return exitf(exitError, "%w (URL from %s)", err, t.source)
	}
	cr := newCheckReport(t.url, rep, start)
	fmt.Fprintf(progress, "\n%s", rep.String())
	fmt.Fprintf(progress, "\nbackend       %s\ncapabilities  %s\nlibrary       %s\nURL           %s\nkeys          under %s (a cut-off client's locks expire with their TTL)\nelapsed       %s\n",
		cr.Backend, cr.Capabilities, cr.Library, cr.URL, cr.KeyPrefix, cr.Elapsed.Round(time.Second))
	if err := k.writeReports(cr); err != nil {
		return exitf(exitError, "writing the report: %v", err)
	}
	switch {
	case cr.Failed > 0:
		return &codeError{code: exitChecksFailed}
	case err != nil:
		// Interrupted: some cases did not run.
		return exitf(exitError, "%v", err)
	}
	return nil
}

// reach opens a Locker on t directly and closes it. The suite's clients
// connect through proxies of their own, which accept a connection even
// when the server behind them is down and then close it: what a client
// reports of that is the proxy's closed connection (EOF), not the server's
// refusal that an application would see. Reaching the server once first
// reports the library's own error.
func (k *checkCmd) reach(ctx context.Context, t target, log *slog.Logger) error {
	l, err := k.app.open(ctx, t, locker.WithLogger(log))
	if err != nil {
		return err
	}
	// Nothing was acquired: a failed Close has nothing to leave behind.
	l.Close()
	return nil
}

// progressWriter is where progress goes: where no report does.
func (k *checkCmd) progressWriter() io.Writer {
	if k.app.json {
		return k.app.stderr
	}
	for _, p := range []string{k.jsonFile, k.junit, k.markdown} {
		if p == "-" {
			return k.app.stderr
		}
	}
	return k.app.stdout
}

// checkProgress prints a line per case: its name as it starts; its
// result, the time so far and an estimate of the time left as it ends.
type checkProgress struct {
	w     io.Writer
	start time.Time
}

// observe is the Harness.Observe of a check run.
func (p *checkProgress) observe(pr conformance.Progress) {
	if pr.Result == nil {
		fmt.Fprintf(p.w, "[%2d/%d] %-26s ", pr.Index, pr.Total, pr.Case)
		return
	}
	elapsed := time.Since(p.start)
	fmt.Fprintf(p.w, "%-4s %6s  (%s elapsed, %s)\n", pr.Result.Status, pr.Result.Elapsed.Round(10*time.Millisecond),
		elapsed.Round(time.Second), timeLeft(elapsed, pr.Index, pr.Total))
}

// timeLeft estimates the rest of a run of total cases, done of which took
// elapsed: the cases still to run at the mean pace so far. The expiry
// cases, which wait out TTLs, are spread over the run, so the pace of the
// first few is a rough guide that firms up as the run goes.
func timeLeft(elapsed time.Duration, done, total int) string {
	switch {
	case done >= total:
		return "done"
	case done <= 0:
		return "no estimate yet"
	}
	left := elapsed / time.Duration(done) * time.Duration(total-done)
	if left >= time.Minute {
		left = left.Round(10 * time.Second)
	} else {
		left = max(left.Round(time.Second), time.Second)
	}
	return "about " + left.String() + " left"
}

// writeReports writes cr to each report file asked for.
func (k *checkCmd) writeReports(cr checkReport) error {
	for _, w := range []struct {
		path  string
		write func(io.Writer, checkReport) error
	}{{k.jsonFile, writeCheckJSON}, {k.junit, writeJUnit}, {k.markdown, writeMarkdown}} {
		if w.path == "" {
			continue
		}
		if err := writeReport(k.app.stdout, w.path, cr, w.write); err != nil {
			return err
		}
	}
	if k.app.json {
		return writeCheckJSON(k.app.stdout, cr)
	}
	return nil
}

// listCases prints the built-in cases that sel picks, with their rules:
// with --json, as a JSON array of {"name", "rule"}.
func (k *checkCmd) listCases(sel *regexp.Regexp) error {
	type listed struct {
		Name string `json:"name"`
		Rule string `json:"rule"`
	}
	cases := []listed{}
	for _, c := range conformance.Cases() {
		if sel == nil || sel.MatchString(c.Name) {
			cases = append(cases, listed{c.Name, c.Rule})
		}
	}
	if k.app.json {
		return writeJSON(k.app.stdout, cases)
	}
	for _, c := range cases {
		fmt.Fprintf(k.app.stdout, "%-26s %s\n", c.Name, c.Rule)
	}
	return nil
}

func newCheckReport(rawURL string, rep conformance.Report, start time.Time) checkReport {
	cr := checkReport{
		URL: locker.Redact(rawURL), Backend: rep.Capabilities.Name, Capabilities: rep.Capabilities.String(),
		Library: buildinfo.Library(), KeyPrefix: rep.KeyPrefix, Started: start, Elapsed: time.Since(start),
	}
	for _, r := range rep.Results {
		switch r.Status {
		case conformance.Pass:
			cr.Passed++
		case conformance.Fail:
			cr.Failed++
		case conformance.Skip:
			cr.Skipped++
		}
		cr.Results = append(cr.Results, checkResult{Name: r.Name, Rule: r.Rule, Status: strings.ToLower(string(r.Status)), Detail: r.Detail, Elapsed: r.Elapsed})
	}
	return cr
}

// writeReport writes cr with write to path, "-" being w.
func writeReport(w io.Writer, path string, cr checkReport, write func(io.Writer, checkReport) error) error {
	if path == "-" {
		return write(w, cr)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(write(f, cr), f.Close())
}

func writeCheckJSON(w io.Writer, cr checkReport) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(cr)
}

// The JUnit XML that CI systems read: one test suite, a test case per
// conformance case.
type junitSuites struct {
	XMLName xml.Name   `xml:"testsuites"`
	Suites  []junitRun `xml:"testsuite"`
}

type junitRun struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       float64         `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

func writeJUnit(w io.Writer, cr checkReport) error {
	run := junitRun{
		Name: "locker conformance (" + cr.Backend + ")", Tests: len(cr.Results), Failures: cr.Failed, Skipped: cr.Skipped,
		Time: cr.Elapsed.Seconds(), Timestamp: cr.Started.UTC().Format(time.RFC3339),
		Properties: []junitProperty{
			{"url", cr.URL}, {"backend", cr.Backend}, {"capabilities", cr.Capabilities},
			{"library", cr.Library}, {"key_prefix", cr.KeyPrefix},
		},
	}
	for _, r := range cr.Results {
		jc := junitCase{Name: r.Name, Classname: "conformance." + cr.Backend, Time: r.Elapsed.Seconds()}
		switch r.Status {
		case "fail":
			jc.Failure = &junitMessage{Message: "rule broken: " + r.Rule, Text: r.Detail}
		case "skip":
			jc.Skipped = &junitMessage{Message: r.Detail}
		}
		run.Cases = append(run.Cases, jc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	e := xml.NewEncoder(w)
	e.Indent("", "  ")
	if err := e.Encode(junitSuites{Suites: []junitRun{run}}); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func writeMarkdown(w io.Writer, cr checkReport) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Conformance of %s\n\n", cr.Backend)
	fmt.Fprintf(&b, "- URL: `%s`\n- Capabilities: %s\n- Library: %s\n- Started: %s, took %s\n- Keys: under `%s`\n\n",
		cr.URL, cr.Capabilities, cr.Library, cr.Started.UTC().Format(time.RFC3339), cr.Elapsed.Round(time.Second), cr.KeyPrefix)
	fmt.Fprintf(&b, "**%d passed, %d failed, %d skipped**\n\n", cr.Passed, cr.Failed, cr.Skipped)
	b.WriteString("| Case | Result | Time | Rule |\n| --- | --- | --- | --- |\n")
	for _, r := range cr.Results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Name, r.Status, r.Elapsed.Round(time.Millisecond), mdCell(r.Rule))
	}
	for _, r := range cr.Results {
		if r.Status != "pass" {
			fmt.Fprintf(&b, "\n### %s: %s\n\n```\n%s\n```\n", r.Name, r.Status, r.Detail)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdCell makes s safe in a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
