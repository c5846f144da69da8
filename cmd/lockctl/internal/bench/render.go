package bench

// This file turns a Report into tables of text cells, and writes those
// tables to a terminal (WriteText) and as Markdown (WriteMarkdown).
// render_html.go writes the same tables, with charts, as one HTML page.
// Nothing here measures anything: it only reads the Report.
//
// Every format goes through the same renderTable values, so that the
// three say the same thing; only the layout differs.

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText writes r as the terminal summary: a header (tool, date,
// machine, settings), one table per scenario, the targets met, missed or
// not measured, and the notes.
func WriteText(w io.Writer, r *Report) error {
	r = renderOrEmpty(r)
	p := &renderErrWriter{w: w}
	fmt.Fprintln(p, renderTitle(r))
	renderTextKVs(p, renderHeader(r))
	if t := renderBackendsTable(r); len(t.Rows) > 0 {
		fmt.Fprint(p, "\nBackends\n")
		renderTextTable(p, t)
	}
	tables := renderScenarioTables(r)
	if len(tables) == 0 {
		fmt.Fprint(p, "\nNo results.\n")
	}
	for _, t := range tables {
		fmt.Fprintf(p, "\n%s\n", renderHeading(t))
		renderTextTable(p, t)
	}
	if t := renderTargetsTable(r); len(t.Rows) > 0 {
		fmt.Fprint(p, "\nTargets\n")
		renderTextTable(p, t)
	}
	if len(r.Notes) > 0 {
		fmt.Fprint(p, "\nNotes\n")
		for _, n := range r.Notes {
			fmt.Fprintf(p, "  - %s\n", renderOneLine(n))
		}
	}
	return p.err
}

// WriteMarkdown writes r as GitHub-flavoured Markdown, for
// docs/benchmarks.md: the command, date, machine, settings and server
// versions, the targets, a table per scenario, and the notes. Text from
// the report is escaped so that it can neither break a table nor bring
// in HTML.
func WriteMarkdown(w io.Writer, r *Report) error {
	r = renderOrEmpty(r)
	p := &renderErrWriter{w: w}
	fmt.Fprintf(p, "# %s\n\n", renderMDText(renderTitle(r)))
	if r.Command != "" {
		fence := renderMDFence(r.Command)
		fmt.Fprintf(p, "%ssh\n%s\n%s\n\n", fence, renderOneLine(r.Command), fence)
	}
	for _, kv := range renderHeader(r) {
		if kv.Key != "command" {
			fmt.Fprintf(p, "- **%s**: %s\n", kv.Key, renderMDText(kv.Value))
		}
	}
	renderMDSection(p, "Backends", renderBackendsTable(r))
	renderMDSection(p, "Targets", renderTargetsTable(r))
	tables := renderScenarioTables(r)
	if len(tables) == 0 {
		fmt.Fprint(p, "\nNo results.\n")
	}
	for _, t := range tables {
		fmt.Fprintf(p, "\n## %s\n\n", renderMDText(t.Title))
		if t.About != "" {
			fmt.Fprintf(p, "%s\n\n", renderMDText(t.About))
		}
		renderMDTable(p, t)
	}
	if len(r.Notes) > 0 {
		fmt.Fprint(p, "\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(p, "- %s\n", renderMDText(n))
		}
	}
	return p.err
}

// renderTable is one table of the report as text cells, ready for any
// format.
type renderTable struct {
	Title   string // the scenario, or the section
	About   string // what the scenario measures, in a line; may be empty
	Head    []string
	Numeric []bool // per column: the cells are numbers, aligned right
	Rows    []renderRow
	// Errors has a line for each row whose operations failed: how many,
	// and the first error.
	Errors []string
}

// renderRow is one row of cells. Class says how the row went, for HTML
// to colour it: "failed" for a result with errors; "met", "missed" or
// "unmeasured" for a target; empty otherwise.
type renderRow struct {
	Cells []string
	Class string
}

// renderKV is one line of the header.
type renderKV struct{ Key, Value string }

// renderOrEmpty lets the writers take a nil report.
func renderOrEmpty(r *Report) *Report {
	if r == nil {
		return &Report{}
	}
	return r
}

// renderTitle is the report's title: the tool (its version is the
// header's build line).
func renderTitle(r *Report) string {
	if r.Tool == "" {
		return "lockctl bench"
	}
	return renderOneLine(r.Tool)
}

// renderHeader is what the run ran on and with: date, command, machine
// and settings. Lines with nothing to say are left out.
func renderHeader(r *Report) []renderKV {
	var kvs []renderKV
	add := func(k, v string) {
		if v != "" {
			kvs = append(kvs, renderKV{k, renderOneLine(v)})
		}
	}
	if !r.Started.IsZero() {
		date := r.Started.Format("2006-01-02 15:04:05 MST")
		if r.Elapsed > 0 {
			date += ", took " + renderDuration(r.Elapsed)
		}
		add("date", date)
	}
	add("command", r.Command)
	add("build", r.Build)
	add("machine", renderMachine(r.Machine))
	s := r.Settings
	add("scenarios", strings.Join(s.Scenarios, ", "))
	if s.Duration > 0 {
		add("duration", renderDuration(s.Duration)+" per design and parameter set")
	}
	add("clients", renderInts(s.Clients))
	add("waiters", renderInts(s.Waiters))
	if s.RTT > 0 {
		add("added RTT", renderDuration(s.RTT))
	} else if len(r.Results) > 0 {
		add("added RTT", "none")
	}
	if s.HeldLocks > 0 {
		add("held locks", renderThousands(int64(s.HeldLocks)))
	}
	add("clients at once", renderClients(r.Backends))
	add("connections", ConnsText(r.Connections))
	return kvs
}

// renderClients says how many clients the run opened at once on each
// deployment: "redis 192, zookeeper 192".
func renderClients(bs []Backend) string {
	var parts []string
	for _, b := range bs {
		if b.Clients > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", b.Name, b.Clients))
		}
	}
	return strings.Join(parts, ", ")
}

