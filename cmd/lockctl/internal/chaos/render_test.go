package chaos

import (
	"bytes"
	"encoding/xml"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const evil = `<script>alert(1)</script>`

// sampleReport is a report of two cells: one with an example round
// (holds, a write of every verdict, engine marks, a client and a mark
// with markup in their names), one not as expected and with no example.
func sampleReport(t *testing.T) *Report {
	t.Helper()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	example := &RoundResult{
		Counts: Counts{Overlaps: 1, StaleRejected: 2, StaleAccepted: 3, LateAccepted: 4, RightfulRejected: 5, Skipped: 6},
		Holds: []Hold{
			{Client: "A", From: ms(10), To: ms(900), Ended: "round-end"},
			{Client: "B", From: ms(400), To: ms(600), Ended: "released"},
			{Client: "B", From: ms(700), To: ms(800), Ended: "released"},
			{Client: "C" + evil, From: ms(850), To: ms(950), Ended: "lost " + evil},
		},
		Writes: []Write{
			{Client: "A", Fence: 5, At: ms(20), Accepted: true, Verdict: "rightful"},
			{Client: "B", Fence: 6, At: ms(410), Accepted: true, Verdict: "rightful"},
			{Client: "A", Fence: 5, At: ms(500), Accepted: false, Verdict: "stale-rejected"},
			{Client: "A", Fence: 5, At: ms(550), Accepted: true, Verdict: "stale-accepted"},
			{Client: "A", Fence: 5, At: ms(710), Accepted: true, Verdict: "late-accepted"},
			{Client: "B", Fence: 4, At: ms(750), Accepted: false, Verdict: "rightful-rejected"},
		},
		Timeline: []Mark{
			{At: ms(10), Client: "A", What: "granted, fence 5"},
			{At: ms(300), What: "A paused (SIGSTOP)"},
			{At: ms(400), Client: "B", What: "granted, fence 6"},
			{At: ms(650), What: "note " + evil},
		},
		Took:      time.Second,
		NewHolder: ms(100),
		Recovered: true,
	}
	return &Report{
		Tool: "lockctl chaos", Build: "lockctl v1, library v1, go1.26.0 linux/amd64",
		Command: "lockctl chaos --url redis://x",
		Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Took:    3 * time.Second,
		Machine: "linux/amd64",
		Backends: []Backend{
			{Name: "redis", URL: "redis://:xxxxx@h:6379", Fencing: true, TTL: 2 * time.Second},
			{Name: "redlock", URL: "redlock://a|b", TTL: 2 * time.Second, ExpirySlack: 10 * time.Millisecond},
		},
		Cells: []Cell{
			{Scenario: "pause", Backend: "redlock", Rounds: 7, Counts: example.Counts, Recovered: 7, NewHolder: ms(100),
				Expect: "stale writes accepted", Verdict: "as expected", Expected: true, Example: example},
			{Scenario: "kill", Backend: "redis", Rounds: 2, Counts: Counts{Skipped: 1}, Recovered: 1,
				Expect: "no stale write accepted", Verdict: "UNEXPECTED: the key was taken again in 1 of 2 rounds", Expected: false,
				Errors: []string{"round 2: worker B exited"}},
		},
		Notes: []string{"a note " + evil},
	}
}

func render(t *testing.T, write func(io.Writer, *Report) error, rep *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b, rep); err != nil {
		t.Fatalf("render: %v", err)
	}
	return b.String()
}

