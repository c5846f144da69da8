// Package conformance checks that a lock backend, or a live deployment of
// one, keeps the locker contract: mutual exclusion, auto-expiry of crashed
// holders, safe release, fencing, and the lost-lock signal.
//
// In a test, run the suite against a harness that makes independent
// clients:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.URLHarness("redis://127.0.0.1:6379"))
//	}
//
// Outside go test, Check runs the same cases and returns a Report:
//
//	rep, err := conformance.Check(ctx, conformance.URLHarness(url))
//	fmt.Print(rep)
//
// Each case is a named row with the rule it checks; a failure says which
// rule broke and how. Cases that need something the backend does not
// claim (Capabilities) or the harness cannot do (Crash) are skipped with
// the reason, never by name.
//
// The cases use keys under "conformance/<random run id>/", so a run against
// a shared deployment touches nothing else, and leaves nothing behind once
// the TTLs used (a few seconds at most by default) have passed.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/distlock/locker"
)

// Client is one client of the deployment under test, as a separate process
// would be.
type Client struct {
	Locker locker.Locker
	// Crash cuts the client off from its servers without releasing
	// anything, as a crashed or partitioned process: connections are
	// dropped and new ones refused. Nil if the harness cannot do that; the
	// cases that need it are then skipped.
	Crash func()
	// Cleanup, if set, runs after the Locker is closed.
	Cleanup func()
}

// Harness tells the suite how to make clients of the deployment under
// test.
type Harness struct {
	// NewClient returns a new, independent client. Required.
	NewClient func(ctx context.Context) (Client, error)
	// TTL is the short TTL used by cases that wait for a lock to expire.
	// Default: 250ms, or the backend's MinTTL if larger.
	TTL time.Duration
	// Slack is how much longer than TTL + Capabilities.ExpirySlack the
	// suite waits for an expired or crashed holder's lock to move on,
	// for timers and scheduling on a loaded machine. Default: DefaultSlack.
	Slack time.Duration
}

// DefaultSlack is the default Harness.Slack.
const DefaultSlack = 500 * time.Millisecond

// URLHarness returns a Harness whose clients open rawURL through
// locker.Open, each behind its own loopback proxies (one per host in the
// URL), so that Crash can cut one client off without touching the servers
// or the other clients. The backend's package must be imported.
func URLHarness(rawURL string) Harness {
	return Harness{NewClient: func(ctx context.Context) (Client, error) {
		u, proxies, err := ProxyURL(rawURL)
		if err != nil {
			return Client{}, err
		}
		closeAll := func() {
			for _, p := range proxies {
				p.Close()
			}
		}
		l, err := locker.Open(ctx, u)
		if err != nil {
			closeAll()
			return Client{}, err
		}
		return Client{
			Locker: l,
			Crash: func() {
				for _, p := range proxies {
					p.Cut()
				}
			},
			Cleanup: closeAll,
		}, nil
	}}
}

// Status is the outcome of one case.
type Status string

// The outcomes of a case.
const (
	Pass Status = "pass"
	Fail Status = "FAIL"
	Skip Status = "skip"
)

// Result is one case's outcome.
type Result struct {
	Name    string
	Rule    string // the rule the case checks
	Status  Status
	Detail  string // why it failed or was skipped
	Elapsed time.Duration
}

// Report is the outcome of a run of the suite.
type Report struct {
	Capabilities locker.Capabilities
	Results      []Result
}

// Failed returns the results that failed.
func (r Report) Failed() []Result {
	var f []Result
	for _, res := range r.Results {
		if res.Status == Fail {
			f = append(f, res)
		}
	}
	return f
}

// Result returns the result of the named case.
func (r Report) Result(name string) (Result, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res, true
		}
	}
	return Result{}, false
}

// String formats the report as a table, failures explained below it.
func (r Report) String() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CASE\tRESULT\tTIME\tRULE\n")
	var pass, fail, skip int
	for _, res := range r.Results {
		switch res.Status {
		case Pass:
			pass++
		case Fail:
			fail++
		case Skip:
			skip++
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", res.Name, res.Status, res.Elapsed.Round(time.Millisecond), res.Rule)
	}
	tw.Flush()
	for _, res := range r.Results {
		if res.Status != Pass {
			fmt.Fprintf(&b, "\n%s %s: %s\n", res.Name, res.Status, res.Detail)
		}
	}
	fmt.Fprintf(&b, "\n%d passed, %d failed, %d skipped\n", pass, fail, skip)
	return b.String()
}

// Run runs every case as a subtest of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s, err := newSuite(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := s.run(context.Background(), c)
			switch res.Status {
			case Fail:
				t.Errorf("rule broken: %s\n%s", c.rule, res.Detail)
			case Skip:
				t.Skip(res.Detail)
			}
		})
	}
}

