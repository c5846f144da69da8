package chaos

import (
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"
)

// WriteHTML writes the report as one self-contained HTML page (no
// scripts, no external assets): the matrix, and per cell a timeline chart
// of one round: who believed it held the lock when, and each write with
// its verdict.
func WriteHTML(w io.Writer, rep *Report) error {
	return htmlPage.Execute(w, rep)
}

var htmlPage = template.Must(template.New("chaos").Funcs(template.FuncMap{
	"row":      matrixRow,
	"header":   func() []string { return matrixHeader },
	"timeline": timelineSVG,
	"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	"dur":      func(d time.Duration) string { return d.Round(time.Second).String() },
	"ms":       func(d time.Duration) string { return d.Round(time.Millisecond).String() },
}).Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Tool}}</title>
<style>
body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
tr.bad td{background:#fdd}pre{font-size:12px;background:#f6f6f6;padding:8px}
</style></head><body>
<h1>{{.Tool}}</h1>
<p><code>{{.Command}}</code>, started {{when .Started}}, took {{dur .Took}}, on {{.Machine}}.</p>
<table><tr><th>backend</th><th>url</th><th>servers</th><th>fencing</th><th>TTL</th><th>expiry slack</th></tr>
{{range .Backends}}<tr><td>{{.Name}}</td><td>{{.URL}}</td><td>{{or .Servers "-"}}</td><td>{{.Fencing}}</td><td>{{.TTL}}</td><td>{{.ExpirySlack}}</td></tr>
{{end}}</table>
<h2>Matrix</h2>
<table><tr>{{range header}}<th>{{.}}</th>{{end}}</tr>
{{range .Cells}}<tr{{if not .Expected}} class="bad"{{end}}>{{range row .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
<p>In each timeline: a bar is the time a client believed it held the lock (from its grant to its loss, release or death);
a tick is a write: <span style="color:#2a2">rightful</span>, <span style="color:#24c">stale, rejected by the fence</span>,
<span style="color:#d00">stale, accepted after the new holder's write</span>, <span style="color:#e80">stale, accepted before it</span>,
<span style="color:#a0a">rightful, rejected</span>; a dashed line is a fault or a recovery.</p>
{{range .Cells}}<h3>{{.Scenario}} on {{.Backend}}</h3>
<p>Expected: {{.Expect}}. Verdict: {{.Verdict}}.</p>
{{range .Errors}}<p>error: {{.}}</p>{{end}}
{{with .Example}}{{timeline .}}
<pre>{{range .Timeline}}{{ms .At}}  {{.Client}}  {{.What}}
{{end}}</pre>{{end}}
{{end}}
{{range .Notes}}<p>Note: {{.}}</p>{{end}}
</body></html>
`))

// timelineSVG draws one round: a bar per hold (the time a client believed
// it held the lock), a tick per write (green accepted, red stale
// accepted, blue rejected), and the engine's marks (faults) as dashed
// lines.
func timelineSVG(res *RoundResult) template.HTML {
	const width, left, lane = 720.0, 40.0, 28.0
	clients := []string{}
	for _, h := range res.Holds {
		if !slices.Contains(clients, h.Client) {
			clients = append(clients, h.Client)
		}
	}
	span := max(res.Took, time.Millisecond)
	x := func(d time.Duration) float64 { return left + (width-left-10)*float64(d)/float64(span) }
	y := func(c string) float64 {
		for i, n := range clients {
			if n == c {
				return 10 + lane*float64(i)
			}
		}
		return 10
	}
	height := 20 + lane*float64(max(len(clients), 1)) + 14
	b := &strings.Builder{}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-size="11">`, width, height)
	for _, c := range clients {
		fmt.Fprintf(b, `<text x="4" y="%.1f">%s</text>`, y(c)+13, template.HTMLEscapeString(c))
	}
	for _, h := range res.Holds {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="18" fill="#9bc4e8"><title>%s held: %s</title></rect>`,
			x(h.From), y(h.Client), max(x(h.To)-x(h.From), 1), template.HTMLEscapeString(h.Client), template.HTMLEscapeString(h.Ended))
	}
	colors := map[string]string{"rightful": "#2a2", "stale-accepted": "#d00", "late-accepted": "#e80", "stale-rejected": "#24c", "rightful-rejected": "#a0a"}
	for _, w := range res.Writes {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="4" height="24" fill="%s"><title>write, fence %d: %s</title></rect>`,
			x(w.At)-2, y(w.Client)-3, colors[w.Verdict], w.Fence, w.Verdict)
	}
	for _, m := range res.Timeline {
		if m.Client == "" {
			fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="4" y2="%.1f" stroke="#888" stroke-dasharray="3,3"><title>%s: %s</title></line>`,
				x(m.At), x(m.At), height-14, m.At.Round(time.Millisecond), template.HTMLEscapeString(m.What))
		}
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">0</text><text x="%.1f" y="%.1f" text-anchor="end">%v</text></svg>`,
		left, height-2, width-10, height-2, span.Round(time.Millisecond))
	return template.HTML(b.String())
}
