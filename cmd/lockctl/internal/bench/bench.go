package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/cmd/lockctl/internal/buildinfo"
	"github.com/distlock/locker/conformance"
)

// Options are what a bench run was asked.
type Options struct {
	URLs     []string
	Settings Settings
	// TTL of every lock taken (default 30 s).
	TTL time.Duration
	// Command is the command line, for the report.
	Command string
	// Progress hears of each step as it starts.
	Progress func(Progress)
	// Announce hears, before the first step, what the run is about to
	// open: how many clients at once on each deployment.
	Announce func(string)
	// Holder runs the holders the recovery scenario kills.
	Holder HolderCommand
	// Campaigner runs the campaigners of the failover scenario.
	Campaigner CampaignerCommand
}

// Run measures the deployments at o.URLs in the scenarios o.Settings
// names, and returns the report, targets judged. Designs that cannot be
// built or opened, and scenarios a backend cannot run, are left out with
// a note; an error means nothing could be measured at all.
func Run(ctx context.Context, o Options) (*Report, error) {
	if len(o.URLs) == 0 {
		return nil, fmt.Errorf("no deployment to measure: give one or more --url")
	}
	for _, sc := range o.Settings.Scenarios {
		if !ValidScenario(sc) {
			return nil, fmt.Errorf("unknown scenario %q: want one of %s", sc, strings.Join(Scenarios, ", "))
		}
	}
	if o.TTL <= 0 {
		o.TTL = 30 * time.Second
	}
	s := o.Settings
	rep := &Report{Tool: "lockctl bench", Build: buildinfo.Read().String(), Command: o.Command, Started: time.Now(), Machine: machine(), Settings: s}
	r := &Runner{Settings: s, TTL: o.TTL, KeyPrefix: "lockctl-bench/" + runID() + "/", Progress: o.Progress, Holder: o.Holder, Campaigner: o.Campaigner, began: rep.Started}
	p, err := r.prepareAll(ctx, o.URLs, rep)
	defer p.cleanup()
	if err != nil {
		return nil, err
	}
	if s.RTT > 0 {
		took := sleepTakes(s.RTT / 2)
		r.notef("--rtt %v: the proxies delay each direction by %v, which this machine's timers stretch to about %v: the round trip added is about %v",
			s.RTT, s.RTT/2, took, 2*took)
	}
	r.Plan(p.plan(s, r.Holder != nil, r.Campaigner != nil))
	for i, d := range p.deps {
		n, why := d.clients(s)
		rep.Backends[i].Clients = n
		note := ClientsNote(d.backend.Name, n, why)
		if o.Announce != nil && n > 0 && d.backend.Name != "memory" { // memory's clients connect to nothing
			o.Announce("connections: " + note)
		}
		if (d.backend.Name == "zookeeper" && n > ZKMaxClientCnxns) || (d.backend.Name == "postgres" && n > PGMaxClients) {
			r.notef("%s", note)
		}
	}
	for _, sc := range s.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r.run(ctx, sc, p)
	}
	var cerr error
	if rep.Connections, cerr = r.conns.Peaks(); cerr != nil {
		r.notef("connections: not counted: %v", cerr)
	}
	rep.Results, rep.Notes = r.Results(), r.Notes()
	rep.Targets = Judge(rep)
	rep.Elapsed = time.Since(rep.Started)
	return rep, ctx.Err()
}

// prepared is what every scenario of a run measures.
type prepared struct {
	all      []Design         // every design of every deployment but the KindsOnly ones
	kinds    []Design         // every design of the read-write and semaphore scenarios: all's and the KindsOnly ones
	fanout   map[int][]Design // Redlock designs by node count
	deps     []deployment
	cleanups []func()
}

func (p *prepared) cleanup() {
	for _, c := range p.cleanups {
		c()
	}
}

// prepareAll prepares every deployment in urls, adding each to
// rep.Backends.
func (r *Runner) prepareAll(ctx context.Context, urls []string, rep *Report) (*prepared, error) {
	p := &prepared{fanout: map[int][]Design{}}
	for _, raw := range urls {
		b, url, designs, sets, cleanup, err := prepare(ctx, raw, r.Settings.RTT, r)
		if err != nil {
			return p, err
		}
		p.cleanups = append(p.cleanups, cleanup)
		rep.Backends = append(rep.Backends, b)
		for _, d := range designs {
			if !d.KindsOnly {
				p.all = append(p.all, d)
			}
		}
		p.kinds = append(p.kinds, designs...)
		p.deps = append(p.deps, deployment{backend: b, url: url, designs: designs, fanout: sets})
		for n, ds := range sets {
			p.fanout[n] = append(p.fanout[n], ds...)
		}
	}
	return p, nil
}

