package locker_test

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/memory"
	_ "github.com/distlock/locker/redis" // registers redis://
)

// otelRig is an OpenTelemetry SDK whose metrics and spans stay in memory.
type otelRig struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	cfg    locker.Config
}

func newOtelRig(t testing.TB) *otelRig {
	t.Helper()
	r := &otelRig{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(r.spans))
	t.Cleanup(func() {
		mp.Shutdown(context.Background())
		tp.Shutdown(context.Background())
	})
	r.cfg = locker.Config{MeterProvider: mp, TracerProvider: tp}
	return r
}

// point is one metric data point as the reader collected it.
type point struct {
	metric, kind, unit string
	attrs              map[string]string
	value              float64 // counters: the sum; histograms: the count
	sum                float64 // histograms: the sum of the values
}

func (p point) String() string {
	return fmt.Sprintf("%s%v=%v", p.metric, p.attrs, p.value)
}

func attrMap(s attribute.Set) map[string]string {
	m := map[string]string{}
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// points collects every data point recorded so far (cumulative).
func (r *otelRig) points(t testing.TB) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var ps []point
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/distlock/locker" {
			t.Errorf("instrumentation scope %q, want github.com/distlock/locker", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				kind := "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
				for _, dp := range d.DataPoints {
					ps = append(ps, point{m.Name, kind, m.Unit, attrMap(dp.Attributes), float64(dp.Value), 0})
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					ps = append(ps, point{m.Name, "histogram", m.Unit, attrMap(dp.Attributes), float64(dp.Count), dp.Sum})
				}
			default:
				t.Errorf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return ps
}

// value returns the value of the point of metric with exactly attrs, or
// 0 if there is none.
func value(ps []point, metric string, attrs map[string]string) float64 {
	for _, p := range ps {
		if p.metric == metric && maps(p.attrs, attrs) {
			return p.value
		}
	}
	return 0
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// want checks the values of points, naming them metric{k=v,...}.
func wantPoints(t *testing.T, ps []point, want map[string]float64) {
	t.Helper()
	for spec, v := range want {
		metric, attrs := parseSpec(spec)
		if got := value(ps, metric, attrs); got != v {
			t.Errorf("%s = %v, want %v; points: %v", spec, got, v, ps)
		}
	}
}

// parseSpec parses "name{k=v,k=v}".
func parseSpec(spec string) (string, map[string]string) {
	name, rest, _ := strings.Cut(spec, "{")
	attrs := map[string]string{}
	for kv := range strings.SplitSeq(strings.TrimSuffix(rest, "}"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			attrs[k] = v
		}
	}
	return name, attrs
}

// span returns the spans named name.
func (r *otelRig) spansNamed(name string) []tracetest.SpanStub {
	var s []tracetest.SpanStub
	for _, sp := range r.spans.GetSpans() {
		if sp.Name == name {
			s = append(s, sp)
		}
	}
	return s
}

// wantSpan checks that exactly one span is named name, with attrs and an
// Error status or not.
func (r *otelRig) wantSpan(t *testing.T, name string, attrs map[string]string, failed bool) {
	t.Helper()
	s := r.spansNamed(name)
	if len(s) != 1 {
		t.Errorf("%d spans named %s, want 1", len(s), name)
		return
	}
	got := map[string]string{}
	for _, kv := range s[0].Attributes {
		got[string(kv.Key)] = kv.Value.Emit()
	}
	if !maps(got, attrs) {
		t.Errorf("span %s: attributes %v, want %v", name, got, attrs)
	}
	if isErr := s[0].Status.Code == codes.Error; isErr != failed {
		t.Errorf("span %s: status %v, want Error: %v", name, s[0].Status, failed)
	}
}

const mem = "locker.backend=memory"

// TestTelemetryAcquireRelease: an acquisition, a busy TryAcquire, a
// timed-out Acquire, a refresh and a release each make their metric points
// and spans, and no attribute names the key.
func TestTelemetryAcquireRelease(t *testing.T) {
	ctx := context.Background()
	r := newOtelRig(t)
	l := memory.New(&memory.Options{Config: r.cfg})
	defer l.Close()

	lk, err := l.Acquire(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	wantPoints(t, r.points(t), map[string]float64{
		"locker.acquisitions{" + mem + ",locker.operation=acquire,locker.outcome=acquired}":     1,
		"locker.acquire.duration{" + mem + ",locker.operation=acquire,locker.outcome=acquired}": 1,
		"locker.locks.held{" + mem + "}": 1,
	})
	r.wantSpan(t, "locker.acquire", map[string]string{"locker.backend": "memory", "locker.outcome": "acquired"}, false)

	if _, err := l.TryAcquire(ctx, "orders/42"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	r.wantSpan(t, "locker.try_acquire", map[string]string{"locker.backend": "memory", "locker.outcome": "busy"}, false)

	tctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(tctx, "orders/42"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held key until a deadline: %v, want DeadlineExceeded", err)
	}
	if err := lk.Refresh(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	r.wantSpan(t, "locker.refresh", map[string]string{"locker.backend": "memory", "locker.outcome": "refreshed"}, false)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r.wantSpan(t, "locker.release", map[string]string{"locker.backend": "memory", "locker.outcome": "released"}, false)
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if s := r.spansNamed("locker.release"); len(s) != 2 || s[1].Status.Code != codes.Error ||
		s[1].Attributes[1] != attribute.String("locker.outcome", "not_held") {
		t.Errorf("spans of a second Release: %+v, want the second not_held with status Error", s)
	}
	if s := r.spansNamed("locker.acquire"); len(s) != 2 || s[1].Status.Code != codes.Error ||
		s[1].Attributes[1] != attribute.String("locker.outcome", "timeout") {
		t.Errorf("spans of the timed-out Acquire: %+v, want outcome timeout with status Error", s)
	}

	ps := r.points(t)
	wantPoints(t, ps, map[string]float64{
		"locker.acquisitions{" + mem + ",locker.operation=try_acquire,locker.outcome=busy}":    1,
		"locker.acquisitions{" + mem + ",locker.operation=acquire,locker.outcome=timeout}":     1,
		"locker.acquire.duration{" + mem + ",locker.operation=acquire,locker.outcome=timeout}": 1,
		"locker.refreshes{" + mem + ",locker.outcome=refreshed}":                               1,
		"locker.refresh.duration{" + mem + ",locker.outcome=refreshed}":                        1,
		"locker.locks.held{" + mem + "}":                                                       0,
		"locker.hold.duration{" + mem + ",locker.cause=released}":                              1,
	})
	for _, p := range ps {
		if p.metric == "locker.locks.lost" {
			t.Errorf("a released lock counted as lost: %v", p)
		}
		if p.metric == "locker.acquire.duration" && p.attrs["locker.outcome"] == "timeout" && p.sum < 0.015 {
			t.Errorf("the timed-out Acquire took %vs, want at least its 20ms wait", p.sum)
		}
	}
	noKey(t, r)
}

// noKey fails if a point or a span carries the key.
func noKey(t *testing.T, r *otelRig) {
	t.Helper()
	for _, p := range r.points(t) {
		if _, ok := p.attrs["locker.key"]; ok {
			t.Errorf("point %v names the key without WithTelemetryKeys", p)
		}
	}
	for _, s := range r.spans.GetSpans() {
		for _, kv := range s.Attributes {
			if kv.Key == "locker.key" {
				t.Errorf("span %s names the key without WithTelemetryKeys", s.Name)
			}
		}
	}
}

// TestTelemetryLost: each way of losing a lock is counted under its cause.
func TestTelemetryLost(t *testing.T) {
	ctx := context.Background()
	short := []locker.Option{locker.WithTTL(50 * time.Millisecond)}
	tests := []struct {
		name    string
		backend string
		driver  func() backend.Driver
		lose    func(t *testing.T, lk locker.Lock)
		cause   string
		opts    []locker.Option
	}{
		{
			name: "expired", backend: "memory", cause: "expired",
			opts: append(short, locker.WithAutoRefresh(false)),
		},
		{
			name: "max-hold", backend: "memory", cause: "max_hold",
			opts: append(short, locker.WithMaxHold(time.Millisecond)),
		},
		{
			// Long enough that a refresh is tried, and fails, before the
			// validity runs out even if the watchdog is a few hundred ms late.
			name: "refresh-failed", backend: "memory", cause: "refresh_failed",
			opts:   []locker.Option{locker.WithTTL(600 * time.Millisecond)},
			driver: func() backend.Driver { return failingDriver{memstore.NewDriver(memstore.NewStore())} },
		},
		{
			name: "taken-over", backend: "memory", cause: "taken_over",
			driver: func() backend.Driver { return goneDriver{memstore.NewDriver(memstore.NewStore())} },
			lose: func(t *testing.T, lk locker.Lock) {
				if err := lk.Refresh(ctx, time.Second); !errors.Is(err, locker.ErrNotHeld) {
					t.Fatalf("Refresh of a lock taken over: %v, want ErrNotHeld", err)
				}
			},
		},
		{
			name: "session-lost", backend: "memory", cause: "session_lost",
			driver: func() backend.Driver { return &sessionDriver{Driver: memstore.NewDriver(memstore.NewStore())} },
			lose:   func(t *testing.T, lk locker.Lock) {},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newOtelRig(t)
			d := backend.Driver(memstore.NewDriver(memstore.NewStore()))
			if tc.driver != nil {
				d = tc.driver()
			}
			cfg := r.cfg
			cfg.Logger = slog.New(slog.DiscardHandler) // the refreshes that fail
			l := locker.New(d, &cfg)
			defer l.Close()
			lk, err := l.TryAcquire(ctx, "k", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if sd, ok := d.(*sessionDriver); ok {
				sd.lose()
			}
			if tc.lose != nil {
				tc.lose(t, lk)
			}
			select {
			case <-lk.Lost():
			case <-time.After(5 * time.Second):
				t.Fatal("the lock was not lost")
			}
			b := "locker.backend=" + tc.backend
			wantPoints(t, r.points(t), map[string]float64{
				"locker.locks.lost{" + b + ",locker.cause=" + tc.cause + "}":    1,
				"locker.hold.duration{" + b + ",locker.cause=" + tc.cause + "}": 1,
				"locker.locks.held{" + b + "}":                                  0,
			})
			noKey(t, r)
		})
	}
}

// failingDriver's locks fail every refresh without an answer.
type failingDriver struct{ *memstore.Driver }

type failingHeld struct{ backend.Held }

func (failingHeld) Refresh(context.Context, time.Duration) error {
	return errors.New("connection reset")
}

func (d failingDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	acq.Held = failingHeld{acq.Held}
	return acq, err
}

// sessionDriver reports its last lock lost when told to, as a driver does
// whose session expired.
type sessionDriver struct {
	*memstore.Driver
	mu     sync.Mutex
	onLost func(error)
}

func (d *sessionDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	d.mu.Lock()
	d.onLost = req.OnLost
	d.mu.Unlock()
	return d.Driver.TryAcquire(ctx, req)
}

func (d *sessionDriver) lose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onLost(errors.New("session expired"))
}

// notifyingDriver is a memory driver that does not wait natively but
// sends release notices, so that the Locker waits for it (as it does for
// redis).
type notifyingDriver struct {
	d *memstore.Driver

	mu       sync.Mutex
	watchers map[chan struct{}]bool
	busy     int // attempts that found the key held
}

func newNotifyingDriver() *notifyingDriver {
	return &notifyingDriver{d: memstore.NewDriver(memstore.NewStore()), watchers: map[chan struct{}]bool{}}
}

func (d *notifyingDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.d.TryAcquire(ctx, req)
	if err == nil {
		acq.Held = notifyingHeld{acq.Held, d}
	} else if errors.Is(err, backend.ErrNotAcquired) {
		d.mu.Lock()
		d.busy++
		d.mu.Unlock()
	}
	return acq, err
}

// Capabilities has no Name: the Locker names the backend after the
// driver's package, locker_test.
func (d *notifyingDriver) Capabilities() backend.Capabilities {
	c := d.d.Capabilities()
	c.Name = ""
	return c
}
func (d *notifyingDriver) Close() error { return d.d.Close() }

func (d *notifyingDriver) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	d.mu.Lock()
	d.watchers[ch] = true
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		delete(d.watchers, ch)
		d.mu.Unlock()
	}, nil
}

// waiting says a waiter watches the key and has made its attempt after
// starting to watch: the next notice wakes it from its sleep.
func (d *notifyingDriver) waiting() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.watchers) > 0 && d.busy >= 2
}