// ConnsText says how many connections a run had open at once to each
// server, most first: "at most 192 to 127.0.0.1:22181, 150 to
// 127.0.0.1:27000 at once".
func ConnsText(cs []ServerConns) string {
	const shown = 6
	var parts []string
	for i, c := range cs {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more servers", len(cs)-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("%d to %s", c.Max, c.Server))
	}
	if len(parts) == 0 {
		return ""
	}
	return "at most " + strings.Join(parts, ", ") + " at once"
}

// renderMachine says what the run measured on, as "linux/amd64, 8 CPUs,
// go1.26.0, host bench-1".
func renderMachine(m Machine) string {
	var parts []string
	if m.OS != "" || m.Arch != "" {
		parts = append(parts, m.OS+"/"+m.Arch)
	}
	if m.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("%d CPUs", m.CPUs))
	}
	if m.GoVersion != "" {
		parts = append(parts, m.GoVersion)
	}
	if m.Hostname != "" {
		parts = append(parts, "host "+m.Hostname)
	}
	return strings.Join(parts, ", ")
}

// renderBackendsTable lists the deployments measured, their servers'
// versions and what the Locker says it can do on them.
func renderBackendsTable(r *Report) renderTable {
	t := renderTable{
		Title:   "Backends",
		Head:    []string{"backend", "url", "servers", "capabilities", "expiry slack"},
		Numeric: []bool{false, false, false, false, true},
	}
	for _, b := range r.Backends {
		var caps []string
		for _, c := range []struct {
			on   bool
			name string
		}{{b.Fencing, "fencing"}, {b.FIFO, "FIFO"}, {b.WakeOnRelease, "wake on release"}, {b.Shared, "shared holds"}, {b.Permits, "semaphores"}} {
			if c.on {
				caps = append(caps, c.name)
			}
		}
		t.Rows = append(t.Rows, renderRow{Cells: []string{
			b.Name, b.URL, renderOr(b.Servers, "unknown"), renderOr(strings.Join(caps, ", "), "none"), renderDuration(b.ExpirySlack),
		}})
	}
	return t
}

