package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
	"github.com/distlock/locker/cmd/lockctl/internal/chaos"
	"github.com/distlock/locker/cmd/lockctl/internal/chart"
)

// TestReportsInBrowser runs a short real bench and a short real chaos,
// checks that they estimate the time left and say how many connections
// they open, and opens their HTML reports in a headless Chromium, as a
// reader would: the page loads with no console message, no script error
// and no request but its own; every chart has a data point for each
// figure of the report it draws, axis labels and ticks, all inside the
// chart; and the page stays legible at a phone's width (no horizontal
// scrolling of the page, no text under 10 CSS pixels, charts and wide
// tables scrolling in their own boxes) as on a desktop's.
func TestReportsInBrowser(t *testing.T) {
	exe := chromium(t)
	redis, zk := serverURL(t, "LOCKER_TEST_REDIS_URL"), serverURL(t, "LOCKER_TEST_ZK_URL")
	t.Parallel()
	benchDir, chaosDir := t.TempDir(), t.TempDir()
	// Both runs at once: every chart bench draws (latency, throughput,
	// hot key, recovery, memory) on two backends, read-write and
	// semaphore on the embedded one too (which admits both), and two
	// chaos cells.
	b := start(t, testEnv(t), "bench", "--url", redis, "--url", zk, "--url", "memory://", "--scenario", "uncontended,throughput,hot-key,recovery,held-locks,read-write,semaphore",
		"--duration", "40ms", "--clients", "1,2", "--waiters", "2", "--held-locks", "50", "--held-ttl", "1s", "--recovery-rounds", "1", "--out", benchDir)
	c := start(t, testEnv(t), "chaos", "--url", redis, "--scenario", "pause,kill", "--rounds", "1", "--ttl", "1s", "--out", chaosDir)
	if code := b.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("bench: exit code %d; stderr:\n%s", code, b.stderr.String())
	}
	if code := c.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("chaos: exit code %d; stderr:\n%s", code, c.stderr.String())
	}
	for name, p := range map[string]*proc{"bench": b, "chaos": c} {
		checkTimeLeft(t, name, p.stderr.String())
	}
	var br bench.Report
	var cr chaos.Report
	readJSON(t, filepath.Join(benchDir, "report.json"), &br)
	readJSON(t, filepath.Join(chaosDir, "report.json"), &cr)
	checkBenchConns(t, b.stderr.String(), &br, zk)
	checkChaosConns(t, c.stderr.String(), &cr, redis)

	browser := newBrowser(t, exe)
	t.Run("bench", func(t *testing.T) { checkPage(t, browser, benchDir, benchCharts(&br)) })
	t.Run("chaos", func(t *testing.T) { checkPage(t, browser, chaosDir, chaosCharts(&cr)) })
}

// checkTimeLeft checks that a run's progress lines estimate the time
// left, from the second line on at the latest.
func checkTimeLeft(t *testing.T, name, stderr string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "[") {
			lines = append(lines, l)
		}
	}
	if len(lines) < 2 || !strings.Contains(lines[1], " left] ") {
		t.Errorf("%s: the progress lines do not estimate the time left:\n%s", name, stderr)
	}
}

// checkBenchConns: bench says, before it starts, how many clients it
// opens at once on each deployment, and for ZooKeeper that this is the
// number of connections to one server; the report has what the kernel
// counted, which on the ZooKeeper server at zkURL is no more than that.
func checkBenchConns(t *testing.T, stderr string, r *bench.Report, zkURL string) {
	t.Helper()
	for _, want := range []string{"connections: redis: up to ", "connections: zookeeper: up to "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("bench does not say %q before it starts:\n%s", want, stderr)
		}
	}
	clients := map[string]int{}
	for _, b := range r.Backends {
		clients[b.Name] = b.Clients
	}
	zkServer := urlHost(t, zkURL)
	for _, c := range r.Connections {
		if c.Server == zkServer && c.Max >= 1 && c.Max <= clients["zookeeper"] {
			return
		}
	}
	t.Errorf("bench's report: connections %+v, want at most %d (the sessions it said it opens) to %s", r.Connections, clients["zookeeper"], zkServer)
}

// checkChaosConns: chaos says how many processes and clients it runs at
// once, and its report has the connections counted to the server at
// redisURL.
func checkChaosConns(t *testing.T, stderr string, r *chaos.Report, redisURL string) {
	t.Helper()
	if !strings.Contains(stderr, "connections: two worker processes at once per deployment") {
		t.Errorf("chaos does not say how many connections it opens:\n%s", stderr)
	}
	server := urlHost(t, redisURL)
	for _, c := range r.Connections {
		if c.Server == server && c.Max >= 1 {
			return
		}
	}
	t.Errorf("chaos's report: connections %+v, none to %s", r.Connections, server)
}