// Check runs every case and returns the report. The error is non-nil when
// a case failed or the harness could not make a client.
func Check(ctx context.Context, h Harness) (Report, error) {
	s, err := newSuite(ctx, h)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Capabilities: s.caps}
	for _, c := range cases {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		rep.Results = append(rep.Results, s.run(ctx, c))
	}
	if f := rep.Failed(); len(f) > 0 {
		names := make([]string, len(f))
		for i, r := range f {
			names[i] = r.Name
		}
		return rep, fmt.Errorf("conformance: %d case(s) failed: %s", len(f), strings.Join(names, ", "))
	}
	return rep, nil
}

// Names returns the names of the cases, in the order they run.
func Names() []string {
	n := make([]string, len(cases))
	for i, c := range cases {
		n[i] = c.name
	}
	return n
}

type testCase struct {
	name string
	rule string
	fn   func(*T)
}

type suite struct {
	h     Harness
	caps  locker.Capabilities
	runID string
}

func newSuite(ctx context.Context, h Harness) (*suite, error) {
	if h.NewClient == nil {
		return nil, errors.New("conformance: Harness.NewClient is nil")
	}
	c, err := h.NewClient(ctx)
	if err != nil {
		return nil, fmt.Errorf("conformance: cannot make a client: %w", err)
	}
	caps := c.Locker.Capabilities()
	c.Locker.Close()
	if c.Cleanup != nil {
		c.Cleanup()
	}
	if h.TTL <= 0 {
		h.TTL = max(250*time.Millisecond, caps.MinTTL)
	}
	if h.Slack <= 0 {
		h.Slack = DefaultSlack
	}
	var id [4]byte
	rand.Read(id[:])
	return &suite{h: h, caps: caps, runID: hex.EncodeToString(id[:])}, nil
}

func (s *suite) run(ctx context.Context, c testCase) Result {
	// Every case finishes well within this, unless a lock never frees.
	budget := 30*time.Second + 20*(s.h.TTL+s.caps.ExpirySlack+s.h.Slack)
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	t := &T{ctx: ctx, s: s, name: c.name}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.fail(fmt.Sprintf("panic: %v", r))
			}
		}()
		c.fn(t)
	}()
	<-done
	t.runCleanups()
	res := Result{Name: c.name, Rule: c.rule, Status: Pass, Elapsed: time.Since(start)}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case len(t.failures) > 0:
		res.Status, res.Detail = Fail, strings.Join(t.failures, "\n")
	case t.skipped != "":
		res.Status, res.Detail = Skip, t.skipped
	}
	return res
}

// T is the state of one running case. Its methods may be called from any
// goroutine of the case; Fatalf and Skipf end the calling goroutine.
type T struct {
	ctx  context.Context
	s    *suite
	name string

	mu       sync.Mutex
	failures []string
	skipped  string
	cleanups []func()
}

func (t *T) fail(msg string) {
	t.mu.Lock()
	t.failures = append(t.failures, msg)
	t.mu.Unlock()
}

// Errorf records a failure and goes on.
func (t *T) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

// Fatalf records a failure and ends the calling goroutine.
func (t *T) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// Skipf records why the case does not apply and ends it.
func (t *T) Skipf(format string, args ...any) {
	t.mu.Lock()
	t.skipped = fmt.Sprintf(format, args...)
	t.mu.Unlock()
	runtime.Goexit()
}

func (t *T) cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *T) runCleanups() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// client makes a new client, closed when the case ends.
func (t *T) client() Client {
	c, err := t.s.h.NewClient(t.ctx)
	if err != nil {
		t.Fatalf("harness: cannot make a client: %v", err)
	}
	t.cleanup(func() {
		c.Locker.Close()
		if c.Cleanup != nil {
			c.Cleanup()
		}
	})
	return c
}

// locker makes a new client and returns its Locker.
func (t *T) locker() locker.Locker { return t.client().Locker }

// crashable makes a client that can crash, or skips the case.
func (t *T) crashable() Client {
	c := t.client()
	if c.Crash == nil {
		t.Skipf("the harness cannot crash a client (Client.Crash is nil)")
	}
	return c
}

// key returns a key unique to this run and case.
func (t *T) key(suffix string) string {
	return "conformance/" + t.s.runID + "/" + t.name + "/" + suffix
}

// ttl is the harness's short TTL.
func (t *T) ttl() time.Duration { return t.s.h.TTL }

// longTTL is a TTL no case waits out: when a case must tell an event
// caused by a release from one caused by expiry, the lock has this TTL.
func (t *T) longTTL() time.Duration { return max(20*t.s.h.TTL, 10*time.Second) }

// expiryBound is how long after a holder stopped refreshing its lock may
// still block others: TTL + ExpirySlack + Slack.
func (t *T) expiryBound(ttl time.Duration) time.Duration {
	return ttl + t.s.caps.ExpirySlack + t.s.h.Slack
}

func (t *T) caps() locker.Capabilities { return t.s.caps }
