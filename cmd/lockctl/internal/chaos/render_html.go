package chaos

import (
	"cmp"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
	"github.com/distlock/locker/cmd/lockctl/internal/chart"
)

// WriteHTML writes the report as one self-contained HTML page (no
// scripts, no external assets, not even a favicon to fetch): the
// matrix, and per cell a timeline chart of one round: who believed it
// held the lock when, and each write with its verdict.
//
// The page stays legible on a phone: it is laid out at the screen's
// width (viewport meta), and the tables, timelines and round histories,
// which cannot shrink without their text getting too small to read,
// scroll sideways in boxes of their own rather than the page. The parts
// of a timeline are marked as bench's charts are: "point" on each hold
// and write (each with its tooltip), "axis-label x|y", "tick x|y".
func WriteHTML(w io.Writer, rep *Report) error {
	return htmlPage.Execute(w, rep)
}

var htmlPage = template.Must(template.New("chaos").Funcs(template.FuncMap{
	"row":      matrixRow,
	"header":   func() []string { return matrixHeader },
	"timeline": timelineSVG,
	"conns":    bench.ConnsText,
	"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"dur":      func(d time.Duration) string { return d.Round(time.Second).String() },
	"ms":       func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{{.Tool}}</title>
<style>
body{font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif;margin:0 auto;padding:0 16px 2em;max-width:1120px;color:#222}
code{font-size:12.5px;overflow-wrap:anywhere}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;white-space:nowrap}
tr.bad td{background:#fdd}
pre{font-size:12px;background:#f6f6f6;padding:8px;overflow-x:auto}
figure{margin:1em 0;overflow-x:auto}
/* Scaled below 660 pixels, a timeline's 12-unit text would fall under
   10 pixels: on a narrower screen it scrolls in its figure. */
svg{display:block;max-width:100%;min-width:660px;height:auto}
</style></head><body>
<h1>{{.Tool}}</h1>
<p><code>{{.Command}}</code>, started {{when .Started}}, took {{dur .Took}}, on {{.Machine}}.</p>
{{if .Build}}<p>Built from {{.Build}}.</p>{{end}}
<div class="scroll"><table><tr><th>backend</th><th>url</th><th>servers</th><th>fencing</th><th>TTL</th><th>expiry slack</th></tr>
{{range .Backends}}<tr><td>{{.Name}}</td><td>{{.URL}}</td><td>{{or .Servers "-"}}</td><td>{{.Fencing}}</td><td>{{.TTL}}</td><td>{{.ExpirySlack}}</td></tr>
{{end}}</table></div>
{{with conns .Connections}}<p>Connections: {{.}}.</p>{{end}}
<h2>Matrix</h2>
<div class="scroll"><table><tr>{{range header}}<th>{{.}}</th>{{end}}</tr>
{{range .Cells}}<tr{{if not .Expected}} class="bad"{{end}}>{{range row .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>
<p>In each timeline: a bar is the time a client believed it held the lock (from its grant to its loss, release or death);
a tick is a write: <span style="color:#2a2">rightful</span>, <span style="color:#24c">stale, rejected by the fence</span>,
<span style="color:#d00">stale, accepted after the new holder's write</span>, <span style="color:#e80">stale, accepted before it</span>,
<span style="color:#a0a">rightful, rejected</span>; a dashed line is a fault or a recovery.</p>
{{range $c := .Cells}}<h3>{{.Scenario}} on {{.Backend}}</h3>
<p>Expected: {{.Expect}}. Verdict: {{.Verdict}}.</p>
{{range .Errors}}<p>error: {{.}}</p>{{end}}
{{with .Example}}<figure>{{timeline $c .}}</figure>
<pre>{{range .Timeline}}{{ms .At}}  {{.Client}}  {{.What}}
{{end}}</pre>{{end}}
{{end}}
{{range .Notes}}<p>Note: {{.}}</p>{{end}}
</body></html>
`))

// Timeline layout, in the viewBox's units; the page scales the SVG to
// fit its figure.
const (
	tlWidth = 720.0
	tlLeft  = 96.0 // the y axis' label and the clients' names
	tlRight = 16.0
	tlTop   = 8.0
	tlLane  = 28.0
	tlBar   = 18.0 // a hold's bar, in its lane
	tlBelow = 44.0 // the x axis' ticks and label
)

// timeline draws a cell's example round.
type timeline struct {
	clients []string      // a lane each, in the order they first appear
	span    time.Duration // the x axis' end
}

// heldText names what a hold took, for its tooltip: " the lock", " a
// shared hold", " 1 of 2 permits".
func heldText(h Hold) string {
	if k := kindText(h); k != "" {
		return k
	}
	return " the lock"
}

// timelineSVG draws one round of the cell whose example it is: a bar per
// hold (the time a client believed it held the lock), a tick per write
// (coloured by verdict), the engine's marks (faults) as dashed lines, a
// time axis and a lane per client.
func timelineSVG(c Cell, res *RoundResult) template.HTML {
	tl := timeline{span: max(res.Took, time.Millisecond)}
	for _, h := range res.Holds {
		tl.lane(h.Client)
	}
	for _, w := range res.Writes {
		tl.lane(w.Client)
	}
	bottom := tlTop + tlLane*float64(max(len(tl.clients), 1))
	height := bottom + tlBelow
	id := chart.ID("timeline", c.Scenario, c.Backend) // "timeline-kill-redis-2" for redis#2
	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" id="%s" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-labelledby="%s-title" font-family="system-ui, sans-serif" font-size="12" fill="#222">`,
		id, tlWidth, height, tlWidth, height, id)
	fmt.Fprintf(b, `<title id="%s-title">%s on %s: one round's timeline</title>`, id, esc(c.Scenario), esc(c.Backend))
	tl.axes(b, bottom)
	for _, h := range res.Holds {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" class="point hold" fill="#9bc4e8"><title>%s held%s from %v to %v (%s)</title></rect>`,
			tl.x(h.From), tl.y(h.Client)+(tlLane-tlBar)/2, max(tl.x(h.To)-tl.x(h.From), 1), tlBar,
			esc(h.Client), esc(heldText(h)), h.From.Round(time.Millisecond), h.To.Round(time.Millisecond), esc(h.Ended))
	}
	colors := map[string]string{"rightful": "#2a2", "stale-accepted": "#d00", "late-accepted": "#e80", "stale-rejected": "#24c", "rightful-rejected": "#a0a"}
	for _, w := range res.Writes {
		verb := "wrote"
		if w.Read {
			verb = "read"
		}
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="4" height="%.0f" class="point write" fill="%s"><title>%s %s with fence %d at %v: %s</title></rect>`,
			tl.x(w.At)-2, tl.y(w.Client)+2, tlLane-4, cmp.Or(colors[w.Verdict], "#222"), esc(w.Client), verb, w.Fence, w.At.Round(time.Millisecond), esc(w.Verdict))
	}
	for _, m := range res.Timeline {
		if m.Client == "" {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" class="mark" stroke="#888" stroke-dasharray="3,3"><title>%v: %s</title></line>`,
				tl.x(m.At), tl.x(m.At), tlTop, bottom, m.At.Round(time.Millisecond), esc(m.What))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// lane adds client's lane, if it has none yet.
func (tl *timeline) lane(client string) {
	if !slices.Contains(tl.clients, client) {
		tl.clients = append(tl.clients, client)
	}
}

func (tl *timeline) x(d time.Duration) float64 {
	return tlLeft + (tlWidth-tlLeft-tlRight)*float64(d)/float64(tl.span)
}

// y is the top of client's lane.
func (tl *timeline) y(client string) float64 {
	return tlTop + tlLane*float64(max(slices.Index(tl.clients, client), 0))
}

// axes draws the time axis (ticks, grid and label) below the lanes, and
// the clients' names and the y axis' label left of them.
func (tl *timeline) axes(b *strings.Builder, bottom float64) {
	step := max(time.Duration(chart.Step(max(float64(tl.span)/8, 1))), 1)
	for t := time.Duration(0); t <= tl.span; t += step {
		x := tl.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#e4e8ec"/>`, x, x, tlTop, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" class="tick x" fill="#59636e">%s</text>`, x, bottom+16, t)
	}
	fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#59636e"/>`, tlLeft, tlWidth-tlRight, bottom, bottom)
	fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" class="axis-label x" font-weight="600">time since the round began</text>`,
		(tlLeft+tlWidth-tlRight)/2, bottom+36)
	for _, c := range tl.clients {
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end" class="tick y">%s</text>`,
			tlLeft-8, tl.y(c)+tlLane/2+4, esc(chart.Shorten(c, 10))) // cut to fit; the tooltips name it whole
	}
	fmt.Fprintf(b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle" class="axis-label y" font-weight="600">client</text>`,
		(tlTop+bottom)/2)
}

func esc(s string) string { return template.HTMLEscapeString(s) }
