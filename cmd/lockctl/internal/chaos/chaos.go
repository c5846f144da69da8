// Package chaos runs lockctl chaos: faults (a holder paused, killed or cut
// off, a server restarted or its clock running ahead) injected into real
// servers and real holder processes, and a fencing-checked resource that
// counts what each backend let through. It turns the Redlock debate into
// a table of measured outcomes.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/cmd/lockctl/internal/bench"
	"github.com/distlock/locker/cmd/lockctl/internal/buildinfo"
)

// Options says what a run does.
type Options struct {
	URLs      []string // deployments, one per backend
	Scenarios []string // names; none means all
	Rounds    int      // per scenario and backend; 0 means 1
	// TTL of the locks of the scenarios that wait for an expiry; raised
	// to each backend's smallest. 0 means 2 s.
	TTL         time.Duration
	RedisServer string // the redis-server binary for the scenarios that restart servers
	Etcd        string // the etcd binary for the leader scenarios
	ZKClasspath string // the ZooKeeper classpath for the leader scenarios
	PGBin       string // the directory of PostgreSQL's programs for the scenarios that restart servers
	Worker      WorkerCommand
	Command     string // the command line, for the report
	// Progress, if set, is told of each round as it starts, with an
	// estimate of the time left.
	Progress func(bench.Progress)
	// Announce, if set, hears before the first round how many
	// connections the run opens.
	Announce func(string)
}

// Report is the outcome of a run.
type Report struct {
	Tool     string        `json:"tool"`
	Build    string        `json:"build"` // lockctl's, the library's and Go's versions (buildinfo)
	Command  string        `json:"command,omitempty"`
	Started  time.Time     `json:"started"`
	Took     time.Duration `json:"took"`
	Machine  string        `json:"machine"`
	Backends []Backend     `json:"backends"`
	Cells    []Cell        `json:"cells"`
	// Connections is the most connections the run's processes (this one
	// and its workers) had open at once to each server, sampled every
	// connSampleEvery as the rounds ran (on Linux).
	Connections []bench.ServerConns `json:"connections,omitempty"`
	Notes       []string            `json:"notes,omitempty"`
}

// Backend is one deployment of the run.
type Backend struct {
	Name        string        `json:"name"`
	URL         string        `json:"url"`               // password redacted
	Servers     string        `json:"servers,omitempty"` // what the servers say of their version, where known
	Fencing     bool          `json:"fencing"`
	Shared      bool          `json:"shared,omitempty"`  // admits shared holds
	Permits     bool          `json:"permits,omitempty"` // admits semaphores
	TTL         time.Duration `json:"ttl"`
	ExpirySlack time.Duration `json:"expiry_slack"`
}

// Cell is a scenario's outcome on one backend, over its rounds.
type Cell struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Rounds   int    `json:"rounds"`
	Counts   Counts `json:"counts"`
	// Recovered: rounds after which the key could be taken again once
	// every fault had cleared.
	Recovered int `json:"recovered"`
	// StaleRounds: rounds in which a stale write was accepted.
	StaleRounds int `json:"stale_rounds"`
	// NewHolder: the longest time from the fault until a rival held the
	// key (the time no one could), over the rounds that had one.
	NewHolder time.Duration `json:"new_holder,omitempty"`
	// Bound, for a scenario whose rival must get the key in time (a
	// killed holder's share or permit coming back), is that time: the
	// TTL, the backend's expiry slack and expiryMargin. A round past it
	// makes the cell unexpected.
	Bound time.Duration `json:"bound,omitempty"`
	// Expect is what should happen; Verdict says whether it did.
	Expect   string   `json:"expect"`
	Verdict  string   `json:"verdict"`
	Expected bool     `json:"expected"`
	Errors   []string `json:"errors,omitempty"`
	// Example is one round's history: the first that let a stale write
	// through, else the first. History has every round's.
	Example *RoundResult  `json:"example,omitempty"`
	History []RoundResult `json:"history"`
}