// renderTargetsTable lists the targets, each MET, MISSED or NOT
// MEASURED, with what was wanted, what was got, and why.
func renderTargetsTable(r *Report) renderTable {
	t := renderTable{
		Title:   "Targets",
		Head:    []string{"status", "target", "backend", "want", "got", "why"},
		Numeric: make([]bool, 6),
	}
	for _, g := range r.Targets {
		status, class := renderTargetStatus(g)
		t.Rows = append(t.Rows, renderRow{
			Cells: []string{status, g.Name, g.Backend, g.Want, renderOr(g.Got, "-"), g.Why},
			Class: class,
		})
	}
	return t
}

// renderTargetStatus says how a target went, and the HTML class for it.
// Met means nothing for a target that was not measured.
func renderTargetStatus(g Target) (status, class string) {
	switch {
	case !g.Measured:
		return "NOT MEASURED", "unmeasured"
	case g.Met:
		return "MET", "met"
	default:
		return "MISSED", "missed"
	}
}

// renderAbout says in a line what each known scenario measures. An
// unknown scenario has no line, and renders as a generic table.
var renderAbout = map[string]string{
	"uncontended": "One client per design takes and releases a key no one else wants: the cost of a lock.",
	"throughput":  "N clients per design, each on its own key, as fast as they can.",
	"hot-key":     "N waiters contend for one key: handoffs per second, handoff latency and fairness.",
	"fresh-keys":  "As uncontended, but every lock on a key never locked before.",
	"fanout":      "Redlock on N nodes: the Locker against the raw parallel fan-out.",
	"recovery":    "A holder is killed (SIGKILL) while a waiter waits: how long until the waiter gets the lock, against the bound TTL + expiry slack + one round trip.",
	"failover": "Three campaigner processes contend for one election; the leader is killed (SIGKILL) and the time until another leads is measured, " +
		"a leader killed per round. The dead leader's lease or session must expire first, so every design has the same TTL (shown): " +
		"the figures are that TTL and the expiry slack, plus how soon each design notices.",
	"held-locks": "One client holds many locks at once, refreshed by the watchdog: what they cost the client.",
	"read-write": "N readers hold read locks on one key back to back while a writer asks for the write lock every so often: " +
		"the readers' rate and wait; the writer's waits, its longest, and the writes still waiting at a step's end (starved, " +
		"where the backend keeps no queue and readers keep overlapping).",
	"semaphore": "Twice as many clients as the semaphore has permits take a permit, hold it a millisecond and give it back: " +
		"permits granted per second at the limit, a client's wait for one, and the most held at once.",
}

// renderHeading is a scenario table's heading in text: its name and
// what it measures.
func renderHeading(t renderTable) string {
	if t.About == "" {
		return t.Title
	}
	return t.Title + ": " + t.About
}

// renderScenarioTables makes a table per scenario, in the order the
// scenarios were first measured.
func renderScenarioTables(r *Report) []renderTable {
	var names []string
	by := map[string][]Result{}
	for _, res := range r.Results {
		if _, ok := by[res.Scenario]; !ok {
			names = append(names, res.Scenario)
		}
		by[res.Scenario] = append(by[res.Scenario], res)
	}
	tables := make([]renderTable, 0, len(names))
	for _, name := range names {
		tables = append(tables, renderScenarioTable(name, renderSortResults(r, by[name])))
	}
	return tables
}

// renderResult is a result with how it compares with its baselines.
type renderResult struct {
	Result
	vs string // see renderVersus
}

// renderColumn is a column a scenario table may have: it has it when
// show says some of the table's results have something to put in it.
type renderColumn struct {
	head    string
	numeric bool
	show    func(rs []renderResult) bool
	cell    func(x renderResult) string
}

