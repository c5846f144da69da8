package chaos

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
)

// matrixHeader names the columns of the matrix, in text and Markdown.
var matrixHeader = []string{"scenario", "backend", "rounds", "overlaps", "stale rejected", "stale accepted", "late accepted", "rightful rejected", "skipped", "new holder after", "taken again", "verdict"}

// matrixRow is one cell as the matrix shows it.
func matrixRow(c Cell) []string {
	n := c.Counts
	return []string{c.Scenario, c.Backend, fmt.Sprint(c.Rounds), fmt.Sprint(n.Overlaps), fmt.Sprint(n.StaleRejected),
		fmt.Sprint(n.StaleAccepted), fmt.Sprint(n.LateAccepted), fmt.Sprint(n.RightfulRejected), fmt.Sprint(n.Skipped),
		durationText(c.NewHolder), fmt.Sprintf("%d/%d", c.Recovered, c.Rounds), c.Verdict}
}

func durationText(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// WriteText writes the matrix as a terminal table, with the errors and
// notes after it.
func WriteText(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(matrixHeader, "\t"))
	for _, c := range rep.Cells {
		fmt.Fprintln(tw, strings.Join(matrixRow(c), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range rep.Cells {
		for _, e := range c.Errors {
			fmt.Fprintf(w, "%s on %s: %s\n", c.Scenario, c.Backend, e)
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	if c := bench.ConnsText(rep.Connections); c != "" {
		fmt.Fprintln(w, "connections:", c)
	}
	_, err := fmt.Fprintf(w, "%d cells in %v\n", len(rep.Cells), rep.Took.Round(time.Second))
	return err
}

// WriteMarkdown writes the report as Markdown: the deployments, the
// matrix, what each scenario does, and one round's history per cell.
func WriteMarkdown(w io.Writer, rep *Report) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# %s\n\n`%s`, started %s, took %v, on %s.\n\n", rep.Tool, rep.Command,
		rep.Started.UTC().Format("2006-01-02 15:04 UTC"), rep.Took.Round(time.Second), rep.Machine)
	if rep.Build != "" {
		fmt.Fprintf(b, "Built from %s.\n\n", rep.Build)
	}
	b.WriteString("| backend | url | servers | fencing | TTL | expiry slack |\n|---|---|---|---|--:|--:|\n")
	for _, be := range rep.Backends {
		fmt.Fprintf(b, "| %s | %s | %s | %v | %v | %v |\n", be.Name, mdEscape(be.URL), mdEscape(orDash(be.Servers)), be.Fencing, be.TTL, be.ExpirySlack)
	}
	if c := bench.ConnsText(rep.Connections); c != "" {
		fmt.Fprintf(b, "\nConnections: %s.\n", c)
	}
	b.WriteString("\n## Matrix\n\n| " + strings.Join(matrixHeader, " | ") + " |\n|" + strings.Repeat("---|", len(matrixHeader)) + "\n")
	for _, c := range rep.Cells {
		fmt.Fprintf(b, "| %s |\n", strings.Join(mapStrings(matrixRow(c), mdEscape), " | "))
	}
	b.WriteString("\n## Scenarios\n\n")
	for _, sc := range Scenarios {
		fmt.Fprintf(b, "- **%s** (%s): %s.\n", sc.Name, strings.Join(sc.Backends, ", "), sc.About)
	}
	b.WriteString("\n## One round per cell\n")
	for _, c := range rep.Cells {
		fmt.Fprintf(b, "\n### %s on %s\n\nExpected: %s. Verdict: %s.\n\n", c.Scenario, c.Backend, c.Expect, c.Verdict)
		for _, e := range c.Errors {
			fmt.Fprintf(b, "- error: %s\n", mdEscape(e))
		}
		if c.Example != nil {
			b.WriteString("```\n")
			for _, m := range c.Example.Timeline {
				fmt.Fprintf(b, "%8s  %-6s %s\n", m.At.Round(time.Millisecond), orDash(m.Client), m.What)
			}
			b.WriteString("```\n")
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(b, "\nNote: %s\n", mdEscape(n))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func mapStrings(s []string, f func(string) string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = f(v)
	}
	return out
}

// mdEscape keeps a value inside its Markdown table cell.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
