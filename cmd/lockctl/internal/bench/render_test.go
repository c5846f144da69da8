package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// The evil strings a report may carry (a note, an error, a design's
// name): no format may let them through as markup.
const (
	renderEvil    = `<script>alert(1)</script>`
	renderEvilImg = `<img src=x onerror=alert(2)>`
)

// renderTestReport is a realistic report: three backends, the Locker,
// raw and peer designs, every scenario and an unknown one, targets met,
// missed and not measured, errors, and notes with an evil string and a
// URL.
func renderTestReport() *Report {
	r := &Report{
		Tool:    "lockctl bench v0.9.0",
		Build:   "lockctl v0.9.0, library v0.9.0, go1.26.0 linux/amd64",
		Command: "lockctl bench --url redis://:xxxxx@localhost:6379/0 --url http://127.0.0.1:2379 --duration 5s",
		Started: time.Date(2025, 11, 25, 16, 55, 2, 0, time.UTC),
		Elapsed: 3*time.Minute + 12*time.Second,
		Machine: Machine{OS: "linux", Arch: "amd64", CPUs: 8, GoVersion: "go1.26.0", Hostname: "bench-1"},
		Settings: Settings{
			Scenarios: Scenarios, Duration: 5 * time.Second,
			Clients: []int{1, 8, 64}, Waiters: []int{2, 16}, HeldLocks: 10000,
		},
		Backends: []Backend{
			{Name: "redis", URL: "redis://:xxxxx@localhost:6379/0", Servers: "Redis 7.4.1", Fencing: true, WakeOnRelease: true, ExpirySlack: 10 * time.Millisecond},
			{Name: "etcd", URL: "http://127.0.0.1:2379", Servers: "etcd 3.5.17", Fencing: true, FIFO: true, WakeOnRelease: true},
			{Name: "zookeeper", URL: "zk://127.0.0.1:2181", Servers: "ZooKeeper 3.9.3", Fencing: true, FIFO: true, WakeOnRelease: true, ExpirySlack: 2 * time.Second},
		},
		Notes: []string{
			"fanout: no redlock:// deployment given; see https://example.org/docs/fanout " + renderEvil,
			"recovery: zookeeper measured with a 4s session timeout",
		},
	}
	designs := []struct {
		backend, design, kind string
		rate                  float64 // ops/s in uncontended
	}{
		{"redis", "locker", KindLocker, 900},
		{"redis", "raw", KindRaw, 1000},
		{"redis", "redsync", KindPeer, 750},
		{"redis", "redislock", KindPeer, 600},
		{"etcd", "locker", KindLocker, 400},
		{"etcd", "raw", KindRaw, 500},
		{"etcd", "concurrency.Mutex", KindPeer, 350},
		{"zookeeper", "locker", KindLocker, 300},
		{"zookeeper", "zk.Lock", KindPeer, 0}, // could not run: no rate, so no ratio against it
	}
	for _, d := range designs {
		res := renderRes(ScenarioUncontended, d.backend, d.design, d.kind, nil, d.rate, "ops")
		if d.design == "redsync" { // one distribution without the ladder: plotted from p50..max
			res.Latency.Percentiles = nil
		}
		if d.rate == 0 {
			res.Errors, res.FirstError, res.Latency = 12, "zk: could not connect to a server", Latency{}
		}
		r.Results = append(r.Results, res)
	}
	for _, n := range r.Settings.Clients {
		for _, d := range designs[:7] {
			res := renderRes(ScenarioThroughput, d.backend, d.design, d.kind, map[string]int{"clients": n, "keys": n}, d.rate*float64(n)*0.8, "ops")
			r.Results = append(r.Results, res)
		}
	}
	for _, w := range r.Settings.Waiters {
		for _, d := range []struct{ backend, design, kind string }{
			{"redis", "locker", KindLocker}, {"redis", "redsync", KindPeer}, {"etcd", "locker", KindLocker}, {"etcd", "concurrency.Mutex", KindPeer},
		} {
			res := renderRes(ScenarioHotKey, d.backend, d.design, d.kind, map[string]int{"waiters": w}, 200/float64(w), "handoffs")
			res.Fairness = &Fairness{MaxMin: 1.08, LongestWait: 42 * time.Millisecond}
			if d.design == "redsync" && w == 16 {
				res.Fairness = &Fairness{MaxMin: -1, Starved: 3, LongestWait: 5 * time.Second}
			}
			r.Results = append(r.Results, res)
		}
	}
	r.Results = append(r.Results,
		renderRes(ScenarioFreshKeys, "redis", "locker", KindLocker, nil, 850, "ops"),
		renderRes(ScenarioFreshKeys, "redis", "raw", KindRaw, nil, 0, "ops"), // no rate: no ratio against it
	)
	fan := renderRes(ScenarioFanout, "redlock", "locker", KindLocker, map[string]int{"nodes": 3}, 700, "ops")
	fan.Errors, fan.FirstError = 3, "redlock: quorum not reached: 1 of 3 nodes"
	r.Results = append(r.Results, fan, renderRes(ScenarioFanout, "redlock", "raw", KindRaw, map[string]int{"nodes": 3}, 800, "ops"))
	for _, b := range []string{"redis", "etcd"} {
		res := renderRes(ScenarioRecovery, b, "locker", KindLocker, nil, 0, "ops")
		res.Latency = Latency{Count: 10, P50: 5 * time.Second, P99: 5100 * time.Millisecond, Max: 5200 * time.Millisecond}
		res.Recovery = &Recovery{TTL: 5 * time.Second, ExpirySlack: 10 * time.Millisecond, Bound: 5011 * time.Millisecond, Rounds: 10, Within: 9}
		if b == "etcd" {
			res.Latency.Max = 4 * time.Second
			res.Recovery = &Recovery{TTL: 5 * time.Second, Bound: 5001 * time.Millisecond, Rounds: 10, Within: 10}
		}
		r.Results = append(r.Results, res)
	}
	for _, d := range []struct{ backend, design, kind string }{
		{"redis", "locker", KindLocker}, {"etcd", "locker", KindLocker}, {"etcd", ElectionEtcd, KindPeer},
	} {
		res := renderRes(ScenarioFailover, d.backend, d.design, d.kind, map[string]int{"rounds": 3}, 0.5, "ops")
		res.Latency = Latency{Count: 3, P50: 1900 * time.Millisecond, P90: 2100 * time.Millisecond, P99: 2100 * time.Millisecond, Max: 2150 * time.Millisecond}
		res.Failover = &Failover{TTL: 2 * time.Second, ExpirySlack: time.Second, Campaigners: 3, Rounds: 3}
		r.Results = append(r.Results, res)
	}
	for _, b := range []string{"redis", "etcd"} {
		res := renderRes(ScenarioHeldLocks, b, "locker", KindLocker, map[string]int{"locks": 10000}, 5000, "ops")
		res.Memory = &Memory{Locks: 10000, HeapBytes: 18_432_000, BytesPerLock: 1843.2, Goroutines: 2}
		r.Results = append(r.Results, res)
	}
	for _, d := range []struct{ backend, design, kind string }{
		{"redis", "locker", KindLocker}, {"etcd", "locker", KindLocker}, {"etcd", "recipe.RWMutex", KindPeer},
	} {
		res := renderRes(ScenarioReadWrite, d.backend, d.design, d.kind, map[string]int{"readers": 4}, 1500, "reads")
		res.ReadWrite = &ReadWrite{Readers: 4, WriteEvery: 50 * time.Millisecond, Writes: 80,
			Wait: Latency{Count: 80, P50: 3 * time.Millisecond, P99: 9 * time.Millisecond}, LongestWait: 11 * time.Millisecond}
		if d.backend == "redis" { // no queue: the readers starve the writer
			res.ReadWrite.Writes, res.ReadWrite.Starved, res.ReadWrite.LongestWait = 2, 4, 1250*time.Millisecond
		}
		r.Results = append(r.Results, res)
	}
	for _, b := range []string{"redis", "etcd"} {
		res := renderRes(ScenarioSemaphore, b, "locker", KindLocker, map[string]int{"permits": 4, "clients": 8}, 2400, "grants")
		res.Semaphore = &Semaphore{Permits: 4, Clients: 8, MostHeld: 4}
		r.Results = append(r.Results, res)
	}
	r.Results = append(r.Results, renderRes("mystery", "redis", "locker", KindLocker, map[string]int{"shards": 4}, 123, "widgets"))
	r.Targets = []Target{
		{Name: "uncontended p50 within 1.2x raw", Backend: "redis", Want: "<= 1.2x raw", Got: "1.11x raw", Met: true, Measured: true},
		{Name: "hot-key fairness", Backend: "redis", Want: "max/min <= 2", Got: "∞", Measured: true, Why: "redsync starved 3 of 16 waiters"},
		{Name: "held-locks memory", Backend: "zookeeper", Want: "<= 2 KiB per lock", Measured: false, Why: "held-locks did not run on zookeeper"},
	}
	return r
}