// RoundResult is one round's history and counts.
type RoundResult struct {
	Counts    Counts        `json:"counts"`
	Holds     []Hold        `json:"holds"`
	Writes    []Write       `json:"writes"`
	Timeline  []Mark        `json:"timeline"`
	Took      time.Duration `json:"took"`
	NewHolder time.Duration `json:"new_holder,omitempty"`
	Recovered bool          `json:"recovered"`
	Err       string        `json:"error,omitempty"`
}

// deployment is a backend the rounds run on.
type deployment struct {
	index   int    // in the run's deployments
	backend string // the backend's name, which scenarios apply to
	label   string // the backend's name, numbered when the run has several of one backend
	url     string // what the workers are given
	fencing bool
	shared  bool // the backend admits shared holds
	permits bool // and semaphores
	values  bool // and stores values with holds (an election leader's)
	ttl     time.Duration
	slack   time.Duration
	servers []*redisServer // those the engine started, for the scenarios that restart them
	pg      []*pgServer    // the PostgreSQL servers the engine started: a primary, and its replica if any
	cluster *cluster       // the three-member cluster the engine started, for the leader scenarios
	bare    bool           // the scenario's Bare
}

// Run runs every scenario on every deployment that it applies to.
func Run(ctx context.Context, o Options) (*Report, error) {
	scs, err := pick(o.Scenarios)
	if err != nil {
		return nil, err
	}
	if len(o.URLs) == 0 {
		return nil, errors.New("no deployment: give one or more --url")
	}
	o.Rounds = max(o.Rounds, 1)
	if o.TTL <= 0 {
		o.TTL = 2 * time.Second
	}
	rep := &Report{Tool: "lockctl chaos", Build: buildinfo.Read().String(), Command: o.Command, Started: time.Now(),
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())}
	e := &engine{o: o, rep: rep, id: runID(), spawn: execWorkers(o.Worker)}
	defer e.cleanup()
	if err := e.prepare(ctx); err != nil {
		return nil, err
	}
	e.plan(scs)
	if o.Announce != nil {
		o.Announce("connections: " + e.connsNote())
	}
	stop := e.sampleConns()
	// Each backend runs its cells in turn, the backends at once: their
	// rounds share no server and no key.
	cells := make([][]Cell, len(e.deps))
	var wg sync.WaitGroup
	for i, d := range e.deps {
		wg.Go(func() {
			for _, sc := range scs {
				if e.applies(sc, d) && ctx.Err() == nil {
					cells[i] = append(cells[i], e.cell(ctx, sc, d))
				}
			}
		})
	}
	wg.Wait()
	stop()
	var cerr error
	if rep.Connections, cerr = e.conns.Peaks(); cerr != nil {
		rep.Notes = append(rep.Notes, "connections: not counted: "+cerr.Error())
	}
	rep.Cells = matrix(scs, cells)
	rep.Took = time.Since(rep.Started)
	return rep, ctx.Err()
}

// matrix orders the cells by scenario, then backend, as the deployments
// were given.
func matrix(scs []*Scenario, byBackend [][]Cell) []Cell {
	var all []Cell
	for _, sc := range scs {
		for _, cs := range byBackend {
			for _, c := range cs {
				if c.Scenario == sc.Name {
					all = append(all, c)
				}
			}
		}
	}
	return all
}

// pick returns the scenarios named, all when none is.
func pick(names []string) ([]*Scenario, error) {
	if len(names) == 0 {
		return Scenarios, nil
	}
	var scs []*Scenario
	for _, sc := range Scenarios {
		if slices.Contains(names, sc.Name) {
			scs = append(scs, sc)
		}
	}
	for _, n := range names {
		if !slices.Contains(ScenarioNames(), n) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %s", n, strings.Join(ScenarioNames(), ", "))
		}
	}
	return scs, nil
}