// renderScenarioTable makes the table of one scenario's results, with
// the columns those results have figures for. This is what lets a
// scenario the renderer does not know still render.
func renderScenarioTable(name string, results []Result) renderTable {
	rs := make([]renderResult, len(results))
	for i, res := range results {
		rs[i] = renderResult{Result: res, vs: renderVersus(res, results)}
	}
	t := renderTable{Title: renderOr(name, "(unnamed scenario)"), About: renderAbout[name]}
	var cols []renderColumn
	for _, c := range renderColumnsFor(rs) {
		if c.show(rs) {
			cols = append(cols, c)
			t.Head = append(t.Head, c.head)
			t.Numeric = append(t.Numeric, c.numeric)
		}
	}
	for _, x := range rs {
		row := renderRow{}
		for _, c := range cols {
			row.Cells = append(row.Cells, c.cell(x))
		}
		if line := renderErrorLine(x.Result); line != "" {
			row.Class = "failed"
			t.Errors = append(t.Errors, line)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// renderColumnsFor lists every column a table of rs could have, in
// order: who (backend, design, parameters), how fast, how slow, how
// often it failed, against the baselines, then what only some scenarios
// measure.
func renderColumnsFor(rs []renderResult) []renderColumn {
	always := func([]renderResult) bool { return true }
	cols := []renderColumn{
		{"backend", false, always, func(x renderResult) string { return x.Backend }},
		{"design", false, always, func(x renderResult) string { return x.Design }},
	}
	for _, k := range renderParamKeys(rs) {
		cols = append(cols, renderColumn{k, true, always, func(x renderResult) string {
			if v, ok := x.Params[k]; ok {
				return renderThousands(int64(v))
			}
			return ""
		}})
	}
	cols = append(cols, renderRTTColumn(rs))
	cols = append(cols, renderRateColumns()...)
	cols = append(cols, renderFairnessColumns()...)
	cols = append(cols, renderRecoveryColumns()...)
	cols = append(cols, renderFailoverColumns()...)
	cols = append(cols, renderReadWriteColumns()...)
	cols = append(cols, renderSemaphoreColumns()...)
	return append(cols, renderMemoryColumns()...)
}

// renderReadWriteColumns say what the writer went through under a
// stream of readers.
func renderReadWriteColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.ReadWrite != nil })
	f := func(cell func(*ReadWrite) string) func(renderResult) string {
		return func(x renderResult) string {
			if x.ReadWrite == nil {
				return ""
			}
			return cell(x.ReadWrite)
		}
	}
	return []renderColumn{
		{"writes", true, has, f(func(v *ReadWrite) string { return renderThousands(v.Writes) })},
		{"writer p50", true, has, f(func(v *ReadWrite) string { return renderDurationOr(v.Wait.P50, "-") })},
		{"writer p99", true, has, f(func(v *ReadWrite) string { return renderDurationOr(v.Wait.P99, "-") })},
		{"writer longest", true, has, f(func(v *ReadWrite) string { return renderDurationOr(v.LongestWait, "-") })},
		{"writes starved", true, has, f(func(v *ReadWrite) string { return strconv.Itoa(v.Starved) })},
	}
}

// renderSemaphoreColumns say how full the semaphore was kept.
func renderSemaphoreColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.Semaphore != nil })
	return []renderColumn{
		{"most held", true, has, func(x renderResult) string {
			if x.Semaphore == nil {
				return ""
			}
			return fmt.Sprintf("%d/%d", x.Semaphore.MostHeld, x.Semaphore.Permits)
		}},
	}
}

// renderRTTColumn shows each result's added round-trip time, but only
// when the results differ in it: otherwise the header says it once.
func renderRTTColumn(rs []renderResult) renderColumn {
	differ := func(rs []renderResult) bool {
		return slices.ContainsFunc(rs, func(x renderResult) bool { return x.RTT != rs[0].RTT })
	}
	return renderColumn{"rtt", true, differ, func(x renderResult) string { return renderDuration(x.RTT) }}
}