// renderRes makes a result with a plausible latency distribution for
// its rate: one operation at a time, so p50 is about 1/rate.
func renderRes(scenario, backend, design, kind string, params map[string]int, perSec float64, unit string) Result {
	res := Result{
		Scenario: scenario, Backend: backend, Design: design, Kind: kind, Params: params,
		Ops: int64(perSec * 5), Elapsed: 5 * time.Second, PerSec: perSec, Unit: unit,
	}
	if perSec > 0 {
		p50 := time.Duration(float64(time.Second) / perSec)
		res.Latency = Latency{Count: 100_000, Mean: p50, P50: p50, P90: p50 * 3 / 2, P99: p50 * 3, P999: p50 * 8, Max: p50 * 30}
		for _, q := range Ladder {
			res.Latency.Percentiles = append(res.Latency.Percentiles, Point{q, time.Duration(float64(p50) * renderLadderShape[q])})
		}
	}
	return res
}

// renderLadderShape is a plausible latency distribution: latency at
// each percentile of Ladder, as a multiple of p50.
var renderLadderShape = map[float64]float64{
	0: 0.4, 10: 0.7, 25: 0.85, 50: 1, 75: 1.2, 90: 1.5, 95: 2, 99: 3, 99.5: 4.5, 99.9: 8, 99.95: 12, 99.99: 20, 100: 30,
}