// urlHost is the host:port of a URL of one server.
func urlHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// chromium returns the path of the Chromium the test drives: Debian's
// chromium (scripts/install.sh installs it), or $LOCKER_TEST_CHROMIUM.
// Without one the test skips, or fails under LOCKER_REQUIRE_SERVERS=1
// (make test), as it does without servers.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOCKER_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on $PATH to open the HTML reports in; install it (scripts/install.sh does: apt-get install chromium) or set LOCKER_TEST_CHROMIUM"
	if os.Getenv(requireServers) == "1" {
		t.Fatalf("%s (and %s=1 forbids skipping)", msg, requireServers)
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts a headless Chromium with a profile of its own, which
// the test's end stops. The flags keep it from reaching the network of
// its own accord (updates, sync, field trials), so that every request
// the test sees is the page's.
func newBrowser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // as root, Chromium refuses to start otherwise
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("no-pings", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return ctx
}

// chartWant is what a chart must show: its data points (one per figure
// drawn), and whether it has a y axis with a label.
type chartWant struct {
	points int
	yAxis  bool
}

// benchCharts is every chart a bench report's page must have, by id,
// with a point per figure of the report it draws.
func benchCharts(r *bench.Report) map[string]chartWant {
	want := map[string]chartWant{}
	add := func(id string, y bool) {
		w := want[id]
		w.points++
		w.yAxis = y
		want[id] = w
	}
	for _, res := range r.Results {
		switch {
		case res.Scenario == bench.ScenarioUncontended && res.Latency.Count > 0:
			// One point per percentile: at least the median.
			add("chart-latency", true)
		case res.Scenario == bench.ScenarioThroughput:
			add("chart-throughput", true)
		case res.Scenario == bench.ScenarioHotKey:
			add("chart-hotkey-rate", true)
			add("chart-hotkey-p50", true)
		case res.Recovery != nil:
			add("chart-recovery", false)
		case res.Memory != nil:
			add("chart-memory", false)
		case res.ReadWrite != nil:
			add("chart-read-write", false)
		case res.Semaphore != nil:
			add("chart-semaphore", false)
		}
	}
	return want
}

// chaosCharts is the timeline of each cell's example round, by id
// ("timeline-pause-redis", "timeline-kill-redis-2" for redis#2): a point
// per hold and per write.
func chaosCharts(r *chaos.Report) map[string]chartWant {
	want := map[string]chartWant{}
	for _, c := range r.Cells {
		if c.Example != nil {
			id := chart.ID("timeline", c.Scenario, c.Backend)
			want[id] = chartWant{points: len(c.Example.Holds) + len(c.Example.Writes), yAxis: true}
		}
	}
	return want
}

// pageState is what the page says of itself (pageScript).
type pageState struct {
	InnerWidth  float64 `json:"innerWidth"`
	ScrollWidth float64 `json:"scrollWidth"`
	Charts      []struct {
		ID        string   `json:"id"`
		Points    int      `json:"points"`
		Untitled  int      `json:"untitled"`
		XLabel    string   `json:"xLabel"`
		YLabel    string   `json:"yLabel"`
		XTicks    []string `json:"xTicks"`
		YTicks    []string `json:"yTicks"`
		Outside   []string `json:"outside"`
		Scrolls   bool     `json:"scrolls"`
		FitsWidth bool     `json:"fitsWidth"`
	} `json:"charts"`
	Small []string `json:"small"`
}

// pageScript gathers pageState: for each chart (an svg), its marked
// parts (class point, axis-label x|y, tick x|y), what of it lies outside
// its viewBox, and whether it fits its box or scrolls in it; the text
// drawn smaller than 10 CSS pixels; and the page's widths.
const pageScript = `(() => {
  // Text as large as it shows: in CSS pixels at the page's zoom (below 1
  // where a phone shows a page laid out wider than its screen), scaled
  // as its svg is.
  const zoom = window.visualViewport.scale;
  const px = (el) => {
    const size = parseFloat(getComputedStyle(el).fontSize);
    const m = el.getScreenCTM ? el.getScreenCTM() : null;
    return zoom * (m ? size * Math.hypot(m.a, m.b) : size);
  };
  const charts = [...document.querySelectorAll('svg')].map(svg => {
    const vb = svg.viewBox.baseVal;
    const box = svg.parentElement;
    const texts = (sel) => [...svg.querySelectorAll(sel)].map(e => e.textContent);
    // An element's box in the svg's own units, whatever its transform.
    const toSVG = svg.getScreenCTM().inverse();
    const outside = [...svg.querySelectorAll('text, .point')].filter(e => {
      const b = e.getBBox(), m = toSVG.multiply(e.getScreenCTM());
      return [[b.x, b.y], [b.x + b.width, b.y], [b.x, b.y + b.height], [b.x + b.width, b.y + b.height]].some(([x, y]) => {
        const p = new DOMPoint(x, y).matrixTransform(m);
        return p.x < vb.x - 1 || p.y < vb.y - 1 || p.x > vb.x + vb.width + 1 || p.y > vb.y + vb.height + 1;
      });
    }).map(e => e.textContent || e.outerHTML.slice(0, 80));
    const cs = getComputedStyle(box);
    return {
      id: svg.id,
      points: svg.querySelectorAll('.point').length,
      untitled: [...svg.querySelectorAll('.point')].filter(p => !(p.querySelector('title') || {}).textContent).length,
      xLabel: texts('.axis-label.x').join(' '),
      yLabel: texts('.axis-label.y').join(' '),
      xTicks: texts('.tick.x'),
      yTicks: texts('.tick.y'),
      outside,
      scrolls: cs.overflowX === 'auto' || cs.overflowX === 'scroll',
      fitsWidth: svg.getBoundingClientRect().width <= box.clientWidth + 1,
    };
  });
  const small = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!n.textContent.trim() || el.closest('title, desc, style')) continue;
    const size = px(el);
    if (size < 10) small.push(el.tagName + ' ' + size.toFixed(1) + 'px: ' + n.textContent.trim().slice(0, 40));
  }
  return {
    innerWidth: window.innerWidth,
    scrollWidth: document.scrollingElement.scrollWidth,
    charts, small,
  };
})()`

// checkPage serves dir's report.html on loopback (as a CI artifact
// viewer would, which also shows requests a file:// page cannot make,
// such as for a favicon), opens it at a phone's and a desktop's width,
// and checks it against want, the charts it must have.
func checkPage(t *testing.T, browser context.Context, dir string, want map[string]chartWant) {
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	page := srv.URL + "/report.html"

	var mu sync.Mutex
	var problems []string
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithListener(func(ev any) {
		var p string
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value))
			}
			p = fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " "))
		case *runtime.EventExceptionThrown:
			p = "exception: " + ev.ExceptionDetails.Text
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				p = fmt.Sprintf("console %s (%s): %s %s", ev.Entry.Level, ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if ev.Request.URL != page {
				p = "request: " + ev.Request.URL
			}
		}
		if p != "" {
			mu.Lock()
			problems = append(problems, p)
			mu.Unlock()
		}
	}))
	defer cancel()
	for _, v := range []struct {
		name          string
		width, height int64
		mobile        bool
	}{{"phone", 390, 844, true}, {"desktop", 1280, 900, false}} {
		opts := []chromedp.EmulateViewportOption{chromedp.EmulateScale(2)}
		if v.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		err := chromedp.Do(ctx, chromedp.EmulateViewport(v.width, v.height, opts...), chromedp.Navigate(page))
		var st pageState
		if err == nil {
			st, err = chromedp.Run(ctx, chromedp.Evaluate[pageState](pageScript))
		}
		if err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		checkLayout(t, v.name, v.width, st)
		checkCharts(t, v.name, st, want)
	}
	// Messages and requests arrive as events, after what caused them:
	// one more round trip to the page brings every one sent before it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[int](`0`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("the page logged or requested something: %s", p)
	}
}