func (d *notifyingDriver) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for ch := range d.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

type notifyingHeld struct {
	backend.Held
	d *notifyingDriver
}

func (h notifyingHeld) Release(ctx context.Context) error {
	err := h.Held.Release(ctx)
	h.d.notify()
	return err
}

// TestTelemetryHandoff: a waiter woken by a release notice records the
// handoff.
func TestTelemetryHandoff(t *testing.T) {
	ctx := context.Background()
	r := newOtelRig(t)
	d := newNotifyingDriver()
	l := locker.New(d, &r.cfg)
	defer l.Close()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lk, err := l.Acquire(ctx, "k")
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter to wait for a notice", d.waiting)
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	wantPoints(t, r.points(t), map[string]float64{
		"locker.handoff.duration{locker.backend=locker_test}":                                              1,
		"locker.acquisitions{locker.backend=locker_test,locker.operation=acquire,locker.outcome=acquired}": 2,
	})
}

// TestTelemetryKeys: WithTelemetryKeys adds the key to points and spans.
func TestTelemetryKeys(t *testing.T) {
	ctx := context.Background()
	r := newOtelRig(t)
	l, err := locker.Open(ctx, "memory://keys", locker.WithMeterProvider(r.cfg.MeterProvider),
		locker.WithTracerProvider(r.cfg.TracerProvider), locker.WithTelemetryKeys(true))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Acquire(ctx, "orders/42")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	k := ",locker.key=orders/42"
	wantPoints(t, r.points(t), map[string]float64{
		"locker.acquisitions{" + mem + ",locker.operation=acquire,locker.outcome=acquired" + k + "}": 1,
		"locker.hold.duration{" + mem + ",locker.cause=released" + k + "}":                           1,
		"locker.locks.held{" + mem + k + "}":                                                         0,
	})
	r.wantSpan(t, "locker.acquire", map[string]string{"locker.backend": "memory", "locker.outcome": "acquired", "locker.key": "orders/42"}, false)
}