// renderAll renders r in every format.
func renderAll(t *testing.T, r *Report) (text, md, page string) {
	t.Helper()
	var b [3]bytes.Buffer
	for i, write := range []func(io.Writer, *Report) error{WriteText, WriteMarkdown, WriteHTML} {
		if err := write(&b[i], r); err != nil {
			t.Fatalf("format %d: %v", i, err)
		}
	}
	return b[0].String(), b[1].String(), b[2].String()
}

// renderRowOf returns the first table row of out for backend and
// design (its first two columns) that contains every one of parts, or "".
func renderRowOf(out, backend, design string, parts ...string) string {
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == backend && f[1] == design {
			if renderLine(line, parts...) != "" {
				return line
			}
		}
	}
	return ""
}

// renderLine returns the first line of out that contains every one of
// parts, or "".
func renderLine(out string, parts ...string) string {
	for line := range strings.Lines(out) {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}

func TestRenderVersus(t *testing.T) {
	p8 := map[string]int{"clients": 8}
	all := []Result{
		{Backend: "redis", Design: "locker", Kind: KindLocker, Params: p8, PerSec: 900},
		{Backend: "redis", Design: "raw", Kind: KindRaw, Params: p8, PerSec: 1000},
		{Backend: "redis", Design: "redislock", Kind: KindPeer, Params: p8, PerSec: 600},
		{Backend: "redis", Design: "redsync", Kind: KindPeer, Params: p8, PerSec: 750},
		{Backend: "redis", Design: "raw", Kind: KindRaw, Params: map[string]int{"clients": 1}, PerSec: 10},
		{Backend: "etcd", Design: "mutex", Kind: KindPeer, Params: p8, PerSec: 800},
		{Backend: "etcd", Design: "locker", Kind: KindLocker, Params: p8, PerSec: 400},
		{Backend: "etcd", Design: "raw", Kind: KindRaw, Params: p8, PerSec: 0},
		{Backend: "etcd", Design: "locker", Kind: KindLocker, Params: map[string]int{"clients": 64}, PerSec: 1},
		{Backend: "postgres", Design: "locker", Kind: KindLocker, Params: p8, PerSec: 900},
		{Backend: "postgres", Design: "raw", Kind: KindRaw, Params: p8, PerSec: 1000},
		{Backend: "postgres", Design: "raw-advisory", Kind: KindRaw, Params: p8, PerSec: 1800},
	}
	for _, c := range []struct {
		i    int
		want string
	}{
		{0, "0.90x raw, 1.20x redsync"}, // the raw design, and the faster of two peers; not the raw design at other params
		{1, ""},                         // only the Locker is compared
		{3, ""},
		{6, "0.50x mutex"},                   // a raw design without a rate is no baseline; a peer on another backend is not either
		{8, ""},                              // no baseline at these params
		{9, "0.90x raw, 0.50x raw-advisory"}, // every raw design, in the order measured
	} {
		if got := renderVersus(all[c.i], all); got != c.want {
			t.Errorf("renderVersus(%s/%s %v) = %q, want %q", all[c.i].Backend, all[c.i].Design, all[c.i].Params, got, c.want)
		}
	}
}

func TestRenderDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0",
		850:                       "850ns",
		412 * time.Microsecond:    "412µs",
		1300 * time.Microsecond:   "1.3ms",
		1000 * time.Microsecond:   "1ms",
		999_700 * time.Nanosecond: "1ms",
		41_240 * time.Microsecond: "41.2ms",
		5011 * time.Millisecond:   "5.01s", // a recovery bound: the 11ms matter
		2100 * time.Millisecond:   "2.1s",
		125 * time.Second:         "2m5s",
		-5 * time.Millisecond:     "-5ms",
	} {
		if got := renderDuration(d); got != want {
			t.Errorf("renderDuration(%d) = %q, want %q", d, got, want)
		}
	}
}