// renderRateColumns are the columns every scenario has: rate, latency
// percentiles, errors, and the Locker against its baselines.
func renderRateColumns() []renderColumn {
	hasRate := renderAny(func(x renderResult) bool { return x.PerSec > 0 || x.Ops > 0 })
	hasLat := renderAny(func(x renderResult) bool { return x.Latency.Count > 0 || x.Latency.P50 > 0 })
	lat := func(pick func(Latency) Duration) func(renderResult) string {
		return func(x renderResult) string { return renderDurationOr(pick(x.Latency), "-") }
	}
	return []renderColumn{
		{"rate", true, hasRate, func(x renderResult) string { return renderRate(x.PerSec, x.Unit) }},
		{"p50", true, hasLat, lat(func(l Latency) Duration { return l.P50 })},
		{"p99", true, hasLat, lat(func(l Latency) Duration { return l.P99 })},
		{"p999", true, hasLat, lat(func(l Latency) Duration { return l.P999 })},
		{"errors", true, func([]renderResult) bool { return true }, func(x renderResult) string {
			return renderThousands(x.Errors)
		}},
		{"vs baselines", false, renderAny(func(x renderResult) bool { return x.vs != "" }), func(x renderResult) string { return x.vs }},
	}
}

// renderFairnessColumns say how evenly a hot key went round.
func renderFairnessColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.Fairness != nil })
	f := func(cell func(*Fairness) string) func(renderResult) string {
		return func(x renderResult) string {
			if x.Fairness == nil {
				return ""
			}
			return cell(x.Fairness)
		}
	}
	return []renderColumn{
		{"max/min", true, has, f(func(f *Fairness) string { return renderMaxMin(f.MaxMin) })},
		{"starved", true, has, f(func(f *Fairness) string { return strconv.Itoa(f.Starved) })},
		{"longest wait", true, has, f(func(f *Fairness) string { return renderDuration(f.LongestWait) })},
	}
}

// renderRecoveryColumns say how often a killed holder's lock came back
// within its bound.
func renderRecoveryColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.Recovery != nil })
	f := func(cell func(*Recovery) string) func(renderResult) string {
		return func(x renderResult) string {
			if x.Recovery == nil {
				return ""
			}
			return cell(x.Recovery)
		}
	}
	slowest := func(x renderResult) string {
		if x.Recovery == nil {
			return ""
		}
		return renderDurationOr(x.Latency.Max, "-")
	}
	return []renderColumn{
		{"slowest", true, has, slowest},
		{"within bound", true, has, f(func(v *Recovery) string { return fmt.Sprintf("%d/%d", v.Within, v.Rounds) })},
		{"bound", true, has, f(func(v *Recovery) string { return renderDuration(v.Bound) })},
	}
}

// renderFailoverColumns give the failover times' p90 and slowest (the
// rate columns give p50), and the TTL they are about.
func renderFailoverColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.Failover != nil })
	f := func(cell func(renderResult) string) func(renderResult) string {
		return func(x renderResult) string {
			if x.Failover == nil {
				return ""
			}
			return cell(x)
		}
	}
	return []renderColumn{
		{"p90", true, has, f(func(x renderResult) string { return renderDurationOr(x.Latency.P90, "-") })},
		{"slowest", true, has, f(func(x renderResult) string { return renderDurationOr(x.Latency.Max, "-") })},
		{"ttl", true, has, f(func(x renderResult) string { return renderDuration(x.Failover.TTL) })},
		{"leaders killed", true, has, f(func(x renderResult) string { return strconv.Itoa(x.Failover.Rounds) })},
	}
}

// renderMemoryColumns say what holding many locks cost the client.
func renderMemoryColumns() []renderColumn {
	has := renderAny(func(x renderResult) bool { return x.Memory != nil })
	f := func(cell func(*Memory) string) func(renderResult) string {
		return func(x renderResult) string {
			if x.Memory == nil {
				return ""
			}
			return cell(x.Memory)
		}
	}
	return []renderColumn{
		{"held", true, has, f(func(m *Memory) string { return renderThousands(int64(m.Locks)) })},
		{"bytes/lock", true, has, f(func(m *Memory) string { return renderBytes(m.BytesPerLock) })},
		{"goroutines", true, has, f(func(m *Memory) string { return strconv.Itoa(m.Goroutines) })},
		{"lost", true, has, f(func(m *Memory) string { return strconv.Itoa(m.Lost) })},
	}
}