// engine is one run's state.
type engine struct {
	o    Options
	rep  *Report
	id   string
	deps []*deployment
	dir  string // for the servers the engine starts

	mu    sync.Mutex // guards step and sched
	step  int
	steps int
	sched *schedule
	// workers is the most worker processes a planned round starts.
	workers int

	// spawn makes a round's workers: processes of o.Worker.
	spawn func(url, key string) process

	conns  bench.ConnPeaks
	procMu sync.Mutex // guards procs
	procs  []*proc    // the workers started, for sampleConns

	pgMu  sync.Mutex // guards pg and pgErr
	pg    *pgEnv     // made by the first round that starts PostgreSQL servers
	pgErr error
}

// progress reports the start of d's next round.
func (e *engine) progress(d *deployment, what string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	e.step++
	e.sched.start(d.index, now)
	if e.o.Progress != nil {
		e.o.Progress(bench.Progress{Step: e.step, Steps: e.steps, Elapsed: now.Sub(e.rep.Started), Left: e.sched.timeLeft(now), What: what})
	}
}

// roundEnded notes the end of d's running round.
func (e *engine) roundEnded(d *deployment) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sched.end(d.index, time.Now())
}

// prepare opens each deployment once, to learn its backend and what it
// guarantees.
func (e *engine) prepare(ctx context.Context) error {
	for _, u := range e.o.URLs {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		l, err := locker.Open(octx, u)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", locker.Redact(u), err)
		}
		caps := l.Capabilities()
		l.Close()
		if caps.Name == "memory" {
			return fmt.Errorf("%s: the memory backend's locks live in one process; chaos needs holders in processes of their own (give a server backend)", locker.Redact(u))
		}
		d := &deployment{index: len(e.deps), backend: caps.Name, label: e.label(caps.Name), url: u, fencing: caps.Fencing,
			shared: caps.Shared, permits: caps.Permits, values: caps.MaxValueLen > 0, ttl: max(e.o.TTL, caps.MinTTL), slack: caps.ExpirySlack}
		e.deps = append(e.deps, d)
		e.rep.Backends = append(e.rep.Backends, Backend{Name: d.label, URL: locker.Redact(u), Servers: bench.ServerVersions(ctx, caps.Name, u),
			Fencing: d.fencing, Shared: d.shared, Permits: d.permits, TTL: d.ttl, ExpirySlack: d.slack})
	}
	dir, err := os.MkdirTemp("", "lockctl-chaos-")
	e.dir = dir
	return err
}

// label names a deployment of backend: the backend's name, and from the
// second deployment of one backend on, its number ("redis#2").
func (e *engine) label(backend string) string {
	n := 1
	for _, d := range e.deps {
		if d.backend == backend {
			n++
		}
	}
	if n == 1 {
		return backend
	}
	return fmt.Sprintf("%s#%d", backend, n)
}

func (e *engine) cleanup() {
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// applies reports whether sc runs on d: d's backend is one of sc's,
// and it admits the kinds of hold sc takes.
func (e *engine) applies(sc *Scenario, d *deployment) bool {
	ok, _ := sc.admits(d)
	return ok && slices.Contains(sc.Backends, d.backend)
}

// plan counts the rounds coming, and schedules them per deployment. It
// notes the scenarios a deployment's backend does not admit.
func (e *engine) plan(scs []*Scenario) {
	rounds := make([][]string, len(e.deps))
	for _, sc := range scs {
		for i, d := range e.deps {
			if ok, why := sc.admits(d); !ok && slices.Contains(sc.Backends, d.backend) {
				e.rep.Notes = append(e.rep.Notes, why)
			}
			if e.applies(sc, d) {
				e.workers = max(e.workers, sc.workers())
				e.steps += e.o.Rounds
				for range e.o.Rounds {
					rounds[i] = append(rounds[i], sc.Name)
				}
			}
		}
	}
	e.sched = newSchedule(rounds)
}

// runID is a random name for this run's keys, so that runs on a shared
// deployment do not meet.
func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