func mustContain(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestWriteText(t *testing.T) {
	rep := sampleReport(t)
	out := render(t, WriteText, rep)
	lines := strings.Split(out, "\n")
	header := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(lines[0]), -1)
	if strings.Join(header, "|") != strings.Join(matrixHeader, "|") {
		t.Errorf("header columns %q, want %q", header, matrixHeader)
	}
	for i, c := range rep.Cells {
		row := lines[1+i]
		if !strings.HasPrefix(row, c.Scenario) || !strings.Contains(row, c.Backend) || !strings.HasSuffix(strings.TrimSpace(row), c.Verdict) {
			t.Errorf("row %d = %q, want %s on %s ending with its verdict %q", i, row, c.Scenario, c.Backend, c.Verdict)
		}
	}
	// Row 1 in detail: counts, new holder, taken again.
	if got := strings.Fields(lines[1])[:11]; strings.Join(got, " ") != "pause redlock 7 1 2 3 4 5 6 100ms 7/7" {
		t.Errorf("row 1 columns %q", got)
	}
	if got := strings.Fields(lines[2])[:11]; strings.Join(got, " ") != "kill redis 2 0 0 0 0 0 1 - 1/2" {
		t.Errorf("row 2 columns %q", got)
	}
	mustContain(t, out, "kill on redis: round 2: worker B exited\n", "note: a note "+evil+"\n", "2 cells in 3s\n")
}

func TestWriteMarkdown(t *testing.T) {
	rep := sampleReport(t)
	out := render(t, WriteMarkdown, rep)
	mustContain(t, out,
		"# lockctl chaos\n",
		"`lockctl chaos --url redis://x`, started 2026-01-02 03:04 UTC",
		"Built from lockctl v1, library v1, go1.26.0 linux/amd64.\n",
		"| "+strings.Join(matrixHeader, " | ")+" |\n|"+strings.Repeat("---|", len(matrixHeader))+"\n",
		"| redlock | redlock://a\\|b |", // a pipe in a value stays in its cell
		"| pause | redlock | 7 | 1 | 2 | 3 | 4 | 5 | 6 | 100ms | 7/7 | as expected |\n",
		"| kill | redis | 2 | 0 | 0 | 0 | 0 | 0 | 1 | - | 1/2 | UNEXPECTED: the key was taken again in 1 of 2 rounds |\n",
		"### pause on redlock\n",
		"### kill on redis\n",
		"- error: round 2: worker B exited\n",
	)
	for _, sc := range Scenarios {
		mustContain(t, out, "- **"+sc.Name+"** (")
	}
	// One timeline block: the first cell's example, with the engine's
	// marks shown with a dash for the client.
	blocks := regexp.MustCompile("(?s)```\n(.*?)```\n").FindAllStringSubmatch(out, -1)
	if len(blocks) != 1 {
		t.Fatalf("%d timeline blocks, want 1:\n%s", len(blocks), out)
	}
	tl := strings.Split(strings.TrimSuffix(blocks[0][1], "\n"), "\n")
	if len(tl) != len(rep.Cells[0].Example.Timeline) {
		t.Fatalf("timeline has %d lines, want %d: %q", len(tl), len(rep.Cells[0].Example.Timeline), tl)
	}
	for i, want := range []string{"10ms  A      granted, fence 5", "300ms  -      A paused (SIGSTOP)", "400ms  B      granted, fence 6"} {
		if strings.TrimSpace(tl[i]) != want {
			t.Errorf("timeline line %d = %q, want %q", i, tl[i], want)
		}
	}
	if i, j := strings.Index(out, "### kill on redis"), strings.Index(out, "```"); j > i {
		t.Errorf("the timeline block is not under the first cell")
	}
}

