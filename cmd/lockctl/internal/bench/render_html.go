package bench

// This file writes a Report as one self-contained HTML page: inline
// <style>, charts as inline <svg> drawn here, and the same tables as the
// text output. The page loads nothing (no scripts, fonts, stylesheets or
// images), so it opens as it is, offline, and can be attached to an
// issue.
//
// It stays legible on a phone: it is laid out at the screen's width
// (viewport meta), and what cannot shrink without its text getting too
// small to read (tables, charts) scrolls sideways in a box of its own,
// not the page. It asks for no favicon either, which a browser would
// otherwise fetch when the page is served over HTTP (a CI artifact).
//
// The parts of a chart a reader (and the browser test) looks for are
// marked with classes: "point" on every data point (each with its
// tooltip), "axis-label x|y" on the axis labels, "tick x|y" on the tick
// labels, "series" on a line's group.
//
// Escaping: the page is an html/template, which escapes every field of
// the report it prints. The charts are built here as strings and handed
// to the template as template.HTML, so every string from the report that
// goes into a chart must go through svgEsc; numbers are formatted here.

import (
	"cmp"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distlock/locker/cmd/lockctl/internal/chart"
)

// WriteHTML writes r as one self-contained HTML page: header, targets,
// notes, charts of the scenarios measured, and a table per scenario.
func WriteHTML(w io.Writer, r *Report) error {
	r = renderOrEmpty(r)
	page := htmlPage{
		Title:    renderTitle(r),
		Header:   renderHeader(r),
		Targets:  renderTargetsTable(r),
		Summary:  htmlSummary(r.Targets),
		Notes:    r.Notes,
		Charts:   htmlCharts(r),
		Backends: renderBackendsTable(r),
	}
	seen := map[string]int{}
	for _, t := range renderScenarioTables(r) {
		id := chart.ID("s", t.Title)
		if seen[id]++; seen[id] > 1 { // "a b" and "a-b" would share an id
			id += "-" + strconv.Itoa(seen[id])
		}
		page.Tables = append(page.Tables, htmlSection{ID: id, Table: t})
	}
	return htmlTemplate.Execute(w, page)
}

// htmlPage is what the page template prints.
type htmlPage struct {
	Title    string
	Header   []renderKV
	Targets  renderTable
	Summary  []htmlCount
	Notes    []string
	Charts   []template.HTML // inline SVG, escaped as it was built
	Tables   []htmlSection
	Backends renderTable
}

// htmlSection is a scenario's table with an id to link to.
type htmlSection struct {
	ID    string
	Table renderTable
}

// htmlCount is one part of the targets' summary: "3 met".
type htmlCount struct {
	N     int
	What  string
	Class string
}

// htmlSummary counts the targets met, missed and not measured.
func htmlSummary(ts []Target) []htmlCount {
	counts := []htmlCount{{What: "met", Class: "met"}, {What: "missed", Class: "missed"}, {What: "not measured", Class: "unmeasured"}}
	for _, t := range ts {
		_, class := renderTargetStatus(t)
		for i := range counts {
			if counts[i].Class == class {
				counts[i].N++
			}
		}
	}
	return slices.DeleteFunc(counts, func(c htmlCount) bool { return c.N == 0 })
}

// htmlCharts draws the charts the report has figures for, in order:
// uncontended latency, throughput by clients, hot key, recovery,
// failover, memory, read-write, semaphore.
func htmlCharts(r *Report) []template.HTML {
	st := svgStylesFor(r)
	var svgs []string
	svgs = append(svgs, svgLatencyChart(r, st), svgThroughputChart(r, st))
	svgs = append(svgs, svgHotKeyCharts(r, st)...)
	svgs = append(svgs, svgRecoveryChart(r), svgFailoverChart(r, st), svgMemoryChart(r), svgReadWriteChart(r, st), svgSemaphoreChart(r, st))
	var out []template.HTML
	for _, s := range svgs {
		if s != "" {
			out = append(out, template.HTML(s)) // built with svgEsc throughout
		}
	}
	return out
}