func TestRenderNumbers(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{renderRate(12345.4, "ops"), "12,345 ops/s"},
		{renderRate(45.25, "handoffs"), "45.2 handoffs/s"},
		{renderRate(3.254, ""), "3.25 ops/s"},
		{renderThousands(-1234567), "-1,234,567"},
		{renderBytes(612), "612 B"},
		{renderBytes(1843.2), "1.8 KiB"},
		{renderMaxMin(-1), "∞"},
		{renderMaxMin(math.Inf(1)), "∞"},
		{renderMaxMin(1.5), "1.50"},
		{renderRatio(0.904), "0.90x"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestWriteText(t *testing.T) {
	r := renderTestReport()
	out, _, _ := renderAll(t, r)
	for _, want := range []string{
		"lockctl bench v0.9.0", "2025-11-25 16:55:02 UTC, took 3m12s", "linux/amd64, 8 CPUs, go1.26.0, host bench-1",
		"5s per design and parameter set", "1, 8, 64", "10,000",
		"uncontended: One client", "mystery\n", // unknown scenario: a generic table
		"MET", "MISSED", "NOT MEASURED", "redsync starved 3 of 16 waiters",
		"zk: could not connect to a server", "3 of 3,503 operations failed; first error: redlock: quorum not reached",
		renderEvil, // the terminal is no browser: notes print as they are
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	// A row per result, and the Locker's ratios on its own row.
	for _, res := range r.Results {
		if renderRowOf(out, res.Backend, res.Design) == "" {
			t.Errorf("no row for %s/%s", res.Backend, res.Design)
		}
	}
	uncontended := out[strings.Index(out, "uncontended:"):strings.Index(out, "throughput:")]
	if line := renderRowOf(uncontended, "redis", "locker"); !strings.Contains(line, "900 ops/s") || !strings.Contains(line, "0.90x raw, 1.20x redsync") {
		t.Errorf("redis locker row = %q, want 900 ops/s and 0.90x raw, 1.20x redsync", line)
	}
	if line := renderRowOf(uncontended, "zookeeper", "locker"); strings.Contains(line, "x zk.Lock") {
		t.Errorf("ratio against a peer with no rate: %q", line)
	}
	if line := renderRowOf(out, "redis", "redsync", " 16 "); !strings.Contains(line, "∞") || !strings.Contains(line, "5s") {
		t.Errorf("hot-key starved row = %q, want max/min ∞ and the longest wait", line)
	}
	if line := renderRowOf(out, "redis", "locker", "9/10"); !strings.Contains(line, "5s") {
		t.Errorf("recovery row = %q", line)
	}
	fo := out[strings.Index(out, "failover:"):strings.Index(out, "held-locks:")]
	for _, head := range []string{"p50", "p90", "slowest", "ttl", "leaders killed"} {
		if !strings.Contains(renderLine(fo, "backend  design"), head) {
			t.Errorf("failover's header lacks %q:\n%s", head, fo)
		}
	}
	if line := renderRowOf(fo, "etcd", "locker"); !strings.Contains(line, "1.9s") || !strings.Contains(line, "2.1s") || !strings.Contains(line, "2.15s") ||
		!strings.Contains(line, " 2s ") || !strings.Contains(line, "x "+ElectionEtcd) {
		t.Errorf("failover row = %q, want p50 1.9s, p90 2.1s, slowest 2.15s, ttl 2s and a ratio to %s", line, ElectionEtcd)
	}
	if line := renderRowOf(out, "etcd", "locker", "10,000"); !strings.Contains(line, "1.8 KiB") {
		t.Errorf("held-locks row = %q, want 1.8 KiB per lock", line)
	}
	rw := out[strings.Index(out, "read-write:"):strings.Index(out, "semaphore:")]
	for _, head := range []string{"readers", "writes", "writer p50", "writer p99", "writer longest", "writes starved"} {
		if !strings.Contains(renderLine(rw, "backend  design"), head) {
			t.Errorf("read-write's header lacks %q:\n%s", head, rw)
		}
	}
	if line := strings.TrimSpace(renderRowOf(rw, "redis", "locker")); !regexp.MustCompile(`1,500 reads/s .* 2 +3ms +9ms +1.25s +4$`).MatchString(line) {
		t.Errorf("read-write redis row = %q, want 1,500 reads/s, 2 writes, p50 3ms, p99 9ms, longest 1.25s, 4 starved", line)
	}
	if line := renderRowOf(out[strings.Index(out, "semaphore:"):], "etcd", "locker"); !strings.Contains(line, "2,400 grants/s") || !strings.Contains(line, "4/4") {
		t.Errorf("semaphore etcd row = %q, want 2,400 grants/s and 4/4 held", line)
	}
	if line := renderLine(out, "MISSED"); !strings.Contains(line, "max/min <= 2") || !strings.Contains(line, "∞") {
		t.Errorf("missed target = %q, want want and got", line)
	}
	if strings.Index(out, "Targets") > strings.Index(out, "Notes") {
		t.Error("notes before targets")
	}
}

// TestRenderMarkdown checks a heading and a well-formed table per
// scenario: every row of a table has as many cells as its header.
func TestRenderMarkdown(t *testing.T) {
	r := renderTestReport()
	_, md, _ := renderAll(t, r)
	for _, want := range []string{
		"# lockctl bench v0.9.0", "```sh\nlockctl bench --url", "Redis 7.4.1", "etcd 3.5.17", "ZooKeeper 3.9.3",
		"## Targets", "| MET |", "| MISSED |", "| NOT MEASURED |", "## Notes",
		"0.90x raw, 1.20x redsync", "&lt;script&gt;", "**build**: lockctl v0.9.0, library v0.9.0, go1.26.0 linux/amd64",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if strings.Contains(md, "<script") || strings.Contains(md, "<img") {
		t.Error("Markdown lets HTML through")
	}
	for _, s := range append(Scenarios, "mystery") {
		if !strings.Contains(md, "\n## "+s+"\n") {
			t.Errorf("no heading for %s", s)
		}
	}
	tables := renderMDTables(md)
	if want := len(Scenarios) + 1 + 2; len(tables) != want { // scenarios, mystery, backends, targets
		t.Errorf("%d tables, want %d", len(tables), want)
	}
	rule := regexp.MustCompile(`^\|(-{3}|-{2}:)(\|(-{3}|-{2}:))*\|$`)
	for _, tb := range tables {
		if !rule.MatchString(tb[1]) {
			t.Errorf("table %q: second line %q is not a delimiter row", tb[0], tb[1])
		}
		cols := renderMDPipes(tb[0])
		for _, line := range tb[1:] {
			if n := renderMDPipes(line); n != cols {
				t.Errorf("row %q has %d pipes, header %q has %d", line, n, tb[0], cols)
			}
		}
	}
}

// renderMDTables returns the tables in md, each as its lines.
func renderMDTables(md string) [][]string {
	var tables [][]string
	var cur []string
	for line := range strings.Lines(md + "\n") {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "|") {
			cur = append(cur, line)
			continue
		}
		if cur != nil {
			tables = append(tables, cur)
			cur = nil
		}
	}
	return tables
}

// renderMDPipes counts the unescaped pipes in a table line.
func renderMDPipes(line string) int {
	return strings.Count(line, "|") - strings.Count(line, `\|`)
}

func TestRenderHTML(t *testing.T) {
	r := renderTestReport()
	_, _, page := renderAll(t, r)
	renderCheckHTML(t, page, r)
	for _, id := range []string{"chart-latency", "chart-throughput", "chart-hotkey-rate", "chart-hotkey-p50", "chart-recovery", "chart-failover", "chart-memory", "chart-read-write", "chart-semaphore"} {
		if !strings.Contains(page, `<svg id="`+id+`"`) {
			t.Errorf("no chart %s", id)
		}
	}
	if n := strings.Count(page, "<svg "); n != 9 {
		t.Errorf("%d charts, want 9", n)
	}
	for _, want := range []string{
		"0.90x raw, 1.20x redsync", `<tr class="met">`, `<tr class="missed">`, `<tr class="unmeasured">`, `<tr class="failed">`,
		"Redis 7.4.1", "&lt;script&gt;alert(1)&lt;/script&gt;", `id="s-hot-key"`, `href="#s-hot-key"`,
		// axis labels with units, and legends naming the designs
		"latency (log scale)", "99.9%", "ops per second", "handoffs per second", "heap bytes per held lock", "bound: TTL + expiry slack",
		">redis/locker<", ">etcd/concurrency.Mutex<",
		"redis/redsync: 1.33ms at 50%", // a distribution without the ladder, plotted from its percentiles
	} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if p := os.Getenv("LOCKCTL_BENCH_SAMPLE_HTML"); p != "" {
		if err := os.WriteFile(p, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", p)
	}
}

// TestRenderHTMLEscapesEverything puts markup in every string of the
// report, charts included, and checks none of it comes out as markup.
func TestRenderHTMLEscapesEverything(t *testing.T) {
	r := renderTestReport()
	evil := func(s string) string { return s + renderEvil + renderEvilImg + `"'&` }
	r.Tool, r.Command, r.Machine.Hostname = evil(r.Tool), evil(r.Command), evil("h")
	r.Settings.Scenarios = []string{evil("s")}
	for i := range r.Backends {
		b := &r.Backends[i]
		b.Name, b.URL, b.Servers = evil(b.Name), evil(b.URL), evil(b.Servers)
	}
	for i := range r.Results {
		res := &r.Results[i]
		res.Scenario, res.Backend, res.Design = evil(res.Scenario), evil(res.Backend), evil(res.Design)
		res.Unit, res.FirstError = evil(res.Unit), evil(res.FirstError)
		res.Params = map[string]int{evil("k"): 1}
	}
	for i := range r.Targets {
		g := &r.Targets[i]
		g.Name, g.Backend, g.Want, g.Got, g.Why = evil(g.Name), evil(g.Backend), evil(g.Want), evil(g.Got), evil(g.Why)
	}
	r.Notes = append(r.Notes, evil("n"))
	_, md, page := renderAll(t, r)
	renderCheckHTML(t, page, r)
	// A fenced code block shows the command as it is, markup and all, as
	// text: only outside it must markup be escaped.
	fence := regexp.MustCompile("(?s)\n```+sh\n.*?\n```+\n")
	if !fence.MatchString(md) {
		t.Fatal("no command in a code block")
	}
	for _, raw := range []string{"<script", "<img"} {
		if strings.Contains(fence.ReplaceAllString(md, ""), raw) {
			t.Errorf("Markdown contains %q", raw)
		}
	}
	if strings.Contains(page, "<img") || strings.Contains(page, "<script") {
		t.Error("HTML contains raw markup from the report")
	}
}

// renderEmptyIcon reports whether n is <link rel="icon" href="data:,">:
// an empty favicon, in the page itself.
func renderEmptyIcon(n *html.Node) bool {
	attrs := map[string]string{}
	for _, a := range n.Attr {
		attrs[strings.ToLower(a.Key)] = a.Val
	}
	return n.Data == "link" && len(attrs) == 2 && attrs["rel"] == "icon" && attrs["href"] == "data:,"
}

// renderCheckHTML checks a page: its tags balance, it parses, every
// chart is well-formed XML with a title and description, it has no
// script, and it refers to nothing outside itself: no src, and no href
// but to its own anchors (and an empty favicon); the only http(s) URLs are the report's own,
// as text.
func renderCheckHTML(t *testing.T, page string, r *Report) {
	t.Helper()
	renderCheckBalanced(t, page)
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		if renderEmptyIcon(n) {
			continue // it keeps the browser from fetching /favicon.ico
		}
		switch n.Data {
		case "script", "link", "img", "iframe", "object", "embed", "image", "use", "foreignObject":
			t.Errorf("page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			k := strings.ToLower(a.Key)
			if k == "src" || strings.HasPrefix(k, "on") || (strings.HasSuffix(k, "href") && !strings.HasPrefix(a.Val, "#")) {
				t.Errorf("<%s %s=%q>: refers outside the page or runs code", n.Data, a.Key, a.Val)
			}
			if k == "style" && strings.Contains(a.Val, "url(") {
				t.Errorf("<%s style=%q> loads something", n.Data, a.Val)
			}
		}
	}
	if strings.Contains(page, "url(") || strings.Contains(page, "@import") {
		t.Error("the stylesheet loads something")
	}
	rest := page
	for _, s := range renderReportStrings(r) {
		rest = strings.ReplaceAll(rest, html.EscapeString(s), "")
	}
	if i := strings.Index(rest, "://"); strings.Contains(rest, "http://") || strings.Contains(rest, "https://") {
		t.Errorf("page refers to a URL that is not the report's: ...%s...", rest[max(i-60, 0):min(i+60, len(rest))])
	}
	for _, svg := range regexp.MustCompile(`(?s)<svg .*?</svg>`).FindAllString(page, -1) {
		d := xml.NewDecoder(strings.NewReader(svg))
		for {
			_, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("chart is not well-formed: %v\n%.300s", err, svg)
			}
		}
		for _, want := range []string{`role="img"`, "<title id=", "<desc id=", "<text "} {
			if !strings.Contains(svg, want) {
				t.Errorf("chart lacks %s: %.200s", want, svg)
			}
		}
	}
}

// renderReportStrings is every string of r that may hold a URL: text the
// page may print.
func renderReportStrings(r *Report) []string {
	ss := append([]string{r.Command}, r.Notes...)
	for _, b := range r.Backends {
		ss = append(ss, b.URL)
	}
	for _, res := range r.Results {
		ss = append(ss, res.FirstError, renderErrorLine(res))
	}
	return ss
}

// renderCheckBalanced checks that every element the page opens it
// closes, in order (void elements aside).
func renderCheckBalanced(t *testing.T, page string) {
	t.Helper()
	void := map[string]bool{"meta": true, "br": true, "hr": true, "img": true, "input": true, "link": true}
	var stack []string
	z := html.NewTokenizer(strings.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				t.Fatal(z.Err())
			}
			if len(stack) > 0 {
				t.Errorf("unclosed: %v", stack)
			}
			return
		case html.StartTagToken:
			if name, _ := z.TagName(); !void[string(name)] {
				stack = append(stack, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			if len(stack) == 0 || stack[len(stack)-1] != string(name) {
				t.Fatalf("</%s> closes %v", name, stack)
			}
			stack = stack[:len(stack)-1]
		}
	}
}

// TestRenderEmpty renders a nil and an empty report in every format.
func TestRenderEmpty(t *testing.T) {
	for _, r := range []*Report{nil, {}} {
		text, md, page := renderAll(t, r)
		if !strings.Contains(text, "No results.") || !strings.Contains(md, "No results.") || !strings.Contains(page, "No results.") {
			t.Errorf("empty report: want No results. in every format")
		}
		if strings.Contains(page, "<svg") {
			t.Error("charts for an empty report")
		}
		renderCheckHTML(t, page, renderOrEmpty(r))
	}
}

// TestRenderOddValues renders results with figures a failed or odd run
// may leave: no rate, no latency, infinite and NaN figures, no
// parameters where a chart expects them. Every format must still render,
// and every chart still be well-formed.
func TestRenderOddValues(t *testing.T) {
	r := &Report{Results: []Result{
		{Scenario: ScenarioUncontended, Backend: "b", Design: "locker", Kind: KindLocker, Latency: Latency{P50: time.Millisecond}},
		{Scenario: ScenarioUncontended, Backend: "b", Design: "raw", Kind: KindRaw, PerSec: math.Inf(1)},
		{Scenario: ScenarioThroughput, Backend: "b", Design: "locker", Kind: KindLocker, PerSec: math.NaN(), Params: map[string]int{"clients": 4}},
		{Scenario: ScenarioThroughput, Backend: "b", Design: "raw", Kind: KindRaw, PerSec: 10, Params: map[string]int{"clients": 4}},
		{Scenario: ScenarioHotKey, Backend: "b", Design: "locker", Kind: KindLocker, PerSec: math.Inf(1), Fairness: &Fairness{MaxMin: math.NaN()}},
		{Scenario: ScenarioRecovery, Backend: "b", Design: "locker", Kind: KindLocker, Recovery: &Recovery{}},
		{Scenario: ScenarioFailover, Backend: "b", Design: "locker", Kind: KindLocker, Failover: &Failover{}},
		{Scenario: ScenarioHeldLocks, Backend: "b", Design: "locker", Kind: KindLocker, Memory: &Memory{BytesPerLock: math.NaN()}},
	}}
	_, _, page := renderAll(t, r)
	renderCheckHTML(t, page, r)
	if strings.Contains(page, "NaN\"") || strings.Contains(page, "Inf\"") {
		t.Error("a non-finite figure reached an SVG attribute")
	}
	if !strings.Contains(page, "waiters not given") {
		t.Error("hot-key results without waiters are not charted")
	}
}

// TestRenderWriteError: the writers return the writer's error.
func TestRenderWriteError(t *testing.T) {
	boom := errors.New("disk full")
	for i, write := range []func(io.Writer, *Report) error{WriteText, WriteMarkdown, WriteHTML} {
		if err := write(renderFailWriter{boom}, renderTestReport()); !errors.Is(err, boom) {
			t.Errorf("format %d: err = %v, want %v", i, err, boom)
		}
	}
}

type renderFailWriter struct{ err error }

func (w renderFailWriter) Write([]byte) (int, error) { return 0, w.err }