// renderAny makes a column's show function: some result has a value.
func renderAny(has func(renderResult) bool) func([]renderResult) bool {
	return func(rs []renderResult) bool { return slices.ContainsFunc(rs, has) }
}

// renderParamOrder puts the usual parameters first; others follow in
// alphabetical order.
var renderParamOrder = []string{"clients", "waiters", "readers", "permits", "keys", "nodes", "locks"}

// renderParamKeys returns the parameter names any of rs has, in order.
func renderParamKeys(rs []renderResult) []string {
	set := map[string]bool{}
	for _, x := range rs {
		for k := range x.Params {
			set[k] = true
		}
	}
	return renderOrderParams(slices.Collect(maps.Keys(set)))
}

// renderOrderParams sorts parameter names as renderParamOrder says.
func renderOrderParams(keys []string) []string {
	rank := func(k string) int {
		if i := slices.Index(renderParamOrder, k); i >= 0 {
			return i
		}
		return len(renderParamOrder)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b))
	})
	return keys
}

// renderSortResults orders one scenario's results for reading: by
// backend (as the report lists them), then parameters, then the Locker
// before the raw design before the peers, so that each Locker row sits
// with its baselines. Results that tie keep the order they were
// measured in.
func renderSortResults(r *Report, rs []Result) []Result {
	backend := map[string]int{}
	for i, b := range r.Backends {
		if _, ok := backend[b.Name]; !ok {
			backend[b.Name] = i
		}
	}
	for _, res := range rs {
		if _, ok := backend[res.Backend]; !ok {
			backend[res.Backend] = len(backend)
		}
	}
	out := slices.Clone(rs)
	slices.SortStableFunc(out, func(a, b Result) int {
		return cmp.Or(
			cmp.Compare(backend[a.Backend], backend[b.Backend]),
			renderCompareParams(a.Params, b.Params),
			cmp.Compare(a.RTT, b.RTT),
			cmp.Compare(renderKindRank(a.Kind), renderKindRank(b.Kind)),
		)
	})
	return out
}

// renderCompareParams orders parameter sets by their values, the usual
// parameters first; a missing parameter sorts first.
func renderCompareParams(a, b map[string]int) int {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range renderOrderParams(keys) {
		va, oka := a[k]
		vb, okb := b[k]
		if c := cmp.Or(renderCompareBool(oka, okb), cmp.Compare(va, vb)); c != 0 {
			return c
		}
	}
	return 0
}

func renderCompareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// renderKindRank orders designs: the Locker, raw, peers, then anything
// else.
func renderKindRank(kind string) int {
	switch kind {
	case KindLocker:
		return 0
	case KindRaw:
		return 1
	case KindPeer:
		return 2
	}
	return 3
}

// renderVersus says how a Locker result's rate compares with its
// baselines: each raw design (one per backend, two on postgres) and the
// fastest peer measured in the same scenario on the same backend with
// the same parameters and RTT, as "0.97x raw, 1.12x redsync". It is
// empty for other kinds of design, and leaves out a baseline that is
// missing or has no rate. all is the scenario's results.
func renderVersus(x Result, all []Result) string {
	if x.Kind != KindLocker {
		return ""
	}
	var raws []*Result
	var peer *Result
	for i := range all {
		b := &all[i]
		if b.Backend != x.Backend || b.RTT != x.RTT || !maps.Equal(b.Params, x.Params) || b.PerSec <= 0 {
			continue
		}
		switch {
		case b.Kind == KindRaw && !slices.ContainsFunc(raws, func(r *Result) bool { return r.Design == b.Design }):
			raws = append(raws, b)
		case b.Kind == KindPeer && (peer == nil || b.PerSec > peer.PerSec):
			peer = b
		}
	}
	var parts []string
	for _, b := range append(raws, peer) {
		if b != nil {
			parts = append(parts, renderRatio(x.PerSec/b.PerSec)+" "+b.Design)
		}
	}
	return strings.Join(parts, ", ")
}