// run measures scenario sc.
func (r *Runner) run(ctx context.Context, sc string, p *prepared) {
	switch sc {
	case ScenarioUncontended:
		r.Uncontended(ctx, p.all)
	case ScenarioThroughput:
		r.Throughput(ctx, p.all)
	case ScenarioHotKey:
		r.HotKey(ctx, p.all)
	case ScenarioFreshKeys:
		r.FreshKeys(ctx, p.all)
	case ScenarioFanout:
		if len(p.fanout) == 0 {
			r.notef("fanout: no redlock:// deployment was given")
			return
		}
		r.Fanout(ctx, p.fanout)
	case ScenarioHeldLocks:
		r.HeldLocks(ctx, p.all)
	case ScenarioRecovery:
		r.Recovery(ctx, p.deps)
	case ScenarioFailover:
		r.Failover(ctx, p.deps)
	case ScenarioReadWrite:
		r.ReadWrite(ctx, p.kinds)
	case ScenarioSemaphore:
		r.Semaphore(ctx, p.kinds)
	}
}

// prepare opens the deployment at raw once, to learn its backend and
// capabilities, asks its servers their version (directly, not through
// the proxies), and builds its designs: the Locker, the raw primitives
// and the peers, and for Redlock the fan-out sets by node count. With an
// rtt, every design reaches the servers through proxies that add it, at
// the URL it returns.
func prepare(ctx context.Context, raw string, rtt time.Duration, r *Runner) (Backend, string, []Design, map[int][]Design, func(), error) {
	cleanup := func() {}
	url := raw
	if rtt > 0 {
		u, proxies, err := conformance.ProxyURL(raw)
		if err != nil {
			return Backend{}, "", nil, nil, nil, err
		}
		for _, p := range proxies {
			p.SetLatency(rtt / 2) // each way
		}
		url, cleanup = u, func() {
			for _, p := range proxies {
				p.Close()
			}
		}
	}
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	l, err := locker.Open(octx, url)
	if err != nil {
		cleanup()
		return Backend{}, "", nil, nil, nil, fmt.Errorf("%s: %w", locker.Redact(raw), err)
	}
	caps := l.Capabilities()
	l.Close()
	b := Backend{
		Name: caps.Name, URL: locker.Redact(raw), Servers: ServerVersions(ctx, caps.Name, raw),
		Fencing: caps.Fencing, FIFO: caps.FIFO, WakeOnRelease: caps.WakeOnRelease, ExpirySlack: caps.ExpirySlack, MinTTL: caps.MinTTL,
		Shared: caps.Shared, Permits: caps.Permits,
	}
	designs := designsFor(b.Name, b.Name, url, r)
	for i := range designs {
		if designs[i].Kind == KindLocker {
			// The Locker takes the kinds its backend admits: the
			// scenarios of a kind run it once the backend does.
			designs[i].Shared, designs[i].Permits = caps.Shared, caps.Permits
		}
	}
	sets := map[int][]Design{}
	if b.Name == "redlock" {
		// The node counts the issue of Redlock's cost is argued over:
		// three, and all that were given.
		hosts := hostsOf(url)
		for _, n := range []int{3, len(hosts)} {
			if n <= len(hosts) && sets[n] == nil {
				sets[n] = designsFor(fmt.Sprintf("redlock-%d", n), "redlock", withHosts(url, hosts[:n]), r)
			}
		}
	}
	return b, url, designs, sets, cleanup, nil
}

// designsFor is the Locker, raw and peer designs of the kind of backend
// (redis, redlock, ...) at url, named backend in the results; the ones
// that cannot be built are left out with a note.
func designsFor(backend, kind, url string, r *Runner) []Design {
	ds := []Design{LockerDesign(backend, url)}
	raws, err := RawDesigns(kind, url)
	if err != nil {
		r.notef("%s: no raw design: %v", backend, err)
	}
	peers, err := PeerDesigns(kind, url)
	if err != nil {
		r.notef("%s: no peer design: %v", backend, err)
	}
	if kp, err := PeerKindDesigns(kind, url); err == nil {
		peers = append(peers, kp...)
	}
	for _, d := range append(raws, peers...) {
		d.Backend = backend
		ds = append(ds, d)
	}
	return ds
}

// hostsOf returns the hosts of a URL's authority: scheme://[user@]h1,h2/...
func hostsOf(url string) []string {
	_, rest, _ := strings.Cut(url, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return strings.Split(rest, ",")
}

// withHosts returns url with its hosts replaced by hosts.
func withHosts(url string, hosts []string) string {
	scheme, rest, _ := strings.Cut(url, "://")
	tail := ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest, tail = rest[:i], rest[i:]
	}
	user := ""
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		user = rest[:i+1]
	}
	return scheme + "://" + user + strings.Join(hosts, ",") + tail
}