// htmlTemplate is the page. Everything it prints from the report is
// escaped by html/template; the charts come pre-escaped.
var htmlTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{{.Title}}</title>
<style>
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --head: #f6f8fa; --met: #1a7f37; --missed: #cf222e; --warn: #9a6700; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--fg); font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header, main, footer { max-width: 1120px; margin: 0 auto; padding: 0 16px; }
h1 { font-size: 1.6em; margin: 1.2em 0 .4em; }
h2 { font-size: 1.25em; margin: 2em 0 .6em; padding-bottom: .3em; border-bottom: 1px solid var(--line); }
h3 { font-size: 1.05em; margin: 1.6em 0 .2em; }
dl.meta { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .15em 1.2em; margin: 0; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--head); padding: .1em .35em; border-radius: 4px; word-break: break-all; }
nav a { margin-right: 1em; color: #0969da; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; margin: .4em 0; }
th, td { padding: .3em .7em; border-bottom: 1px solid var(--line); text-align: left; white-space: nowrap; }
th { background: var(--head); font-weight: 600; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.targets td:last-child { white-space: normal; min-width: 18em; }
tr.failed td { background: #fff8c5; }
tr.met td:first-child { color: var(--met); font-weight: 600; }
tr.missed td { background: #ffebe9; }
tr.missed td:first-child { color: var(--missed); font-weight: 600; }
tr.unmeasured td { color: var(--muted); }
.summary span { display: inline-block; margin-right: .6em; padding: .1em .6em; border-radius: 1em; font-weight: 600; }
.summary .met { background: #dafbe1; color: var(--met); }
.summary .missed { background: #ffebe9; color: var(--missed); }
.summary .unmeasured { background: var(--head); color: var(--muted); }
.about { color: var(--muted); margin: 0 0 .4em; }
ul.errors { color: var(--warn); margin: .3em 0; }
figure { margin: 1.6em 0; overflow-x: auto; }
/* Scaled below 660 pixels, a chart's 12-unit text would fall under 10
   pixels: on a narrower screen the chart scrolls in its figure. */
svg { display: block; max-width: 100%; min-width: 660px; height: auto; }
footer { color: var(--muted); font-size: 12px; margin-top: 3em; padding-bottom: 2em; }
</style>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<dl class="meta">
{{- range .Header}}
<dt>{{.Key}}</dt><dd>{{if eq .Key "command"}}<code>{{.Value}}</code>{{else}}{{.Value}}{{end}}</dd>
{{- end}}
</dl>
</header>
<main>
{{- if .Targets.Rows}}
<h2>Targets</h2>
<p class="summary">{{range .Summary}}<span class="{{.Class}}">{{.N}} {{.What}}</span>{{end}}</p>
<div class="targets">{{template "table" .Targets}}</div>
{{- end}}
{{- with .Notes}}
<h2>Notes</h2>
<ul>{{range .}}<li>{{.}}</li>{{end}}</ul>
{{- end}}
{{- with .Charts}}
<h2>Charts</h2>
{{- range .}}
<figure>{{.}}</figure>
{{- end}}
{{- end}}
<h2>Results</h2>
{{- if .Tables}}
<nav>{{range .Tables}}<a href="#{{.ID}}">{{.Table.Title}}</a>{{end}}</nav>
{{- range .Tables}}
<h3 id="{{.ID}}">{{.Table.Title}}</h3>
{{- with .Table.About}}
<p class="about">{{.}}</p>
{{- end}}
{{template "table" .Table}}
{{- end}}
{{- else}}
<p>No results.</p>
{{- end}}
{{- if .Backends.Rows}}
<h2>Backends</h2>
{{template "table" .Backends}}
{{- end}}
</main>
<footer>Written by {{.Title}}. This page is self-contained: it loads nothing.</footer>
</body>
</html>
{{define "table"}}<div class="scroll"><table>
<thead><tr>{{range $i, $h := .Head}}<th{{if index $.Numeric $i}} class="num"{{end}}>{{$h}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Rows}}
<tr{{with .Class}} class="{{.}}"{{end}}>{{range $i, $c := .Cells}}<td{{if index $.Numeric $i}} class="num"{{end}}>{{$c}}</td>{{end}}</tr>
{{- end}}
</tbody>
</table></div>
{{- with .Errors}}
<ul class="errors">{{range .}}<li>{{.}}</li>{{end}}</ul>
{{- end}}
{{end}}`))

// ---- chart data: which results each chart draws, and how ----

// svgScenario returns the results of one scenario, ordered for reading.
func svgScenario(r *Report, scenario string) []Result {
	var rs []Result
	for _, res := range r.Results {
		if res.Scenario == scenario {
			rs = append(rs, res)
		}
	}
	return renderSortResults(r, rs)
}

// svgLatencyChart draws the uncontended scenario's latency distribution,
// one line per design, as HDR plots do: latency against percentile, the
// percentile axis stretched towards the tail (each step one more nine)
// and the latency axis logarithmic.
func svgLatencyChart(r *Report, st svgStyles) string {
	var lines []svgLine
	maxX, lo, hi := 2.0, math.Inf(1), 0.0
	for _, res := range svgScenario(r, ScenarioUncontended) {
		l := svgLine{name: renderLabel(res), style: st.of(res)}
		for _, p := range svgLatencyPoints(res.Latency) {
			x, v := svgNines(p.Percentile), float64(p.Value)
			tip := fmt.Sprintf("%s: %s at %s", l.name, renderDuration(p.Value), svgPercentLabel(p.Percentile))
			l.points = append(l.points, svgPoint{x: x, y: math.Log10(v), tip: tip})
			maxX, lo, hi = max(maxX, x), min(lo, v), max(hi, v)
		}
		if len(l.points) > 0 {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return ""
	}
	f := svgFrame{
		id:     "chart-latency",
		title:  "Uncontended: latency distribution",
		desc:   "Latency of one lock and unlock, at each percentile, per backend and design. Lower is better.",
		xLabel: "percentile (each step one more nine)",
		yLabel: "latency (log scale)",
		legend: svgLineLegend(lines),
	}
	return svgLineChart(f, svgPercentileAxis(math.Ceil(maxX)), svgLogDurationAxis(lo, hi), lines)
}

// svgLatencyPoints is a distribution to plot: the percentile ladder when
// the result has one, otherwise its p50, p90, p99, p99.9 and max. No
// point is placed past the percentile of the slowest of Count samples:
// the max (the 100th percentile) sits there rather than at the axis'
// end, which would claim a longer tail than was measured. Zero
// latencies are left out: the axis is logarithmic.
func svgLatencyPoints(l Latency) []Point {
	maxAt := 99.99
	if l.Count > 0 {
		maxAt = max(100*(1-1/float64(l.Count)), 99.9)
	}
	pts := slices.Clone(l.Percentiles)
	if len(pts) == 0 {
		pts = []Point{{50, l.P50}, {90, l.P90}, {99, l.P99}, {99.9, l.P999}, {100, l.Max}}
	}
	for i := range pts { // past the slowest sample, every percentile is the max
		pts[i].Percentile = min(pts[i].Percentile, maxAt)
	}
	pts = slices.DeleteFunc(pts, func(p Point) bool { return p.Value <= 0 })
	slices.SortStableFunc(pts, func(a, b Point) int { return cmp.Compare(a.Percentile, b.Percentile) })
	return pts
}

// svgMaxNines caps the percentile axis at 99.9999%: a tail measured
// further (over a million samples) is drawn there.
const svgMaxNines = 6

// svgNines places a percentile on the HDR axis: 0 at 0%, 1 at 90%, 2 at
// 99%, 3 at 99.9%.
func svgNines(p float64) float64 {
	if p >= 100 {
		return svgMaxNines
	}
	return min(-math.Log10(1-p/100), svgMaxNines)
}

// svgPercentileAxis is the HDR percentile axis, from 0% to maxNines
// nines.
func svgPercentileAxis(maxNines float64) svgAxis {
	a := svgAxis{min: 0, max: maxNines}
	a.ticks = append(a.ticks, svgTick{0, "0%"}, svgTick{math.Log10(2), "50%"})
	for n := 1.0; n <= maxNines; n++ {
		a.ticks = append(a.ticks, svgTick{n, svgPercentLabel(100 * (1 - math.Pow(10, -n)))})
	}
	return a
}

// svgPercentLabel prints a percentile: "50%", "99.9%", "99.9978%".
func svgPercentLabel(p float64) string {
	return strconv.FormatFloat(math.Round(p*1e4)/1e4, 'f', -1, 64) + "%"
}

// svgLogDurationAxis is a logarithmic latency axis (in log10 of
// nanoseconds) covering lo to hi, with a tick at each power of ten, and
// at 2 and 5 times it when the range is narrow.
func svgLogDurationAxis(lo, hi float64) svgAxis {
	a := svgAxis{min: math.Floor(math.Log10(lo)), max: math.Ceil(math.Log10(hi))}
	if a.max <= a.min {
		a.max = a.min + 1
	}
	steps := []float64{1}
	if a.max-a.min <= 2 {
		steps = []float64{1, 2, 5}
	}
	for e := a.min; e <= a.max; e++ {
		for _, m := range steps {
			v := math.Log10(m) + e
			if v <= a.max {
				a.ticks = append(a.ticks, svgTick{v, renderDuration(time.Duration(math.Round(math.Pow(10, v))))})
			}
		}
	}
	return a
}

// svgThroughputChart draws the throughput scenario: rate against
// clients, a line per design.
func svgThroughputChart(r *Report, st svgStyles) string {
	var rs []Result
	for _, res := range svgScenario(r, ScenarioThroughput) {
		if res.Params["clients"] > 0 && !math.IsNaN(svgFinite(res.PerSec)) {
			rs = append(rs, res)
		}
	}
	if len(rs) == 0 {
		return ""
	}
	var clients []int
	top, unit := 0.0, ""
	lines := svgGroup(rs, func(res Result) svgLine {
		return svgLine{name: renderSeriesName(res.Backend, res.Design), style: st.of(res)}
	}, func(l *svgLine, res Result) {
		c := res.Params["clients"]
		clients = append(clients, c)
		top, unit = max(top, res.PerSec), cmp.Or(unit, res.Unit)
		tip := fmt.Sprintf("%s, %d clients: %s", l.name, c, renderRate(res.PerSec, res.Unit))
		l.points = append(l.points, svgPoint{x: math.Log2(float64(c)), y: res.PerSec, tip: tip})
	})
	unit = renderOr(unit, "ops")
	f := svgFrame{
		id:     "chart-throughput",
		title:  "Throughput by clients",
		desc:   "Operations per second against the number of clients, each client on its own key, per backend and design. Higher is better.",
		xLabel: "clients (log scale)",
		yLabel: unit + " per second",
		legend: svgLineLegend(lines),
	}
	return svgLineChart(f, svgClientsAxis(clients), svgLinearAxis(top, renderCompact), lines)
}

// svgGroup gathers results into series by backend and design, in the
// order first met: start makes a series, add adds a result to it. A
// series' points are then sorted by x.
func svgGroup(rs []Result, start func(Result) svgLine, add func(*svgLine, Result)) []svgLine {
	var lines []svgLine
	index := map[string]int{}
	for _, res := range rs {
		k := renderSeriesName(res.Backend, res.Design)
		i, ok := index[k]
		if !ok {
			i = len(lines)
			index[k] = i
			lines = append(lines, start(res))
		}
		add(&lines[i], res)
	}
	for i := range lines {
		slices.SortStableFunc(lines[i].points, func(a, b svgPoint) int { return cmp.Compare(a.x, b.x) })
	}
	return lines
}

// svgClientsAxis is a log-2 axis with a tick at each client count.
func svgClientsAxis(clients []int) svgAxis {
	slices.Sort(clients)
	clients = slices.Compact(clients)
	lo, hi := math.Log2(float64(clients[0])), math.Log2(float64(clients[len(clients)-1]))
	pad := (hi - lo) * 0.04 // keeps the end points' dots off the edges
	if hi == lo {
		pad = 0.5
	}
	a := svgAxis{min: lo - pad, max: hi + pad}
	for _, c := range clients {
		a.ticks = append(a.ticks, svgTick{math.Log2(float64(c)), strconv.Itoa(c)})
	}
	return a
}

// svgHotKeyCharts draws the hot-key scenario as two grouped bar charts,
// handoffs per second and handoff p50, grouped by number of waiters,
// a bar per design.
func svgHotKeyCharts(r *Report, st svgStyles) []string {
	rs := svgScenario(r, ScenarioHotKey)
	if len(rs) == 0 {
		return nil
	}
	var waiters []int
	for _, res := range rs {
		waiters = append(waiters, res.Params["waiters"])
	}
	slices.Sort(waiters)
	waiters = slices.Compact(waiters)
	cats := make([]string, len(waiters))
	for i, w := range waiters {
		cats[i] = fmt.Sprintf("%d waiters", w)
		if w == 0 {
			cats[i] = "waiters not given"
		}
	}
	rate := svgHotKeySeries(rs, waiters, st, func(res Result) (float64, string) {
		return res.PerSec, renderRate(res.PerSec, res.Unit)
	})
	p50 := svgHotKeySeries(rs, waiters, st, func(res Result) (float64, string) {
		return float64(res.Latency.P50), "p50 " + renderDuration(res.Latency.P50)
	})
	return []string{
		svgGroupedBars(svgFrame{
			id: "chart-hotkey-rate", title: "Hot key: handoffs per second",
			desc:   "How many times per second the lock on one key passed from one waiter to the next, by number of waiters, per backend and design. Higher is better.",
			xLabel: "waiters on one key", yLabel: "handoffs per second", legend: svgBarLegend(rate),
		}, cats, svgLinearAxis(svgTop(rate), renderCompact), rate),
		svgGroupedBars(svgFrame{
			id: "chart-hotkey-p50", title: "Hot key: handoff latency, p50",
			desc:   "The median time from one waiter releasing the key to the next one holding it, by number of waiters, per backend and design. Lower is better.",
			xLabel: "waiters on one key", yLabel: "p50 handoff latency", legend: svgBarLegend(p50),
		}, cats, svgLinearAxis(svgTop(p50), svgDurationLabel), p50),
	}
}

// svgHotKeySeries makes a bar series per design, with a value (and its
// tooltip) per number of waiters; NaN where it was not measured.
func svgHotKeySeries(rs []Result, waiters []int, st svgStyles, value func(Result) (float64, string)) []svgBarSeries {
	var series []svgBarSeries
	index := map[string]int{}
	for _, res := range rs {
		name := renderSeriesName(res.Backend, res.Design)
		i, ok := index[name]
		if !ok {
			i = len(series)
			index[name] = i
			s := svgBarSeries{name: name, style: st.of(res), values: make([]float64, len(waiters)), tips: make([]string, len(waiters))}
			for j := range s.values {
				s.values[j] = math.NaN()
			}
			series = append(series, s)
		}
		j := slices.Index(waiters, res.Params["waiters"])
		v, tip := value(res)
		series[i].values[j] = svgFinite(v)
		series[i].tips[j] = fmt.Sprintf("%s, %d waiters: %s", name, res.Params["waiters"], tip)
	}
	return series
}

// svgFinite returns v, or NaN (not drawn) when v is NaN or infinite.
func svgFinite(v float64) float64 {
	if math.IsInf(v, 0) {
		return math.NaN()
	}
	return v
}

// svgTop is the largest value in the series.
func svgTop(series []svgBarSeries) float64 {
	top := 0.0
	for _, s := range series {
		for _, v := range s.values {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	return top
}

// Colours with a meaning of their own, apart from the designs' colours.
const (
	svgGood  = "#2da44e"
	svgBad   = "#cf222e"
	svgInk   = "#1f2328"
	svgMuted = "#59636e"
	svgGrid  = "#e4e8ec"
	svgBytes = "#0072B2"
)

// svgRecoveryChart draws the recovery scenario: for each design, the
// slowest recovery (the Latency's max, or its highest percentile given)
// as a bar, green when every round recovered within the bound and red
// when one did not, with the bound marked.
func svgRecoveryChart(r *Report) string {
	var bars []svgHBar
	top, anyBad, anyGood := 0.0, false, false
	for _, res := range renderSortResults(r, r.Results) {
		v := res.Recovery
		if v == nil {
			continue
		}
		slow := cmp.Or(res.Latency.Max, res.Latency.P999, res.Latency.P99, res.Latency.P50)
		ok := v.Within == v.Rounds
		anyBad, anyGood = anyBad || !ok, anyGood || ok
		style := svgStyle{fill: svgGood, stroke: svgGood}
		if !ok {
			style = svgStyle{fill: svgBad, stroke: svgBad}
		}
		text := fmt.Sprintf("%s, %d/%d within", renderDuration(slow), v.Within, v.Rounds)
		bars = append(bars, svgHBar{
			label: renderLabel(res), v: float64(slow), mark: float64(v.Bound), text: text, style: style,
			tip: fmt.Sprintf("%s: slowest recovery %s; bound %s; %d of %d rounds within it", renderLabel(res), renderDuration(slow), renderDuration(v.Bound), v.Within, v.Rounds),
		})
		top = max(top, float64(slow), float64(v.Bound))
	}
	if len(bars) == 0 {
		return ""
	}
	var legend []svgLegendItem
	if anyGood {
		legend = append(legend, svgLegendItem{"slowest recovery, every round within the bound", svgStyle{fill: svgGood, stroke: svgGood}, "bar"})
	}
	if anyBad {
		legend = append(legend, svgLegendItem{"slowest recovery, some rounds over the bound", svgStyle{fill: svgBad, stroke: svgBad}, "bar"})
	}
	legend = append(legend, svgLegendItem{"bound: TTL + expiry slack + one round trip", svgStyle{stroke: svgInk}, "rule"})
	f := svgFrame{
		id: "chart-recovery", title: "Recovery after the holder is killed",
		desc:   "How long a waiter took to get a lock whose holder was killed, slowest round, against the bound, per backend and design. Shorter is better; past the bound is a miss.",
		xLabel: "time until the waiter holds the lock", legend: legend,
	}
	return svgHBarChart(f, svgLinearAxis(top, svgDurationLabel), bars)
}

// svgFailoverChart draws the failover scenario: for each design, the
// median time from the leader's kill until another led as a bar, the
// TTL marked; the p90 and the slowest are in the bar's text.
func svgFailoverChart(r *Report, st svgStyles) string {
	var bars []svgHBar
	top := 0.0
	for _, res := range renderSortResults(r, r.Results) {
		v := res.Failover
		if v == nil {
			continue
		}
		l := res.Latency
		bars = append(bars, svgHBar{
			label: renderLabel(res), v: float64(l.P50), mark: float64(v.TTL), style: st.of(res),
			text: fmt.Sprintf("p50 %s, p90 %s, slowest %s", renderDuration(l.P50), renderDuration(l.P90), renderDuration(l.Max)),
			tip: fmt.Sprintf("%s: a new leader %s after the leader was killed (p50), p90 %s, slowest %s, over %d leaders killed; TTL %s, expiry slack %s",
				renderLabel(res), renderDuration(l.P50), renderDuration(l.P90), renderDuration(l.Max), v.Rounds, renderDuration(v.TTL), renderDuration(v.ExpirySlack)),
		})
		top = max(top, float64(l.Max), float64(v.TTL))
	}
	if len(bars) == 0 {
		return ""
	}
	f := svgFrame{
		id: "chart-failover", title: "Failover after the leader is killed",
		desc:   "How long after the leader was killed another campaigner led (median), per backend and election design, beside the TTL they all have. Shorter is better.",
		xLabel: "time until a new leader leads",
		legend: []svgLegendItem{{"TTL of the leadership", svgStyle{stroke: svgInk}, "rule"}},
	}
	return svgHBarChart(f, svgLinearAxis(top, svgDurationLabel), bars)
}

// svgMemoryChart draws the held-locks scenario: the client heap each
// held lock costs, per design.
func svgMemoryChart(r *Report) string {
	var bars []svgHBar
	top := 0.0
	for _, res := range renderSortResults(r, r.Results) {
		m := res.Memory
		if m == nil || math.IsNaN(svgFinite(m.BytesPerLock)) {
			continue
		}
		text := fmt.Sprintf("%s, %d goroutines", renderBytes(m.BytesPerLock), m.Goroutines)
		bars = append(bars, svgHBar{
			label: renderLabel(res), v: m.BytesPerLock, mark: math.NaN(), text: text,
			style: svgStyle{fill: svgBytes, stroke: svgBytes},
			tip:   fmt.Sprintf("%s: %s per lock holding %s locks; %d more goroutines", renderLabel(res), renderBytes(m.BytesPerLock), renderThousands(int64(m.Locks)), m.Goroutines),
		})
		top = max(top, m.BytesPerLock)
	}
	if len(bars) == 0 {
		return ""
	}
	f := svgFrame{
		id: "chart-memory", title: "Held locks: client memory per lock",
		desc:   "Growth of the client's live heap per lock while holding many locks at once, per backend and design. Smaller is better.",
		xLabel: "heap bytes per held lock",
		legend: []svgLegendItem{{"live heap growth / locks held", svgStyle{fill: svgBytes, stroke: svgBytes}, "bar"}},
	}
	return svgHBarChart(f, svgLinearAxis(top, func(v float64) string { return renderThousands(int64(v)) }), bars)
}

// svgReadWriteChart draws the read-write scenario: for each design, the
// writer's longest wait under the stream of readers as a bar (red where
// a write was still waiting at a step's end), its p99 marked.
func svgReadWriteChart(r *Report, st svgStyles) string {
	var bars []svgHBar
	top, anyStarved := 0.0, false
	for _, res := range renderSortResults(r, r.Results) {
		v := res.ReadWrite
		if v == nil {
			continue
		}
		style := st.of(res)
		if v.Starved > 0 {
			style, anyStarved = svgStyle{fill: svgBad, stroke: svgBad}, true
		}
		mark := math.NaN()
		if v.Wait.P99 > 0 {
			mark = float64(v.Wait.P99)
		}
		bars = append(bars, svgHBar{
			label: renderLabel(res), v: float64(v.LongestWait), mark: mark, style: style,
			text: fmt.Sprintf("%s, %d starved", renderDuration(v.LongestWait), v.Starved),
			tip: fmt.Sprintf("%s: the writer's longest wait %s, p99 %s, p50 %s; %d writes, %d still waiting at a step's end; readers at %s",
				renderLabel(res), renderDuration(v.LongestWait), renderDuration(v.Wait.P99), renderDuration(v.Wait.P50), v.Writes, v.Starved, renderRate(res.PerSec, res.Unit)),
		})
		top = max(top, float64(v.LongestWait), float64(v.Wait.P99))
	}
	if len(bars) == 0 {
		return ""
	}
	legend := []svgLegendItem{{"writer's p99 wait", svgStyle{stroke: svgInk}, "rule"}}
	if anyStarved {
		legend = append(legend, svgLegendItem{"longest wait, some writes still waiting at a step's end", svgStyle{fill: svgBad, stroke: svgBad}, "bar"})
	}
	f := svgFrame{
		id: "chart-read-write", title: "Read-write: the writer's longest wait under a stream of readers",
		desc:   "How long the writer waited at most for the write lock while readers kept taking read locks, per backend and design, with its p99 marked. Shorter is better; a backend that keeps no queue lets overlapping readers hold a writer off.",
		xLabel: "writer's wait for the write lock", legend: legend,
	}
	return svgHBarChart(f, svgLinearAxis(top, svgDurationLabel), bars)
}

// svgSemaphoreChart draws the semaphore scenario: permits granted per
// second at the limit, per design.
func svgSemaphoreChart(r *Report, st svgStyles) string {
	var bars []svgHBar
	top := 0.0
	for _, res := range renderSortResults(r, r.Results) {
		v := res.Semaphore
		if v == nil {
			continue
		}
		bars = append(bars, svgHBar{
			label: renderLabel(res), v: svgFinite(res.PerSec), mark: math.NaN(), style: st.of(res),
			text: renderRate(res.PerSec, res.Unit),
			tip: fmt.Sprintf("%s: %s with %d clients on %d permits; wait p50 %s, p99 %s; at most %d held at once",
				renderLabel(res), renderRate(res.PerSec, res.Unit), v.Clients, v.Permits, renderDuration(res.Latency.P50), renderDuration(res.Latency.P99), v.MostHeld),
		})
		top = max(top, svgFinite(res.PerSec))
	}
	if len(bars) == 0 {
		return ""
	}
	f := svgFrame{
		id: "chart-semaphore", title: "Semaphore: permits granted per second at the limit",
		desc:   "How many permits per second a semaphore granted while twice as many clients as it has permits contended for them, per backend and design. Higher is better.",
		xLabel: "permits granted per second",
	}
	return svgHBarChart(f, svgLinearAxis(top, renderCompact), bars)
}

// ---- styles: a hue per backend, a shade and a dash per design ----

// svgStyle is how one series is drawn. Empty fields are not drawn.
type svgStyle struct {
	fill, stroke, dash string
}

// svgStyles maps backend/design to its style, so that a design looks
// the same in every chart.
type svgStyles map[string]svgStyle

func (s svgStyles) of(res Result) svgStyle {
	return s[renderSeriesName(res.Backend, res.Design)]
}

// svgPalette is the backends' hues (Okabe-Ito, safe for colour-blind
// readers); svgShades lighten them and svgDashes dash them for the
// second, third... design on a backend.
var (
	svgPalette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"}
	svgShades  = []float64{0, 0.3, 0.5, 0.65}
	svgDashes  = []string{"", "7 3", "2 3", "8 3 2 3"}
)

// svgStylesFor gives each design in r a style: the backends in the
// order the report lists them, the Locker first within each.
func svgStylesFor(r *Report) svgStyles {
	st := svgStyles{}
	backends := map[string]int{} // backend: its index
	designs := map[string]int{}  // backend: how many designs so far
	for _, res := range renderSortResults(r, r.Results) {
		name := renderSeriesName(res.Backend, res.Design)
		if _, ok := st[name]; ok {
			continue
		}
		b, ok := backends[res.Backend]
		if !ok {
			b = len(backends)
			backends[res.Backend] = b
		}
		d := designs[res.Backend]
		designs[res.Backend]++
		hue := svgPalette[b%len(svgPalette)]
		shade := svgMix(hue, svgShades[min(d, len(svgShades)-1)])
		st[name] = svgStyle{fill: shade, stroke: shade, dash: svgDashes[d%len(svgDashes)]}
	}
	return st
}

// svgMix mixes a "#rrggbb" colour with white: f=0 is the colour, 1 is
// white.
func svgMix(hex string, f float64) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(hex, "#"), 16, 32)
	if err != nil {
		return hex
	}
	out := "#"
	for _, shift := range []uint{16, 8, 0} {
		c := float64(v >> shift & 0xff)
		out += fmt.Sprintf("%02x", int(math.Round(c+(255-c)*f)))
	}
	return out
}

// ---- drawing: axes, frames, legends and the three kinds of chart ----

// svgAxis is an axis in plotted units (after any log transform): the
// range it covers and its ticks.
type svgAxis struct {
	min, max float64
	ticks    []svgTick
}

type svgTick struct {
	v     float64
	label string
}

// at maps v onto the pixels from lo to hi.
func (a svgAxis) at(v, lo, hi float64) float64 {
	if a.max == a.min {
		return (lo + hi) / 2
	}
	return lo + (v-a.min)/(a.max-a.min)*(hi-lo)
}

// svgLinearAxis is an axis from 0 to at least top, with about five
// round ticks (1, 2 or 5 times a power of ten apart), labelled by label.
func svgLinearAxis(top float64, label func(float64) string) svgAxis {
	if !(top > 0) || math.IsInf(top, 0) {
		top = 1
	}
	step := chart.Step(top / 5)
	a := svgAxis{min: 0, max: math.Ceil(top/step-1e-9) * step}
	for v := 0.0; v <= a.max+step/2; v += step {
		a.ticks = append(a.ticks, svgTick{v, label(v)})
	}
	return a
}

// svgDurationLabel labels a tick in nanoseconds.
func svgDurationLabel(v float64) string { return renderDuration(time.Duration(math.Round(v))) }

// renderCompact prints a rate for an axis: 950, 12k, 1.5M.
func renderCompact(v float64) string {
	switch {
	case v >= 1e6:
		return renderSignificant(v/1e6) + "M"
	case v >= 1e3:
		return renderSignificant(v/1e3) + "k"
	}
	return renderSignificant(v)
}

// svgFrame is what every chart has around its plot: an id (unique on
// the page), a title and description for screen readers and the eye,
// axis labels and a legend.
type svgFrame struct {
	id, title, desc string
	xLabel, yLabel  string
	legend          []svgLegendItem
}

// svgLegendItem is one entry of a legend: a line, a bar swatch or a
// rule (a marker line, such as a bound).
type svgLegendItem struct {
	name  string
	style svgStyle
	kind  string // "line", "bar" or "rule"
}

func svgLineLegend(lines []svgLine) []svgLegendItem {
	items := make([]svgLegendItem, len(lines))
	for i, l := range lines {
		items[i] = svgLegendItem{l.name, l.style, "line"}
	}
	return items
}

func svgBarLegend(series []svgBarSeries) []svgLegendItem {
	items := make([]svgLegendItem, len(series))
	for i, s := range series {
		items[i] = svgLegendItem{s.name, s.style, "bar"}
	}
	return items
}

// Layout, in the viewBox's units; the page scales the SVG to fit.
const (
	svgWidth   = 760.0
	svgPlotTop = 56.0  // below the title
	svgPlotH   = 260.0 // line and grouped bar charts
	svgRowH    = 26.0  // a bar of a horizontal bar chart
	svgLegendH = 20.0  // a row of the legend
	svgFont    = `system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif`
)

// svgRect is a plot area.
type svgRect struct{ x0, y0, x1, y1 float64 }

// svgCanvas builds an SVG. Its methods escape the text they are given;
// raw writes markup as it is, so give it only numbers and constants.
type svgCanvas struct{ b strings.Builder }

func (c *svgCanvas) raw(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

// svgEsc escapes text from the report for SVG text and attributes.
func svgEsc(s string) string { return html.EscapeString(s) }

// svgNum prints a coordinate.
func svgNum(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// text draws s at (x, y); anchor is start, middle or end.
func (c *svgCanvas) text(x, y float64, anchor, extra, s string) {
	c.raw(`<text x="%s" y="%s" text-anchor="%s"%s>%s</text>`+"\n", svgNum(x), svgNum(y), anchor, extra, svgEsc(s))
}

// line draws a line in a style (its stroke and dash).
func (c *svgCanvas) line(x1, y1, x2, y2 float64, st svgStyle, width float64) {
	c.raw(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		svgNum(x1), svgNum(y1), svgNum(x2), svgNum(y2), st.stroke, svgNum(width), svgDash(st.dash))
}

// rect draws a rectangle in a style. With a tooltip, tip, it is a data
// point (class "point"); without, a legend's swatch.
func (c *svgCanvas) rect(x, y, w, h float64, st svgStyle, tip string) {
	class := ""
	if tip != "" {
		class = ` class="point"`
	}
	c.raw(`<rect%s x="%s" y="%s" width="%s" height="%s" fill="%s" stroke="%s">`, class, svgNum(x), svgNum(y), svgNum(w), svgNum(h), st.fill, st.stroke)
	if tip != "" {
		c.raw(`<title>%s</title>`, svgEsc(tip))
	}
	c.raw("</rect>\n")
}

func svgDash(dash string) string {
	if dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + dash + `"`
}

// yTicks draws horizontal grid lines and their labels left of the plot.
func (c *svgCanvas) yTicks(p svgRect, a svgAxis) {
	for _, t := range a.ticks {
		y := a.at(t.v, p.y1, p.y0)
		c.line(p.x0, y, p.x1, y, svgStyle{stroke: svgGrid}, 1)
		c.text(p.x0-8, y+4, "end", ` class="tick y" fill="`+svgMuted+`"`, t.label)
	}
}

// xTicks draws vertical grid lines and their labels below the plot.
func (c *svgCanvas) xTicks(p svgRect, a svgAxis) {
	for _, t := range a.ticks {
		x := a.at(t.v, p.x0, p.x1)
		c.line(x, p.y0, x, p.y1, svgStyle{stroke: svgGrid}, 1)
		c.text(x, p.y1+18, "middle", ` class="tick x" fill="`+svgMuted+`"`, t.label)
	}
}

// axes draws the plot's axis lines and labels.
func (c *svgCanvas) axes(p svgRect, f svgFrame) {
	c.line(p.x0, p.y1, p.x1, p.y1, svgStyle{stroke: svgMuted}, 1)
	c.line(p.x0, p.y0, p.x0, p.y1, svgStyle{stroke: svgMuted}, 1)
	c.text((p.x0+p.x1)/2, p.y1+40, "middle", ` class="axis-label x" font-weight="600"`, f.xLabel)
	if f.yLabel != "" {
		mid := (p.y0 + p.y1) / 2
		c.raw(`<text class="axis-label y" transform="translate(16 %s) rotate(-90)" text-anchor="middle" font-weight="600">%s</text>`+"\n", svgNum(mid), svgEsc(f.yLabel))
	}
}

// legend draws the legend from top down, wrapping items onto rows, and
// returns the height it took.
func (c *svgCanvas) legend(items []svgLegendItem, top float64) float64 {
	x, y := 16.0, top
	for _, it := range items {
		w := 34 + 6.6*float64(utf8.RuneCountInString(it.name))
		if x > 16 && x+w > svgWidth-16 {
			x, y = 16, y+svgLegendH
		}
		c.raw("<g>")
		switch it.kind {
		case "bar":
			c.rect(x, y-9, 18, 10, it.style, "")
		default:
			c.line(x, y-4, x+22, y-4, it.style, 2.5)
		}
		c.text(x+28, y, "start", "", it.name)
		c.raw("</g>\n")
		x += w
	}
	return y - top + svgLegendH
}

// svgWrap puts a chart's body in its <svg>, with the accessible title
// and description first and the visible title on top.
func svgWrap(f svgFrame, height float64, body string) string {
	var c svgCanvas
	c.raw(`<svg id="%s" viewBox="0 0 %s %s" width="%s" height="%s" role="img" aria-labelledby="%s-title %s-desc" font-family="%s" font-size="12" fill="%s">`+"\n",
		f.id, svgNum(svgWidth), svgNum(height), svgNum(svgWidth), svgNum(height), f.id, f.id, svgFont, svgInk)
	c.raw(`<title id="%s-title">%s</title>`+"\n", f.id, svgEsc(f.title))
	c.raw(`<desc id="%s-desc">%s</desc>`+"\n", f.id, svgEsc(f.desc))
	c.raw(`<rect width="100%%" height="100%%" fill="#fff"/>` + "\n")
	c.text(16, 28, "start", ` font-size="16" font-weight="600"`, f.title)
	c.b.WriteString(body)
	c.raw("</svg>")
	return c.b.String()
}

// svgLine is a series of a line chart.
type svgLine struct {
	name   string
	style  svgStyle
	points []svgPoint
}

// svgPoint is a point in plotted units, with its tooltip.
type svgPoint struct {
	x, y float64
	tip  string
}

// svgLineChart draws lines over x and y axes, each point a dot with a
// tooltip.
func svgLineChart(f svgFrame, x, y svgAxis, lines []svgLine) string {
	p := svgRect{x0: 84, y0: svgPlotTop, x1: svgWidth - 44, y1: svgPlotTop + svgPlotH}
	var c svgCanvas
	c.yTicks(p, y)
	c.xTicks(p, x)
	c.axes(p, f)
	for _, l := range lines {
		var pts []string
		for _, pt := range l.points {
			pts = append(pts, svgNum(x.at(pt.x, p.x0, p.x1))+","+svgNum(y.at(pt.y, p.y1, p.y0)))
		}
		c.raw(`<g class="series"><polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"%s/>`+"\n", strings.Join(pts, " "), l.style.stroke, svgDash(l.style.dash))
		for i, pt := range l.points {
			xy := strings.Split(pts[i], ",")
			c.raw(`<circle class="point" cx="%s" cy="%s" r="3" fill="%s"><title>%s</title></circle>`+"\n", xy[0], xy[1], l.style.stroke, svgEsc(pt.tip))
		}
		c.raw("</g>\n")
	}
	h := c.legend(f.legend, p.y1+70)
	return svgWrap(f, p.y1+70+h, c.b.String())
}

// svgBarSeries is a series of a grouped bar chart: a value per
// category, NaN where there is none.
type svgBarSeries struct {
	name   string
	style  svgStyle
	values []float64
	tips   []string
}

// svgGroupedBars draws a group of bars per category, a bar per series.
func svgGroupedBars(f svgFrame, cats []string, y svgAxis, series []svgBarSeries) string {
	p := svgRect{x0: 84, y0: svgPlotTop, x1: svgWidth - 24, y1: svgPlotTop + svgPlotH}
	var c svgCanvas
	c.yTicks(p, y)
	c.axes(p, f)
	group := (p.x1 - p.x0) / float64(len(cats))
	bar := group * 0.8 / float64(max(len(series), 1))
	for i, cat := range cats {
		left := p.x0 + group*float64(i) + group*0.1
		c.text(p.x0+group*(float64(i)+0.5), p.y1+18, "middle", ` class="tick x" fill="`+svgMuted+`"`, cat)
		for j, s := range series {
			if v := s.values[i]; !math.IsNaN(v) {
				top := y.at(v, p.y1, p.y0)
				c.rect(left+bar*float64(j), top, max(bar-2, 1), p.y1-top, s.style, s.tips[i])
			}
		}
	}
	h := c.legend(f.legend, p.y1+70)
	return svgWrap(f, p.y1+70+h, c.b.String())
}

// svgHBar is a bar of a horizontal bar chart: its label on the left,
// its text at its end, and a marker (NaN for none) drawn across it.
type svgHBar struct {
	label, text, tip string
	v, mark          float64
	style            svgStyle
}

// svgHBarChart draws a bar per row, for charts whose rows have long
// names (backend, design and parameters).
func svgHBarChart(f svgFrame, x svgAxis, bars []svgHBar) string {
	p := svgRect{x0: 230, y0: svgPlotTop, x1: svgWidth - 150, y1: svgPlotTop + svgRowH*float64(len(bars)) + 8}
	var c svgCanvas
	c.xTicks(p, x)
	c.axes(p, f)
	for i, b := range bars {
		top := p.y0 + 8 + svgRowH*float64(i)
		mid := top + (svgRowH-8)/2
		// Cut to fit; the tooltip has it whole.
		c.text(p.x0-8, mid+4, "end", ` class="tick y"`, chart.Shorten(b.label, 34))
		right := x.at(b.v, p.x0, p.x1)
		c.rect(p.x0, top, max(right-p.x0, 1), svgRowH-8, b.style, b.tip)
		if !math.IsNaN(b.mark) {
			m := x.at(b.mark, p.x0, p.x1)
			c.line(m, top-3, m, top+svgRowH-5, svgStyle{stroke: svgInk}, 2.5)
		}
		end := right
		if !math.IsNaN(b.mark) {
			end = max(end, x.at(b.mark, p.x0, p.x1))
		}
		c.text(end+6, mid+4, "start", ` fill="`+svgMuted+`"`, b.text)
	}
	h := c.legend(f.legend, p.y1+70)
	return svgWrap(f, p.y1+70+h, c.b.String())
}
