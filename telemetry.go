// # Telemetry
//
// A Locker records OpenTelemetry metrics when it is given a MeterProvider
// ([WithMeterProvider], Config.MeterProvider) and spans when it is given a
// TracerProvider ([WithTracerProvider], Config.TracerProvider), under the
// instrumentation scope "github.com/distlock/locker". Without them it
// records nothing: each call pays a nil check and allocates nothing more.
//
// Metrics (name, instrument, unit, attributes):
//
//	locker.acquire.duration  histogram      s              locker.backend locker.operation locker.outcome
//	locker.acquisitions      counter        {acquisition}  locker.backend locker.operation locker.outcome
//	locker.locks.held        updowncounter  {lock}         locker.backend
//	locker.hold.duration     histogram      s              locker.backend locker.cause
//	locker.locks.lost        counter        {lock}         locker.backend locker.cause
//	locker.refreshes         counter        {refresh}      locker.backend locker.outcome
//	locker.refresh.duration  histogram      s              locker.backend locker.outcome
//	locker.handoff.duration  histogram      s              locker.backend
//
// locker.acquire.duration is the time an Acquire or TryAcquire call took,
// from the call to its return, whatever the outcome: for Acquire, the wait
// for the lock. locker.acquisitions counts the same calls. locker.locks.held
// is the number of locks held: up at an acquisition, down when Lost closes.
// locker.hold.duration runs from an acquisition to the closing of Lost,
// with the cause. locker.locks.lost counts the locks whose Lost closed for
// any cause but a release. locker.refreshes and locker.refresh.duration
// count and time the refreshes sent to the backend, the watchdog's and
// Refresh's alike (a Refresh that returns before sending one, on a lock
// already lost, is not counted). locker.handoff.duration is the time from a
// release notice to the acquisition it let through, where the Locker waits
// for a backend that sends release notices (redis, postgres); backends
// that wait natively (memory, redlock, zookeeper, etcd) hand over inside
// the driver, where it is not measured: there, see locker.acquire.duration.
//
// Spans (name, attributes), one per call of the method:
//
//	locker.acquire      locker.backend locker.outcome
//	locker.try_acquire  locker.backend locker.outcome
//	locker.release      locker.backend locker.outcome
//	locker.refresh      locker.backend locker.outcome
//
// The spans are of kind internal; the context passed to the backend's
// client carries them, so that an instrumented client's own spans nest
// inside. A span whose call returned an error has status Error with the
// error's text, except a TryAcquire that found the key busy. The
// watchdog's refreshes run in the background and make no span; they are
// counted by locker.refreshes.
//
// Attributes and their values:
//
//	locker.backend    the driver's package name: memory, redis, redlock, zookeeper, etcd,
//	                  postgres
//	locker.operation  acquire, try_acquire
//	locker.outcome    acquire and try_acquire: acquired, busy, timeout, error
//	                  refresh: refreshed, not_held, error
//	                  release: released, not_held, error
//	locker.cause      released (locker.hold.duration only), expired, max_hold,
//	                  refresh_failed, taken_over, session_lost
//	locker.key        the key as given to Acquire; only with WithTelemetryKeys
//
// An acquisition's outcome is busy when TryAcquire found the key held
// (ErrNotAcquired), timeout when the caller's context ended first
// (deadline or cancellation), error otherwise (invalid input, a closed
// Locker, a backend error). A lost lock's cause is expired when its
// validity ran out on the local clock (ErrExpired) and refresh_failed when
// it ran out after its last refresh had failed; max_hold when WithMaxHold
// ended its refreshes (ErrMaxHold); taken_over when a refresh or a TTL
// query found it gone from the server (another holder, or none);
// session_lost when the backend reported it gone (a ZooKeeper session
// expired, an etcd lease revoked).
//
// Keys are left out of every attribute unless WithTelemetryKeys (or
// Config.TelemetryKeys) asks for them: a metric gets a time series per
// distinct attribute set, and keys are unbounded.
package locker

import (
	"context"
	"errors"
	"path"
	"reflect"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/locker/backend"
)

// instrumentationScope names the meter and the tracer.
const instrumentationScope = "github.com/distlock/locker"

