// Package conformance checks that a lock backend, or a live deployment of
// one, keeps the locker contract: mutual exclusion, auto-expiry of crashed
// holders (also for a client already waiting), safe release, fencing, FIFO
// hand-off where the backend claims it, and the lost-lock signal; and,
// where the backend admits them (Capabilities.Shared, .Permits), shared
// holds and semaphores: at most n permits held, readers together and
// writers alone, admission in queue order where FIFO is claimed, fences in
// grant order across kinds, crashed holders' shares freed, a cancelled
// writer unblocking the readers behind it, and disagreeing kinds refused;
// and values stored with holds (Capabilities.MaxValueLen), reentrant
// owners (locker.WithOwner), and elections: one leader at a time, terms
// in order where the backend fences, resignation handing over at once,
// observers seeing every change in order, a crashed leader replaced
// within its TTL, leadership never reentrant under an owner, and the
// leader loop (Election.Run) handing over when its leader is cut off. A case that needs what the backend does not claim
// (fencing, values, an inspector for Leader and Observe) is skipped,
// naming it.
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
// a shared deployment touches nothing else. Every case releases what it
// takes; what a crashed client or an interrupted run leaves behind expires
// with the longest TTL a case uses (plus the backend's ExpirySlack):
// T.LongTTL, or a minute for the lock held while an Acquire is cancelled
// (less where the backend's MaxTTL is lower).
//
// # Cases of your own
//
// Harness.Cases adds cases to a run: checks a team wants of its own
// deployment, such as the TTLs its services use or how soon a released key
// reaches a waiter. They run after the built-in cases, in Run as subtests
// and in Check as rows of the Report, with the same helpers the built-in
// cases use (see T). The package conformancesuite runs the suite as a
// testify suite.
//
// # Running time
//
// A run spends most of its time waiting: the cases that check expiry wait
// out the harness's TTL plus the backend's Capabilities.ExpirySlack plus
// Harness.Slack, several times each, so a backend whose locks expire late
// (a ZooKeeper session timeout) takes longer than one that expires them on
// time. The TIME column of a Report, or go test -v, shows where the time
// goes; to see it for the embedded backend and for each server:
//
//	go test -count=1 -v -run 'TestConformance' ./memory
//	eval $(scripts/services.sh env) && go test -count=1 -v -run 'TestConformance' ./redis ./redlock ./zookeeper ./etcd ./postgres
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Cases are run after the built-in cases, in order. Each needs a
	// Name no other case has, a Rule and a Func. Default: none.
	Cases []Case
	// Select, if set, picks the cases to run by name, built-in and own
	// alike; the others are left out of the run and its Report. Default:
	// every case.
	Select func(name string) bool
	// Observe, if set, is called by Check as each case starts (Result
	// nil) and once it has ended, for live progress; Run reports through
	// go test instead. It runs on Check's goroutine: a slow Observe slows
	// the run. Default: none.
	Observe func(Progress)
}

// Progress is where a Check run stands, for Harness.Observe.
type Progress struct {
	Case  string // the case's name
	Rule  string // the rule it checks
	Index int    // its place in the run, from 1
	Total int    // how many cases the run has
	// Result is nil as the case starts, and its outcome once it ended.
	Result *Result
}

// DefaultSlack is the default Harness.Slack.
const DefaultSlack = 500 * time.Millisecond

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
	// KeyPrefix is what every key the run used starts with,
	// "conformance/<run id>/": a crashed client's or an interrupted run's
	// locks, until they expire, are under it.
	KeyPrefix string
	Results   []Result
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

// Run runs every case, the built-in ones and then h.Cases, as a subtest
// of t.
func Run(t *testing.T, h Harness) {
	t.Helper()
	s, err := newSuite(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range s.cases {
		t.Run(c.Name, func(t *testing.T) {
			res := s.run(context.Background(), c)
			switch res.Status {
			case Fail:
				t.Errorf("rule broken: %s\n%s", c.Rule, res.Detail)
			case Skip:
				t.Skip(res.Detail)
			}
		})
	}
}

// Check runs every case, the built-in ones and then h.Cases, and returns
// the report. The error is non-nil when a case failed, the harness could
// not make a client, or h.Cases is not valid.
func Check(ctx context.Context, h Harness) (Report, error) {
	s, err := newSuite(ctx, h)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Capabilities: s.caps, KeyPrefix: s.keyPrefix()}
	for i, c := range s.cases {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		p := Progress{Case: c.Name, Rule: c.Rule, Index: i + 1, Total: len(s.cases)}
		if s.h.Observe != nil {
			s.h.Observe(p)
		}
		res := s.run(ctx, c)
		rep.Results = append(rep.Results, res)
		if s.h.Observe != nil {
			p.Result = &res
			s.h.Observe(p)
		}
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

// Cases returns the built-in cases, in the order they run: their names
// and rules, for listing; their Funcs run only within Run or Check.
func Cases() []Case { return slices.Clone(cases) }

// Names returns the names of the built-in cases, in the order they run.
func Names() []string {
	n := make([]string, len(cases))
	for i, c := range cases {
		n[i] = c.Name
	}
	return n
}

type suite struct {
	h     Harness
	cases []Case // the built-in cases, then h.Cases
	caps  locker.Capabilities
	runID string
}

func newSuite(ctx context.Context, h Harness) (*suite, error) {
	if h.NewClient == nil {
		return nil, errors.New("conformance: Harness.NewClient is nil")
	}
	all, err := withOwnCases(h.Cases)
	if err != nil {
		return nil, err
	}
	if h.Select != nil {
		// A copy: all may be the package's own list of cases.
		all = slices.DeleteFunc(slices.Clone(all), func(c Case) bool { return !h.Select(c.Name) })
		if len(all) == 0 {
			return nil, errors.New("conformance: Harness.Select picks no case")
		}
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
	return &suite{h: h, cases: all, caps: caps, runID: hex.EncodeToString(id[:])}, nil
}

// withOwnCases returns the built-in cases followed by own, or an error
// that says which of own is not valid.
func withOwnCases(own []Case) ([]Case, error) {
	builtIn := make(map[string]bool, len(cases))
	for _, c := range cases {
		builtIn[c.Name] = true
	}
	seen := make(map[string]bool, len(own))
	for i, c := range own {
		switch {
		case c.Name == "":
			return nil, fmt.Errorf("conformance: Harness.Cases[%d] has no Name", i)
		case builtIn[c.Name]:
			return nil, fmt.Errorf("conformance: Harness.Cases[%d]: %q is the name of a built-in case", i, c.Name)
		case seen[c.Name]:
			return nil, fmt.Errorf("conformance: Harness.Cases[%d]: the name %q is used twice", i, c.Name)
		case c.Rule == "":
			return nil, fmt.Errorf("conformance: Harness.Cases[%d] (%q) has no Rule", i, c.Name)
		case c.Func == nil:
			return nil, fmt.Errorf("conformance: Harness.Cases[%d] (%q) has no Func", i, c.Name)
		}
		seen[c.Name] = true
	}
	return append(slices.Clip(cases), own...), nil
}

func (s *suite) run(ctx context.Context, c Case) Result {
	// Every case finishes well within this, unless a lock never frees.
	budget := 30*time.Second + 20*(s.h.TTL+s.caps.ExpirySlack+s.h.Slack)
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	t := &T{ctx: ctx, s: s, name: c.Name}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				t.fail(fmt.Sprintf("panic: %v", r))
			}
		}()
		c.Func(t)
	}()
	<-done
	t.runCleanups()
	res := Result{Name: c.Name, Rule: c.Rule, Status: Pass, Elapsed: time.Since(start)}
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