// renderRatio prints a ratio of rates: "0.97x", "12.5x", "140x".
func renderRatio(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64) + "x"
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64) + "x"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "x"
}

// renderErrorLine says how many of a result's operations failed and the
// first error, or is empty when none did.
func renderErrorLine(res Result) string {
	if res.Errors == 0 && res.FirstError == "" {
		return ""
	}
	line := renderLabel(res) + ": "
	if res.Errors > 0 {
		line += fmt.Sprintf("%s of %s operations failed", renderThousands(res.Errors), renderThousands(res.Ops+res.Errors))
	}
	if res.FirstError != "" {
		if res.Errors > 0 {
			line += "; "
		}
		line += "first error: " + renderOneLine(res.FirstError)
	}
	return line
}

// renderLabel names a result: "redis/locker (clients=8, keys=8)".
func renderLabel(res Result) string {
	s := renderSeriesName(res.Backend, res.Design)
	if p := renderParams(res.Params); p != "" {
		s += " (" + p + ")"
	}
	return s
}

// renderSeriesName names a design on a backend: "redis/locker".
func renderSeriesName(backend, design string) string { return backend + "/" + design }

// renderParams prints parameters as "clients=8, keys=8".
func renderParams(ps map[string]int) string {
	var parts []string
	for _, k := range renderOrderParams(slices.Collect(maps.Keys(ps))) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, ps[k]))
	}
	return strings.Join(parts, ", ")
}

// renderDuration prints a duration for people, to three significant
// figures: 850ns, 412µs, 1.3ms, 41.2ms, 5.01s, 2m5s; zero is "0".
func renderDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < 0:
		return "-" + renderDuration(-d)
	case d >= time.Minute:
		return d.Round(time.Second).String()
	}
	units := []struct {
		name string
		size time.Duration
	}{{"ns", 1}, {"µs", time.Microsecond}, {"ms", time.Millisecond}, {"s", time.Second}}
	i := 0
	for i+1 < len(units) && d >= units[i+1].size {
		i++
	}
	s := renderSignificant(float64(d) / float64(units[i].size))
	if s == "1000" && i+1 < len(units) { // 999.7µs rounds up to 1ms
		return "1" + units[i+1].name
	}
	return s + units[i].name
}