// documented is what the # Telemetry section of telemetry.go lists.
type documented struct {
	metrics map[string][3]string // name: kind, unit, attribute keys (sorted, space-separated)
	spans   map[string]string    // name: attribute keys
	values  map[string][]string  // attribute key: words of its values
}

// readTelemetryDoc parses the package documentation in telemetry.go.
func readTelemetryDoc(t *testing.T) documented {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := documented{metrics: map[string][3]string{}, spans: map[string]string{}, values: map[string][]string{}}
	metricLine := regexp.MustCompile(`^\t(locker\.\S+)\s+(histogram|counter|updowncounter)\s+(\S+)\s+(.+)$`)
	spanLine := regexp.MustCompile(`^\t(locker\.[a-z_]+)\s+(locker\.backend.*)$`)
	attrLine := regexp.MustCompile(`^\t(locker\.[a-z]+)\s+(.+)$`)
	words := regexp.MustCompile(`[a-z_]+`)
	last := ""
	for _, line := range strings.Split(f.Doc.Text(), "\n") {
		switch m := metricLine.FindStringSubmatch(line); {
		case m != nil:
			doc.metrics[m[1]] = [3]string{m[2], m[3], sortedFields(m[4])}
		case spanLine.MatchString(line):
			m := spanLine.FindStringSubmatch(line)
			doc.spans[m[1]] = sortedFields(m[2])
		case attrLine.MatchString(line):
			m := attrLine.FindStringSubmatch(line)
			last = m[1]
			doc.values[last] = words.FindAllString(m[2], -1)
		case last != "" && strings.HasPrefix(line, "\t "):
			doc.values[last] = append(doc.values[last], words.FindAllString(line, -1)...)
		default:
			last = ""
		}
	}
	if len(doc.metrics) == 0 || len(doc.spans) == 0 || len(doc.values) == 0 {
		t.Fatalf("no metric, span or attribute table found in telemetry.go's documentation: %+v", doc)
	}
	return doc
}