// plan is how long each step of a run with settings s measures, in the
// order the steps run, for the estimate of the time left: the time each
// design is given, times the designs taking turns; the held locks'
// hold; the recovery and failover rounds' expiries. holder and
// campaigner say whether the recovery and failover scenarios have
// processes to kill.
func (p *prepared) plan(s Settings, holder, campaigner bool) []time.Duration {
	var waiting []Design
	for _, d := range p.all {
		if d.Waits {
			waiting = append(waiting, d)
		}
	}
	each := func(ds []Design) time.Duration { return s.Duration * time.Duration(len(ds)) }
	r := &Runner{Settings: s}
	var steps []time.Duration
	for _, sc := range s.Scenarios {
		switch sc {
		case ScenarioUncontended, ScenarioFreshKeys:
			steps = append(steps, each(p.all))
		case ScenarioThroughput:
			for range s.Clients {
				steps = append(steps, each(p.all))
			}
		case ScenarioHotKey:
			for range s.Waiters {
				steps = append(steps, each(waiting))
			}
		case ScenarioFanout:
			for _, n := range slices.Sorted(maps.Keys(p.fanout)) {
				steps = append(steps, each(p.fanout[n]))
			}
		case ScenarioHeldLocks:
			for _, dep := range p.deps {
				for _, d := range dep.designs {
					if d.Kind == KindLocker {
						steps = append(steps, 2*max(r.heldTTL(), dep.backend.MinTTL))
					}
				}
			}
		case ScenarioRecovery:
			for _, tg := range p.deps {
				if holder && tg.backend.Name != "memory" {
					round := recoveryTTL(tg.backend.MinTTL) + tg.backend.ExpirySlack
					steps = append(steps, round*time.Duration(r.recoveryRounds()))
				}
			}
		case ScenarioFailover:
			for _, tg := range p.deps {
				if campaigner && tg.backend.Name != "memory" {
					// An expiry per round, and a campaigner's start.
					round := recoveryTTL(tg.backend.MinTTL) + tg.backend.ExpirySlack + time.Second
					for range electionDesigns(tg.backend.Name) {
						steps = append(steps, round*time.Duration(r.failoverRounds()))
					}
				}
			}
		case ScenarioReadWrite:
			steps = append(steps, each(r.sharedDesigns(p.kinds, false)))
		case ScenarioSemaphore:
			steps = append(steps, each(r.permitDesigns(p.kinds, false)))
		}
	}
	return steps
}

// clients is the most clients the run opens at once on d with settings
// s (each with connections of its own), and in which step.
func (d deployment) clients(s Settings) (int, string) {
	var waiting int
	mutexes := d.designs[:0:0] // the designs of the mutex scenarios
	for _, ds := range d.designs {
		if ds.KindsOnly {
			continue
		}
		mutexes = append(mutexes, ds)
		if ds.Waits {
			waiting++
		}
	}
	most, why := 0, ""
	r := &Runner{Settings: s}
	at := func(n int, format string, args ...any) {
		if n > most {
			most, why = n, fmt.Sprintf(format, args...)
		}
	}
	for _, sc := range s.Scenarios {
		switch sc {
		case ScenarioUncontended, ScenarioFreshKeys:
			at(len(mutexes), "%s: one client of each of %s", sc, designsText(len(mutexes)))
		case ScenarioThroughput:
			for _, n := range s.Clients {
				at(n*len(mutexes), "throughput: %d clients of each of %s", n, designsText(len(mutexes)))
			}
		case ScenarioHotKey:
			for _, w := range s.Waiters {
				at(w*waiting, "hot-key: %d waiters of each of %s", w, designsText(waiting))
			}
		case ScenarioFanout:
			for _, n := range slices.Sorted(maps.Keys(d.fanout)) { // a tie names the same step every run
				at(len(d.fanout[n]), "fanout on %d nodes: one client of each of %s", n, designsText(len(d.fanout[n])))
			}
		case ScenarioHeldLocks:
			at(1, "held-locks: one client")
		case ScenarioRecovery:
			if d.backend.Name != "memory" {
				at(2, "recovery: a holder process and a waiter")
			}
		case ScenarioFailover:
			if d.backend.Name != "memory" {
				at(failoverCampaigners, "failover: %d campaigner processes", failoverCampaigners)
			}
		case ScenarioReadWrite:
			if n := len(r.sharedDesigns(d.designs, false)); n > 0 {
				at(n*(r.readers()+1), "read-write: %d readers and a writer of each of %s", r.readers(), designsText(n))
			}
		case ScenarioSemaphore:
			if n := len(r.permitDesigns(d.designs, false)); n > 0 {
				at(n*2*r.permits(), "semaphore: %d clients of each of %s", 2*r.permits(), designsText(n))
			}
		}
	}
	return most, why
}

// designsText is "1 design", "3 designs".
func designsText(n int) string {
	if n == 1 {
		return "1 design"
	}
	return fmt.Sprintf("%d designs", n)
}

// sleepTakes is how long a sleep of d takes on this machine: timers round
// short sleeps up (to about a millisecond on some virtual machines), and
// the proxies of --rtt sleep.
func sleepTakes(d time.Duration) time.Duration {
	const n = 20
	start := time.Now()
	for range n {
		time.Sleep(d)
	}
	return (time.Since(start) / n).Round(10 * time.Microsecond)
}

func machine() Machine {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.Hostname, _ = os.Hostname()
	return m
}

func runID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ValidScenario reports whether name is a scenario.
func ValidScenario(name string) bool { return slices.Contains(Scenarios, name) }