// renderSignificant prints v (at least 1, below 1000) to three
// significant figures, without trailing zeros: 1.3, 41.2, 412, 5.01.
func renderSignificant(v float64) string {
	decimals := 0
	switch {
	case v < 10:
		decimals = 2
	case v < 100:
		decimals = 1
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// renderDurationOr prints d, or none when d is zero (not measured).
func renderDurationOr(d time.Duration, none string) string {
	if d == 0 {
		return none
	}
	return renderDuration(d)
}

// renderRate prints a rate with its unit: "12,345 ops/s", "45.2
// handoffs/s", "3.25 ops/s".
func renderRate(perSec float64, unit string) string {
	return renderNumber(perSec) + " " + renderOr(unit, "ops") + "/s"
}

// renderNumber prints a non-negative figure with sensible precision:
// thousands separated from 100 up, one decimal from 10, two below.
func renderNumber(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case math.Abs(v) >= 100:
		return renderThousands(int64(math.Round(v)))
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// renderThousands prints n with commas between thousands: 1,234,567.
func renderThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// renderBytes prints a size in bytes: "612 B", "1.8 KiB", "3.4 MiB".
func renderBytes(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for i+1 < len(units) && v >= 1024 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(v, 'f', 0, 64) + " B"
	}
	return renderSignificant(v) + " " + units[i]
}

// renderMaxMin prints a fairness ratio; a waiter that starved makes it
// infinite (the model has given that as +Inf and as -1).
func renderMaxMin(v float64) string {
	if v < 0 || math.IsInf(v, 1) {
		return "∞"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// renderInts prints a list of numbers: "1, 8, 64".
func renderInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// renderOr returns s, or def when s is empty.
func renderOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// renderOneLine folds text from the report onto one line, so that no
// field can break a table or a header.
func renderOneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// renderErrWriter writes to w until a write fails, then remembers the
// error and writes nothing more, so writers can print freely and check
// once at the end.
type renderErrWriter struct {
	w   io.Writer
	err error
}

func (e *renderErrWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// renderTextKVs prints the header, aligned: "  date      2025-...".
func renderTextKVs(w io.Writer, kvs []renderKV) {
	tw := renderNewTabWriter(w)
	for _, kv := range kvs {
		fmt.Fprintf(tw, "  %s\t%s\n", kv.Key, kv.Value)
	}
	tw.Flush()
}

// renderTabWriter aligns columns as tabwriter does, then trims the
// padding an empty last cell leaves at the end of a line.
type renderTabWriter struct {
	*tabwriter.Writer
	buf *strings.Builder
	w   io.Writer
}

func renderNewTabWriter(w io.Writer) renderTabWriter {
	buf := &strings.Builder{}
	return renderTabWriter{tabwriter.NewWriter(buf, 0, 0, 2, ' ', 0), buf, w}
}

// Flush writes the aligned lines to the underlying writer.
func (t renderTabWriter) Flush() error {
	if err := t.Writer.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(t.w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	t.buf.Reset()
	return nil
}

// renderTextTable prints a table in aligned columns, indented, then its
// error lines.
func renderTextTable(w io.Writer, t renderTable) {
	tw := renderNewTabWriter(w)
	line := func(cells []string) {
		clean := make([]string, len(cells))
		for i, c := range cells {
			clean[i] = strings.ReplaceAll(renderOneLine(c), "\t", " ")
		}
		fmt.Fprintf(tw, "  %s\n", strings.Join(clean, "\t"))
	}
	line(t.Head)
	for _, row := range t.Rows {
		line(row.Cells)
	}
	tw.Flush()
	for _, e := range t.Errors {
		fmt.Fprintf(w, "  ! %s\n", e)
	}
}

// renderMDSection prints a table under a "##" heading, if it has rows.
func renderMDSection(w io.Writer, heading string, t renderTable) {
	if len(t.Rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## %s\n\n", heading)
	renderMDTable(w, t)
}

// renderMDTable prints a table as a GitHub-flavoured Markdown table,
// numbers aligned right, then its error lines as a list.
func renderMDTable(w io.Writer, t renderTable) {
	row := func(cells []string) {
		esc := make([]string, len(cells))
		for i, c := range cells {
			esc[i] = renderMDCell(c)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(esc, " | "))
	}
	row(t.Head)
	rule := make([]string, len(t.Head))
	for i := range rule {
		rule[i] = "---"
		if i < len(t.Numeric) && t.Numeric[i] {
			rule[i] = "--:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(rule, "|"))
	for _, r := range t.Rows {
		row(r.Cells)
	}
	if len(t.Errors) > 0 {
		fmt.Fprintln(w)
		for _, e := range t.Errors {
			fmt.Fprintf(w, "- ⚠ %s\n", renderMDText(e))
		}
	}
}

// renderMDCell escapes a table cell: as renderMDText, and a pipe would
// end the cell.
func renderMDCell(s string) string {
	return strings.ReplaceAll(renderMDText(s), "|", `\|`)
}

// renderMDText escapes text from the report for Markdown: on one line,
// with HTML's special characters as entities (Markdown passes raw HTML
// through) and Markdown's emphasis and code characters backslashed.
func renderMDText(s string) string {
	r := strings.NewReplacer(
		`\`, `\\`, "&", "&amp;", "<", "&lt;", ">", "&gt;",
		"`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	)
	return r.Replace(renderOneLine(s))
}

// renderMDFence returns a code fence longer than any run of backticks
// in s, so that s cannot close it.
func renderMDFence(s string) string {
	longest, run := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return strings.Repeat("`", max(3, longest+1))
}