func sortedFields(s string) string {
	f := strings.Fields(s)
	slices.Sort(f)
	return strings.Join(f, " ")
}

func keys(m map[string]string) string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	slices.Sort(k)
	return strings.Join(k, " ")
}

// TestTelemetryDocumented: every instrument and span the SDK sees, with
// its kind, unit, attributes and their values, is in the table of the
// package documentation, and every documented one is seen.
func TestTelemetryDocumented(t *testing.T) {
	doc := readTelemetryDoc(t)
	ctx := context.Background()
	r := newOtelRig(t)

	// Everything, on one Locker: acquire, busy, refresh, release, a lost
	// lock, a handoff.
	d := newNotifyingDriver()
	l := locker.New(d, &r.cfg)
	defer l.Close()
	lk, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		lk, err := l.Acquire(ctx, "a", locker.WithTTL(30*time.Millisecond), locker.WithAutoRefresh(false))
		if err == nil {
			<-lk.Lost()
		}
		done <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter to wait for a notice", d.waiting)
	l.TryAcquire(ctx, "a")
	lk.Refresh(ctx, time.Minute)
	lk.Release(ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	for _, p := range r.points(t) {
		seen[p.metric] = true
		d, ok := doc.metrics[p.metric]
		if !ok {
			t.Errorf("metric %s is not documented", p.metric)
			continue
		}
		if got := [3]string{p.kind, p.unit, keys(p.attrs)}; got != d {
			t.Errorf("metric %s: kind, unit, attributes %q, documented %q", p.metric, got, d)
		}
		checkValues(t, doc, p.metric, p.attrs)
	}
	for name := range doc.metrics {
		if !seen[name] {
			t.Errorf("documented metric %s was not recorded", name)
		}
	}
	seen = map[string]bool{}
	for _, s := range r.spans.GetSpans() {
		seen[s.Name] = true
		attrs := map[string]string{}
		for _, kv := range s.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if d, ok := doc.spans[s.Name]; !ok {
			t.Errorf("span %s is not documented", s.Name)
		} else if keys(attrs) != d {
			t.Errorf("span %s: attributes %q, documented %q", s.Name, keys(attrs), d)
		}
		checkValues(t, doc, s.Name, attrs)
	}
	for name := range doc.spans {
		if !seen[name] {
			t.Errorf("documented span %s was not recorded", name)
		}
	}
}

func checkValues(t *testing.T, doc documented, where string, attrs map[string]string) {
	t.Helper()
	for k, v := range attrs {
		if k == "locker.backend" && v == "locker_test" {
			continue // this test's driver
		}
		if !slices.Contains(doc.values[k], v) {
			t.Errorf("%s: attribute %s=%s: value not documented (%v)", where, k, v, doc.values[k])
		}
	}
}

// discardSpans exports spans nowhere: the benchmark's tracer pays for
// making them, not for sending them.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkTelemetry: uncontended Acquire+Release on memory:// and
// redis:// (when LOCKER_TEST_REDIS_URL is set) by Lockers with no
// provider ("off"), the SDK's MeterProvider with a ManualReader
// ("metrics"), its TracerProvider batching to an exporter that discards
// ("spans"), and both ("otel"). Each alone reports its allocs/op; the
// "interleaved" sub-benchmark runs all four in one loop
// (benchkit.Interleave) and reports "metrics/off", "spans/off",
// "otel/off": throughput relative to no telemetry (below 1: slower).
//
//	eval $(scripts/services.sh env)
//	go test -run '^$' -bench Telemetry -benchmem .
func BenchmarkTelemetry(b *testing.B) {
	ctx := context.Background()
	urls := []struct{ name, url string }{{"memory", "memory://bench"}}
	if u, ok := redisURL(b); ok {
		urls = append(urls, struct{ name, url string }{"redis", u})
	}
	for _, u := range urls {
		b.Run(u.name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardSpans{}))
			defer mp.Shutdown(ctx)
			defer tp.Shutdown(ctx)
			open := func(opts ...locker.OpenOption) locker.Locker {
				l, err := locker.Open(ctx, u.url, opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { l.Close() })
				return l
			}
			lockers := []struct {
				name string
				l    locker.Locker
			}{
				{"off", open()},
				{"metrics", open(locker.WithMeterProvider(mp))},
				{"spans", open(locker.WithTracerProvider(tp))},
				{"otel", open(locker.WithMeterProvider(mp), locker.WithTracerProvider(tp))},
			}
			noRefresh := locker.WithAutoRefresh(false)
			var designs []benchkit.Design
			for _, l := range lockers {
				b.Run(l.name, func(b *testing.B) { benchkit.AcquireRelease(b, l.l, "bench-tel-"+l.name, noRefresh) })
				designs = append(designs, benchkit.Design{Name: l.name, Op: benchkit.AcquireReleaseOp(l.l, "bench-tel-i-"+l.name, noRefresh)})
			}
			b.Run("interleaved", func(b *testing.B) { benchkit.Interleave(b, designs...) })
		})
	}
}

// redisURL returns the test Redis server's URL if one is configured; it
// fails the benchmark if one is required and missing.
func redisURL(b *testing.B) (string, bool) {
	if testenv.Required() {
		return testenv.Get(b, testenv.RedisURL), true
	}
	u := strings.TrimSpace(os.Getenv(testenv.RedisURL))
	return u, u != ""
}