// checkLayout: at width, the page is laid out at that width (it has a
// viewport meta, else a phone shows it zoomed out to 980 pixels), it
// does not scroll sideways, and no text is smaller than 10 CSS pixels.
// A chart wider than its box scrolls in it.
func checkLayout(t *testing.T, name string, width int64, st pageState) {
	t.Helper()
	if st.InnerWidth != float64(width) {
		t.Errorf("%s: the page is laid out %v pixels wide on a %d-pixel screen (no viewport meta?)", name, st.InnerWidth, width)
	}
	if st.ScrollWidth > st.InnerWidth {
		t.Errorf("%s: the page is %v pixels wide on a %v-pixel screen: it scrolls sideways", name, st.ScrollWidth, st.InnerWidth)
	}
	if n := len(st.Small); n > 0 {
		t.Errorf("%s: %d pieces of text smaller than 10 pixels, such as:\n%s", name, n, strings.Join(st.Small[:min(n, 8)], "\n"))
	}
	for _, c := range st.Charts {
		if !c.FitsWidth && !c.Scrolls {
			t.Errorf("%s: chart %q is wider than its box, which does not scroll", name, c.ID)
		}
	}
}

// checkCharts: the page has exactly the charts want names, each with its
// points (every one with a tooltip), its axis labels and ticks, and
// nothing drawn outside it.
func checkCharts(t *testing.T, name string, st pageState, want map[string]chartWant) {
	t.Helper()
	var got []string
	for _, c := range st.Charts {
		got = append(got, c.ID)
		w, ok := want[c.ID]
		switch {
		case !ok:
			continue
		case c.ID == "chart-latency" && c.Points < w.points, c.ID != "chart-latency" && c.Points != w.points:
			t.Errorf("%s: chart %q has %d data points, want %d", name, c.ID, c.Points, w.points)
		case c.Untitled > 0:
			t.Errorf("%s: chart %q: %d data points without a tooltip", name, c.ID, c.Untitled)
		}
		if c.XLabel == "" || len(c.XTicks) == 0 {
			t.Errorf("%s: chart %q: x axis label %q, ticks %q", name, c.ID, c.XLabel, c.XTicks)
		}
		if w.yAxis && (c.YLabel == "" || len(c.YTicks) < 1) {
			t.Errorf("%s: chart %q: y axis label %q, ticks %q", name, c.ID, c.YLabel, c.YTicks)
		}
		if len(c.Outside) > 0 {
			t.Errorf("%s: chart %q draws outside its frame: %q", name, c.ID, c.Outside)
		}
	}
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("%s: charts %q, want %q", name, got, ids)
	}
}