// Attribute keys.
const (
	attrBackend   = attribute.Key("locker.backend")
	attrOperation = attribute.Key("locker.operation")
	attrOutcome   = attribute.Key("locker.outcome")
	attrCause     = attribute.Key("locker.cause")
	attrKey       = attribute.Key("locker.key")
)

// An operation is one of the calls that make a span.
type operation uint8

const (
	opAcquire operation = iota
	opTryAcquire
	opRelease
	opRefresh
	nOperations
)

var operationNames = [nOperations]string{"acquire", "try_acquire", "release", "refresh"}
var spanNames = [nOperations]string{"locker.acquire", "locker.try_acquire", "locker.release", "locker.refresh"}

// Outcomes of Acquire and TryAcquire.
const (
	outAcquired = iota
	outBusy
	outTimeout
	outError
	nAcquireOutcomes
)

var acquireOutcomes = [nAcquireOutcomes]string{"acquired", "busy", "timeout", "error"}

// Outcomes of a refresh or a release.
const (
	outDone = iota // refreshed, released
	outNotHeld
	outFailed
	nDoneOutcomes
)

var (
	refreshOutcomes = [nDoneOutcomes]string{"refreshed", "not_held", "error"}
	releaseOutcomes = [nDoneOutcomes]string{"released", "not_held", "error"}
)

// An endCause is why a lock stopped being held, as the lock records it
// when Lost closes.
type endCause uint8

const (
	endReleased endCause = iota
	endExpired
	endMaxHold
	endTakenOver
	endSessionLost
	endRefreshFailed // endExpired after a failed refresh; see ended
	nEndCauses
)

var endCauses = [nEndCauses]string{"released", "expired", "max_hold", "taken_over", "session_lost", "refresh_failed"}

// Histogram bucket boundaries, in seconds: the OpenTelemetry defaults are
// meant for milliseconds. Round trips run from tens of microseconds (a
// server on loopback) to seconds (a wait under contention); holds to hours.
var (
	latencyBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	holdBuckets    = []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600}
)

// telemetry is a Locker's instruments and tracer. A Locker without
// providers has none (client.tel is nil), and every hook starts with that
// nil check.
type telemetry struct {
	tracer  trace.Tracer // nil: no spans
	metrics bool         // the instruments below are set
	keys    bool         // Config.TelemetryKeys
	backend attribute.KeyValue

	acquireDur   metric.Float64Histogram
	acquisitions metric.Int64Counter
	held         metric.Int64UpDownCounter
	holdDur      metric.Float64Histogram
	lost         metric.Int64Counter
	refreshes    metric.Int64Counter
	refreshDur   metric.Float64Histogram
	handoffDur   metric.Float64Histogram

	// The attribute sets of the metric points, built once so that a point
	// costs no allocation here (with TelemetryKeys, one is built per point).
	acquireAttrs [2][nAcquireOutcomes]attrs // by opAcquire, opTryAcquire
	refreshAttrs [nDoneOutcomes]attrs
	endAttrs     [nEndCauses]attrs
	backendAttrs attrs
}

// attrs is one attribute set as the options the instruments take.
type attrs struct {
	set attribute.Set
	rec []metric.RecordOption
	add []metric.AddOption
}