func TestWriteHTML(t *testing.T) {
	rep := sampleReport(t)
	out := render(t, WriteHTML, rep)
	ex := rep.Cells[0].Example

	if strings.Contains(out, "<script") {
		t.Errorf("a client name, mark or note with %q appears unescaped", evil)
	}
	mustContain(t, out, "&lt;script&gt;", "<svg", "</svg>", `<tr class="bad">`)
	if n := strings.Count(out, "<svg"); n != 1 {
		t.Errorf("%d charts, want 1 (one cell has an example)", n)
	}
	if n, want := strings.Count(out, "<rect"), len(ex.Holds)+len(ex.Writes); n != want {
		t.Errorf("%d <rect>, want one per hold and per write: %d", n, want)
	}
	if n := strings.Count(out, `class="bad"`); n != 1 {
		t.Errorf("%d rows marked bad, want 1", n)
	}
	if n, want := strings.Count(out, `class="mark"`), 2; n != want {
		t.Errorf("%d mark lines, want one per engine mark: %d", n, want)
	}
	// Each verdict has its colour, and each client its lane.
	for _, c := range []string{"#2a2", "#d00", "#e80", "#24c", "#a0a"} {
		mustContain(t, out, `fill="`+c+`"`)
	}
	if strings.Contains(out, `fill=""`) {
		t.Errorf("a write with no colour")
	}
	for _, v := range []string{"stale-accepted", "late-accepted", "stale-rejected", "rightful-rejected"} {
		mustContain(t, out, ": "+v+"</title>")
	}
	// Axes: the time ticks and label, a lane per client (writers
	// included) named on the y axis.
	mustContain(t, out, `class="axis-label x"`, `class="axis-label y"`, `>0s</text>`, `>200ms</text>`, `>1s</text>`, `id="timeline-pause-redlock"`, `viewBox="0 0 720 `)
	if n := strings.Count(out, `class="tick y"`); n != 3 {
		t.Errorf("%d client lanes named, want 3 (A, B and C)", n)
	}
	// No external reference, the SVG namespace and the empty favicon
	// (which keeps a browser from fetching one) aside.
	rest := strings.ReplaceAll(out, `xmlns="http://www.w3.org/2000/svg"`, "")
	rest = strings.Replace(rest, `<link rel="icon" href="data:,">`, "", 1)
	for _, s := range []string{"http://", "https://", "src=", "<link", "@import", "url("} {
		if strings.Contains(rest, s) {
			t.Errorf("the page references %q: it must be self-contained", s)
		}
	}
	// Well-formed enough: the chart is XML on its own, and the page's
	// elements balance.
	svg := out[strings.Index(out, "<svg"):]
	svg = svg[:strings.Index(svg, "</svg>")+len("</svg>")]
	if err := wellFormed(svg); err != nil {
		t.Errorf("the chart is not well-formed XML: %v\n%s", err, svg)
	}
	for _, tag := range []string{"html", "head", "body", "table", "tr", "td", "th", "h1", "h2", "h3", "p", "pre", "svg", "rect", "title"} {
		open := len(regexp.MustCompile(`<`+tag+`[\s>]`).FindAllString(out, -1))
		closed := strings.Count(out, "</"+tag+">")
		if open != closed {
			t.Errorf("<%s> opened %d times, closed %d", tag, open, closed)
		}
	}
	// Bars and ticks stay within the chart.
	w := regexp.MustCompile(`<svg [^>]*width="(\d+)"`).FindStringSubmatch(svg)
	for _, m := range regexp.MustCompile(`<rect x="(-?[\d.]+)"[^>]*width="([\d.]+)"`).FindAllStringSubmatch(svg, -1) {
		if strings.HasPrefix(m[1], "-") || len(w) < 2 || atof(t, m[1])+atof(t, m[2]) > atof(t, w[1]) {
			t.Errorf("rect at x=%s width %s outside the chart of width %v", m[1], m[2], w)
		}
	}
}

// TestWriteHTMLNoExample: a report with no example round draws no chart.
func TestWriteHTMLNoExample(t *testing.T) {
	rep := sampleReport(t)
	rep.Cells = rep.Cells[1:]
	out := render(t, WriteHTML, rep)
	if strings.Contains(out, "<svg") || strings.Contains(out, "<pre>") {
		t.Errorf("a chart or timeline for a cell with no example:\n%s", out)
	}
	mustContain(t, out, "<h3>kill on redis</h3>", "error: round 2: worker B exited")
}

func wellFormed(s string) error {
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func atof(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return f
}