func newAttrs(kvs ...attribute.KeyValue) attrs {
	set := attribute.NewSet(kvs...)
	o := metric.WithAttributeSet(set)
	return attrs{set: set, rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
}

// withKey returns a, plus the key if the Locker records keys.
func (t *telemetry) withKey(a *attrs, key string) *attrs {
	if !t.keys {
		return a
	}
	kvs := append(a.set.ToSlice(), attrKey.String(key))
	k := newAttrs(kvs...)
	return &k
}

// newTelemetry returns the instruments cfg asks for, or nil if it sets no
// provider. Errors creating an instrument are logged: the instrument
// then records nothing, and locking goes on.
func newTelemetry(d backend.Driver, cfg *Config, warn func(msg string, args ...any)) *telemetry {
	if cfg.MeterProvider == nil && cfg.TracerProvider == nil {
		return nil
	}
	name := d.Capabilities().Name
	if name == "" {
		name = backendName(d)
	}
	t := &telemetry{keys: cfg.TelemetryKeys, backend: attrBackend.String(name)}
	if cfg.TracerProvider != nil {
		t.tracer = cfg.TracerProvider.Tracer(instrumentationScope)
	}
	if cfg.MeterProvider != nil {
		if err := t.instruments(cfg.MeterProvider.Meter(instrumentationScope)); err != nil {
			warn("locker: telemetry: some instruments record nothing", "err", err)
		}
		t.metrics = true
	}
	for op := range t.acquireAttrs {
		for o, name := range acquireOutcomes {
			t.acquireAttrs[op][o] = newAttrs(t.backend, attrOperation.String(operationNames[op]), attrOutcome.String(name))
		}
	}
	for o, name := range refreshOutcomes {
		t.refreshAttrs[o] = newAttrs(t.backend, attrOutcome.String(name))
	}
	for c, name := range endCauses {
		t.endAttrs[c] = newAttrs(t.backend, attrCause.String(name))
	}
	t.backendAttrs = newAttrs(t.backend)
	return t
}

// instruments creates the metric instruments on m. Each is usable even
// where creating it failed (a no-op one then).
func (t *telemetry) instruments(m metric.Meter) error {
	var errs []error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(buckets...))
		if err != nil {
			errs = append(errs, err)
		}
		if h == nil {
			h = noop.Float64Histogram{}
		}
		return h
	}
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		if err != nil {
			errs = append(errs, err)
		}
		if c == nil {
			c = noop.Int64Counter{}
		}
		return c
	}
	t.acquireDur = hist("locker.acquire.duration", "Duration of Acquire and TryAcquire calls, waits included.", latencyBuckets)
	t.acquisitions = counter("locker.acquisitions", "Acquire and TryAcquire calls, by outcome.", "{acquisition}")
	held, err := m.Int64UpDownCounter("locker.locks.held", metric.WithDescription("Locks currently held."), metric.WithUnit("{lock}"))
	if err != nil {
		errs = append(errs, err)
	}
	if held == nil {
		held = noop.Int64UpDownCounter{}
	}
	t.held = held
	t.holdDur = hist("locker.hold.duration", "Time from an acquisition to the lock's release or loss.", holdBuckets)
	t.lost = counter("locker.locks.lost", "Locks lost other than by a release, by cause.", "{lock}")
	t.refreshes = counter("locker.refreshes", "Refreshes sent to the backend, by outcome.", "{refresh}")
	t.refreshDur = hist("locker.refresh.duration", "Duration of refreshes sent to the backend.", latencyBuckets)
	t.handoffDur = hist("locker.handoff.duration", "Time from a release notice to the acquisition it let through.", latencyBuckets)
	return errors.Join(errs...)
}

// backendName names d's backend for the locker.backend attribute when its
// Capabilities have no Name: the last
// element of the import path of the package that defines d's type
// (github.com/distlock/locker/redis: "redis"), skipping a major version
// suffix (/v2).
func backendName(d backend.Driver) string {
	t := reflect.TypeOf(d)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if p == "" {
		return "unknown"
	}
	base := path.Base(p)
	if len(base) > 1 && base[0] == 'v' && strings.Trim(base[1:], "0123456789") == "" {
		base = path.Base(path.Dir(p))
	}
	return base
}

// acquire runs c.acquire within a span and records its outcome.
func (t *telemetry) acquire(ctx context.Context, c *client, op operation, key string, wait bool, opts []Option) (Lock, error) {
	start := time.Now()
	var span trace.Span
	callCtx := ctx
	if t.tracer != nil && ctx != nil {
		ctx, span = t.startSpan(ctx, op, key)
	}
	name := "acquire"
	if op == opTryAcquire {
		name = "try-acquire"
	}
	lk, err := c.acquire(ctx, name, key, wait, opts)
	out := acquireOutcome(callCtx, err)
	if t.metrics {
		if ctx == nil {
			ctx = context.Background()
		}
		a := t.withKey(&t.acquireAttrs[op][out], key)
		t.acquireDur.Record(ctx, time.Since(start).Seconds(), a.rec...)
		t.acquisitions.Add(ctx, 1, a.add...)
	}
	if span != nil {
		endSpan(span, acquireOutcomes[out], err, out != outBusy)
	}
	return lk, err
}

func acquireOutcome(ctx context.Context, err error) int {
	switch {
	case err == nil:
		return outAcquired
	case errors.Is(err, ErrNotAcquired):
		return outBusy
	case ctx != nil && ctx.Err() != nil:
		return outTimeout
	}
	return outError
}

func doneOutcome(err error) int {
	switch {
	case err == nil:
		return outDone
	case errors.Is(err, ErrNotHeld):
		return outNotHeld
	}
	return outFailed
}

// tracing says whether t makes spans; t may be nil.
func (t *telemetry) tracing() bool { return t != nil && t.tracer != nil }

func (t *telemetry) startSpan(ctx context.Context, op operation, key string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{t.backend}
	if t.keys {
		attrs = append(attrs, attrKey.String(key))
	}
	return t.tracer.Start(ctx, spanNames[op], trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
}

// endSpan sets the span's outcome, and its status Error if failed and err
// is not nil.
func endSpan(span trace.Span, outcome string, err error, failed bool) {
	span.SetAttributes(attrOutcome.String(outcome))
	if err != nil && failed {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// traceRefresh runs lk.refresh within a span.
func (t *telemetry) traceRefresh(ctx context.Context, lk *lock, ttl time.Duration) error {
	ctx, span := t.startSpan(ctx, opRefresh, lk.key)
	err := lk.refresh(ctx, ttl)
	endSpan(span, refreshOutcomes[doneOutcome(err)], err, true)
	return err
}

// traceRelease runs lk's Release within a span.
func (t *telemetry) traceRelease(ctx context.Context, lk *lock) error {
	ctx, span := t.startSpan(ctx, opRelease, lk.key)
	err := lk.releaseOp(ctx)
	endSpan(span, releaseOutcomes[doneOutcome(err)], err, true)
	return err
}

// refreshed records a refresh of lk sent at start, whose outcome is err.
func (t *telemetry) refreshed(ctx context.Context, lk *lock, start time.Time, err error) {
	if !t.metrics {
		return
	}
	a := t.withKey(&t.refreshAttrs[doneOutcome(err)], lk.key)
	t.refreshDur.Record(ctx, time.Since(start).Seconds(), a.rec...)
	t.refreshes.Add(ctx, 1, a.add...)
}

// epoch is the origin of monotonic.
var epoch = time.Now()

// monotonic returns t as a duration since epoch, on the monotonic clock,
// and at least 1: a lock keeps it in 8 bytes rather than a time.Time's 24.
func monotonic(t time.Time) time.Duration {
	return max(t.Sub(epoch), 1)
}

// started records that lk is held from since; lk.mu is held.
func (t *telemetry) started(lk *lock, since time.Time) {
	lk.since = monotonic(since)
	if t.metrics {
		t.held.Add(context.Background(), 1, t.withKey(&t.backendAttrs, lk.key).add...)
	}
}

// ended records that lk stopped being held (Lost closed) because of why;
// lk.mu is held.
func (t *telemetry) ended(lk *lock, why endCause) {
	if !t.metrics || lk.since == 0 {
		return // lost before it was started: never counted as held
	}
	if why == endExpired && lk.refreshFailed {
		why = endRefreshFailed
	}
	ctx := context.Background()
	t.held.Add(ctx, -1, t.withKey(&t.backendAttrs, lk.key).add...)
	a := t.withKey(&t.endAttrs[why], lk.key)
	t.holdDur.Record(ctx, (monotonic(time.Now()) - lk.since).Seconds(), a.rec...)
	if why != endReleased {
		t.lost.Add(ctx, 1, a.add...)
	}
}

// wokenAt returns the time a release notice woke a waiter, if t records
// handoffs, or the zero time; t may be nil.
func (t *telemetry) wokenAt() time.Time {
	if t == nil || !t.metrics {
		return time.Time{}
	}
	return time.Now()
}

// handoff records the acquisition of key by a waiter woken at woken.
func (t *telemetry) handoff(key string, woken time.Time) {
	t.handoffDur.Record(context.Background(), time.Since(woken).Seconds(), t.withKey(&t.backendAttrs, key).rec...)
}
