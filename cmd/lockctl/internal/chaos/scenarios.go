package chaos

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// A Scenario is one fault, run a round at a time on a deployment.
type Scenario struct {
	Name  string
	About string
	// Backends it applies to.
	Backends []string
	// Servers: the scenario restarts servers, so it runs on servers of
	// its own that the engine starts (Redis or PostgreSQL ones, or a
	// cluster), not on the deployment given.
	Servers serverSet
	// Violates: the backends on which the scenario is expected to let a
	// stale write through (Redlock, which cannot fence).
	Violates []string
	// Keeps: the backends on which the lock survives the fault: a rival
	// must not hold the key while the holder does, and the next holder's
	// fence is above the last one's.
	Keeps []string
	// Loses: the backends on which the fault loses the holder's grant
	// and the fence it was given (a failover to an asynchronous replica):
	// a second holder and a repeated fence are expected in every round.
	Loses []string
	// Bare: on Redlock, the holder reaches only nodes 1 to 3 of 5 when it
	// acquires, Kleppmann's case: one faulty node of the three then hands
	// a rival a majority. With all five votes, one node cannot.
	Bare bool
	// Needs is the kind of hold the scenario takes besides the mutex:
	// needShared or needPermits. It runs only on the backends whose
	// Capabilities admit it, and the report notes the others.
	Needs string
	// Bounded: a rival must get the key within the lock's TTL, the
	// backend's expiry slack and expiryMargin after the fault (a killed
	// holder's share or permit comes back in time).
	Bounded bool
	// Workers is how many worker processes a round starts, if not 2.
	Workers int
	run     func(ctx context.Context, r *round, d *deployment) error
}

// workers is how many worker processes a round of sc starts.
func (sc *Scenario) workers() int { return max(sc.Workers, 2) }

// What a scenario may need of a backend (Scenario.Needs).
const (
	needShared  = "shared holds"
	needPermits = "semaphores"
)

// admits reports whether sc can run on d, and if not, why.
func (sc *Scenario) admits(d *deployment) (bool, string) {
	switch {
	case sc.Needs == needShared && !d.shared:
		return false, fmt.Sprintf("%s: not run on %s: the backend does not admit shared holds (Capabilities.Shared is false)", sc.Name, d.label)
	case sc.Needs == needPermits && !d.permits:
		return false, fmt.Sprintf("%s: not run on %s: the backend does not admit semaphores (Capabilities.Permits is false)", sc.Name, d.label)
	}
	return true, ""
}

// expiryMargin is what a Bounded scenario allows beyond the TTL and the
// backend's expiry slack: the rival's wake-up and round trips on a
// loaded machine.
const expiryMargin = time.Second

// serverSet is what servers a scenario starts for itself.
type serverSet int

const (
	givenServers serverSet = iota // the deployment's own
	ownServers                    // Redis: one redis-server; Redlock: five; no persistence. PostgreSQL: one server
	ownAOF                        // one redis-server, AOF with appendfsync always
	ownFailover                   // a primary and its asynchronous replica: Redis with three Sentinels (sentinelGroup), PostgreSQL streaming (pgPair)
	ownCluster                    // three etcd members or a ZooKeeper ensemble of three (cluster.go)
)

// Scenarios in the order they run.
var Scenarios = []*Scenario{
	{Name: "pause", Backends: serverBackends, Violates: []string{"redlock"}, run: runPause,
		About: "the holder is paused (SIGSTOP) past its TTL; a rival takes the key and writes; the holder resumes and makes the write it had decided on before the pause"},
	{Name: "kill", Backends: serverBackends, run: runKill,
		About: "the holder is killed (SIGKILL); a rival waits for the key"},
	{Name: "partition", Backends: serverBackends, run: runPartition,
		About: "the holder is cut off from every server (its proxies drop its connections and refuse new ones; on ZooKeeper and etcd its session or lease expires); a rival takes the key once it expires; the holder is let back and writes if it still believes it holds"},
	{Name: "blackhole", Backends: serverBackends, run: runBlackhole,
		About: "the holder's traffic silently stops both ways (connections stay open, nothing arrives, new ones stall): a partition that sends no reset; a rival takes the key once it expires; the holder is let back and writes if it still believes it holds"},
	{Name: "latency", Backends: serverBackends, run: runLatency,
		About: "every request of the holder and every reply to it is delayed by 45% of the TTL each way, so that a refresh's reply comes back after most of its validity; a rival waits for the key"},
	{Name: "lost-replies", Backends: serverBackends, run: runLostReplies,
		About: "the holder's acquisition reaches the servers and is applied, but its replies are held back until the holder gives up waiting, then dropped with its connections: the key must not stay blocked past its TTL"},
	{Name: "clock-fast", Backends: []string{"redis", "redlock"}, Violates: []string{"redlock"}, Servers: ownServers, Bare: true, run: runClockFast,
		About: "a server's clock runs ahead: the lock key expires early on it (simulated by cutting the key's remaining TTL to 1 ms, since libfaketime does not work with redis-server); Redlock's holder reached a bare majority (3 of 5), one of which is that node"},
	{Name: "restart", Backends: []string{"redis", "redlock", "postgres"}, Servers: ownServers, Violates: []string{"redlock"}, Keeps: []string{"postgres"}, Bare: true, run: runRestart,
		About: "a server is killed (SIGKILL) and started again at once while the lock is held: Redis without persistence (Redlock: one of the 3 of 5 nodes the holder reached), or PostgreSQL, whose WAL keeps the lease rows and the fence sequence (the holder then releases, and the rival takes the key with a larger fence)"},
	{Name: "restart-aof", Backends: []string{"redis"}, Servers: ownAOF, run: runRestartAOF,
		About: "the Redis server, with AOF and appendfsync always, is restarted at once while the lock is held"},
	{Name: "failover", Backends: []string{"redis", "postgres"}, Servers: ownFailover, Loses: []string{"postgres"}, run: runFailover,
		About: "a primary with one asynchronous replica: replication is held back, the primary is killed right after it granted the lock, and the replica, which never had the grant, is promoted (Redis: by three Sentinels; PostgreSQL: by pg_ctl promote, the clients given both hosts with target_session_attrs=read-write); a rival takes the lock there"},
	{Name: "leader-kill", Backends: []string{"zookeeper", "etcd"}, Servers: ownCluster, run: runLeaderKill,
		About: "in a three-member cluster, the leader is killed while the lock is held: a new leader is elected, the lock must survive it (a rival is refused) or, if it is lost, the holder must know"},
	{Name: "leader-partition", Backends: []string{"zookeeper", "etcd"}, Servers: ownCluster, run: runLeaderPartition,
		About: "in a three-member cluster, the leader stops answering anyone (SIGSTOP: cut off from its peers and its clients alike) for a few seconds while the lock is held, then comes back"},
	{Name: "minority-down", Backends: []string{"redlock"}, Servers: ownServers, run: runMinorityDown,
		About: "2 of 5 nodes are killed while the lock is held: the holder keeps it, a rival is refused until it is released"},
	{Name: "majority-down", Backends: []string{"redlock"}, Servers: ownServers, run: runMajorityDown,
		About: "3 of 5 nodes are killed while the lock is held and come back empty after the TTL and more: nobody can hold the key meanwhile, and the holder must know it lost it"},
	{Name: "restart-delayed", Backends: []string{"redlock"}, Servers: ownServers, Bare: true, run: runRestartDelayed,
		About: "one of the 3 of 5 nodes the holder reached is restarted without persistence after staying down for the lock's TTL and more (the distlock page's delayed restart)"},
	{Name: "pause-writer", Backends: serverBackends, Needs: needShared, Violates: []string{"redlock"}, run: runPauseWriter,
		About: "a read/write lock's writer is paused (SIGSTOP) past its TTL; a reader takes a read lock and reads; the writer resumes and makes the write it had decided on: its fence is below the reader's, and a resource that checks fences refuses it"},
	{Name: "pause-shared", Backends: serverBackends, Needs: needShared, Violates: []string{"redlock"}, run: runPauseShared,
		About: "a reader (shared holder) is paused (SIGSTOP) past its TTL; a writer takes the key once the reader's share expires, and writes; the reader resumes and reads: its fence is below the writer's"},
	{Name: "pause-permit", Backends: serverBackends, Needs: needPermits, Violates: []string{"redlock"}, Workers: 3, run: runPausePermit,
		About: "a semaphore of 2 permits: the first holder is paused (SIGSTOP) past its TTL while a second holds the other permit; a third takes the paused holder's permit once it expires, and writes; the paused holder resumes and writes: two newer fences hold both permits, and the resource refuses it"},
	{Name: "kill-shared", Backends: serverBackends, Needs: needShared, Bounded: true, Workers: 3, run: runKillShared,
		About: "two readers hold the key; one is killed (SIGKILL) and the other releases; a writer waits for the killed reader's share, which must come back within TTL + expiry slack"},
	{Name: "kill-permit", Backends: serverBackends, Needs: needPermits, Bounded: true, Workers: 3, run: runKillPermit,
		About: "a semaphore of 2 permits, both held; one holder is killed (SIGKILL); a third client waits for its permit, which must come back within TTL + expiry slack"},
	{Name: "pause-leader", Backends: serverBackends, Violates: []string{"redlock"}, run: runPauseLeader,
		About: "an election's leader (locker.Election) is paused (SIGSTOP) past its TTL; another campaigner is elected and writes with its term; the paused leader resumes and makes the write it had decided on, with its old term (Redlock mints no terms). Each reading of the leader must show the elected one's term, token and value"},
}

var serverBackends = []string{"redis", "redlock", "zookeeper", "etcd", "postgres"}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string {
	var s []string
	for _, sc := range Scenarios {
		s = append(s, sc.Name)
	}
	return s
}

// bareMajority, for Redlock in a Bare scenario, cuts the holder off
// from nodes 4 and 5 before it acquires, so that it holds the key on
// nodes 1 to 3 only.
func bareMajority(ctx context.Context, d *deployment, a *proc) error {
	if d.backend == "redlock" && d.bare {
		return a.cut(ctx, 3, 4)
	}
	return nil
}

// faultyNode is the node a scenario breaks: the single Redis, or
// Redlock's node 3, one of the three the holder reached.
func faultyNode(d *deployment) int {
	if d.backend == "redlock" {
		return 2
	}
	return 0
}

// holder starts the two workers, A and B, and has A take the key and
// write.
func holder(ctx context.Context, r *round, d *deployment, ttl time.Duration) (a, b *proc, err error) {
	if a, err = r.startProc(ctx, "A", r.url); err != nil {
		return nil, nil, err
	}
	if b, err = r.startProc(ctx, "B", r.url); err != nil {
		return nil, nil, err
	}
	if err = bareMajority(ctx, d, a); err != nil {
		return nil, nil, err
	}
	if _, err = r.acquire(ctx, a, ttl, r.expiry(ttl)); err != nil {
		return nil, nil, err
	}
	if _, err = r.write(ctx, a, true); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// expiry bounds a wait for a lock of ttl to expire, with room for a
// loaded machine.
func (r *round) expiry(ttl time.Duration) time.Duration {
	return 2*ttl + r.slack + 5*time.Second
}

// rival has b wait for the key after the fault at faultAt, write, and
// release; it records how long the key was unavailable.
func rival(ctx context.Context, r *round, b *proc, wait time.Duration, faultAt time.Duration) error {
	e, err := r.acquire(ctx, b, r.ttl, wait)
	if err != nil {
		return err
	}
	r.newHolder = e.At - faultAt
	_, err = r.write(ctx, b, true)
	return err
}

func runPause(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, r.ttl)
	if err != nil {
		return err
	}
	a.signal(syscall.SIGSTOP)
	at := r.mark("A paused (SIGSTOP)")
	if err := rival(ctx, r, b, r.expiry(r.ttl), at); err != nil {
		return err
	}
	a.send("write") // read when A resumes: the write it had decided on
	a.signal(syscall.SIGCONT)
	r.mark("A resumed (SIGCONT)")
	if _, err := a.await(ctx, evWrite); err != nil {
		return err
	}
	return r.release(ctx, b)
}

func runKill(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, r.ttl)
	if err != nil {
		return err
	}
	r.kill(a)
	if err := rival(ctx, r, b, r.expiry(r.ttl), r.since()); err != nil {
		return err
	}
	return r.release(ctx, b)
}

func runPartition(ctx context.Context, r *round, d *deployment) error {
	return isolate(ctx, r, d, "A cut off from every server", 0, func(a *proc) error { return a.cut(ctx) })
}

// isolate: A holds the lock; fault isolates it from the servers; B takes
// the key once it expires (waiting up to extra more than an expiry); A
// is let back and writes if it still believes it holds the lock.
func isolate(ctx context.Context, r *round, d *deployment, what string, extra time.Duration, fault func(a *proc) error) error {
	a, b, err := holder(ctx, r, d, r.ttl)
	if err != nil {
		return err
	}
	if err := fault(a); err != nil {
		return err
	}
	at := r.mark("%s", what)
	if err := rival(ctx, r, b, r.expiry(r.ttl)+extra, at); err != nil {
		return err
	}
	// Connections stalled by the fault end as a long partition's would
	// (their TCP timeouts): dropped; then A can reach the servers again.
	if err := a.cut(ctx); err != nil {
		return err
	}
	if err := a.restore(ctx); err != nil {
		return err
	}
	r.mark("A let back")
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// longTTL is the TTL of scenarios whose fault must strike while the
// holder still believes it holds: its watchdog does not refresh (and
// find out) within the moments the fault takes.
const longTTL = 30 * time.Second

func runClockFast(ctx context.Context, r *round, d *deployment) error {
	return nodeFault(ctx, r, d, func(n int) (string, error) {
		left, err := d.servers[n].expireEarly(ctx, r.key)
		return fmt.Sprintf("node %d's clock jumps ahead: the key's remaining %v cut to 1ms", n+1, left.Round(time.Millisecond)), err
	})
}

func runRestart(ctx context.Context, r *round, d *deployment) error {
	if d.backend == "postgres" {
		return runRestartKept(ctx, r, d)
	}
	return nodeFault(ctx, r, d, func(n int) (string, error) {
		return fmt.Sprintf("node %d restarted without persistence", n+1), d.servers[n].restart(ctx, 0)
	})
}

// nodeFault: A holds the lock with a TTL its watchdog does not refresh
// within the round; fault strikes the faulty node (and says what it
// did); B tries for the key at once, and writes if it gets it; A, still
// believing it holds the lock, writes.
func nodeFault(ctx context.Context, r *round, d *deployment, fault func(n int) (string, error)) error {
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	what, err := fault(faultyNode(d))
	if err != nil {
		return err
	}
	at := r.mark("%s", what)
	if err := rival(ctx, r, b, 5*time.Second, at); err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// runRestartAOF: the key survives the restart, so the rival must not get
// it while the holder holds; once the holder releases, it must.
func runRestartAOF(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	if err := d.servers[0].restart(ctx, 0); err != nil {
		return err
	}
	at := r.mark("the server restarted; its AOF was written with appendfsync always")
	_, err = r.acquire(ctx, b, r.ttl, 2*time.Second)
	if err == nil {
		r.newHolder = r.since() - at
		r.write(ctx, b, true)
	} else if !errors.Is(err, errWorker) {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, a)
}

// rivalThenHolder is the step of a fault the lock must survive, from at:
// the rival b tries for the key for up to wait (and writes if it got it,
// which the checker counts against the backend), then the holder a
// writes. It reports whether the rival holds the key.
func rivalThenHolder(ctx context.Context, r *round, a, b *proc, at, wait time.Duration) (bool, error) {
	_, err := r.acquire(ctx, b, r.ttl, wait)
	rivalHolds := err == nil
	if rivalHolds {
		r.newHolder = r.since() - at
		r.write(ctx, b, true)
	} else if !errors.Is(err, errWorker) {
		return false, err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return false, err
	}
	return rivalHolds, nil
}

// runRestartKept: the server keeps its locks across the restart (they
// are rows of a table, its WAL written at each commit), so the rival must
// not get the key while the holder holds; once the holder writes and
// releases, the rival takes the key and writes with a fence above the
// holder's, which the restarted server's sequence must give it.
func runRestartKept(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	if err := d.pg[0].restart(ctx); err != nil {
		return err
	}
	at := r.mark("the server killed (SIGKILL) and started again")
	rivalHolds, err := rivalThenHolder(ctx, r, a, b, at, 2*time.Second)
	if err != nil {
		return err
	}
	if rivalHolds {
		return r.release(ctx, b)
	}
	if _, err := a.do(ctx, 10*time.Second, "release", evReleased); err != nil {
		return err
	}
	if _, err := r.acquire(ctx, b, r.ttl, r.expiry(r.ttl)); err != nil {
		return err
	}
	if _, err := r.write(ctx, b, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// runRestartDelayed: while node 3 is down, the holder's refreshes reach 2
// of 5 nodes, so it loses the lock at its validity's end; the rival gets
// the key only after node 3 is back, and the holder must know by then.
func runRestartDelayed(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, r.ttl)
	if err != nil {
		return err
	}
	down := r.ttl + r.slack + time.Second
	at := r.mark("node 3 down; back without its data in %v", down)
	if err := b.send(fmt.Sprintf("acquire %v %v", r.ttl, r.expiry(r.ttl)+down)); err != nil {
		return err
	}
	if err := d.servers[2].restart(ctx, down); err != nil {
		return err
	}
	r.mark("node 3 back, empty")
	e, err := b.await(ctx, evGranted)
	if err != nil {
		return err
	}
	r.newHolder = e.At - at
	if _, err := r.write(ctx, b, true); err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// Kinds of hold, as the worker's acquire command takes them.
const (
	asShared  = "shared"
	asPermit2 = "limit=2" // one permit of a semaphore of 2
)

// takeAs has p take the key as kind (see asShared), waiting up to an
// expiry, and access the resource.
func takeAs(ctx context.Context, r *round, p *proc, kind string) error {
	if _, err := r.acquireAs(ctx, p, r.ttl, r.expiry(r.ttl), kind); err != nil {
		return err
	}
	_, err := r.write(ctx, p, true)
	return err
}

// rivalAs has b take the key as kind after the fault at faultAt, and
// access the resource; it records how long the key was unavailable.
func rivalAs(ctx context.Context, r *round, b *proc, kind string, faultAt time.Duration) error {
	e, err := r.acquireAs(ctx, b, r.ttl, r.expiry(r.ttl), kind)
	if err != nil {
		return err
	}
	r.newHolder = e.At - faultAt
	_, err = r.write(ctx, b, true)
	return err
}

// workers starts the named workers.
func workers(ctx context.Context, r *round, names ...string) ([]*proc, error) {
	var ps []*proc
	for _, n := range names {
		p, err := r.startProc(ctx, n, r.url)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// pauseKinds: A holds the key as aKind and accesses it; A is paused
// past its TTL; B takes the key as bKind once A's hold expired (with
// others holding as they please: before, called once A holds) and
// accesses it; A resumes and makes the access it had decided on.
func pauseKinds(ctx context.Context, r *round, aKind, bKind string, before func(a *proc) error) error {
	ps, err := workers(ctx, r, "A", "B")
	if err != nil {
		return err
	}
	a, b := ps[0], ps[1]
	if err := takeAs(ctx, r, a, aKind); err != nil {
		return err
	}
	if err := before(a); err != nil {
		return err
	}
	at := r.pause(a)
	if err := rivalAs(ctx, r, b, bKind, at); err != nil {
		return err
	}
	a.send("write") // read when A resumes: the access it had decided on
	a.signal(syscall.SIGCONT)
	r.mark("A resumed (SIGCONT)")
	if _, err := a.await(ctx, evWrite); err != nil {
		return err
	}
	return r.release(ctx, b)
}

func noOne(*proc) error { return nil }

func runPauseWriter(ctx context.Context, r *round, _ *deployment) error {
	return pauseKinds(ctx, r, "", asShared, noOne)
}

func runPauseShared(ctx context.Context, r *round, _ *deployment) error {
	return pauseKinds(ctx, r, asShared, "", noOne)
}

// runPausePermit: A is granted its permit first, C the other one, so
// that the two newer fences, C's and the rival's, are what refuses A.
func runPausePermit(ctx context.Context, r *round, _ *deployment) error {
	r.family = asPermit2
	return pauseKinds(ctx, r, asPermit2, asPermit2, func(*proc) error {
		c, err := r.startProc(ctx, "C", r.url)
		if err != nil {
			return err
		}
		return takeAs(ctx, r, c, asPermit2)
	})
}

// killKinds: A and C hold the key as kind; A is killed; C lets go where
// release says so; B takes the key as bKind, which A's expiry lets in.
func killKinds(ctx context.Context, r *round, kind, bKind string, release bool) error {
	ps, err := workers(ctx, r, "A", "C", "B")
	if err != nil {
		return err
	}
	a, c, b := ps[0], ps[1], ps[2]
	for _, p := range []*proc{a, c} {
		if err := takeAs(ctx, r, p, kind); err != nil {
			return err
		}
	}
	r.kill(a)
	at := r.since()
	if release {
		if _, err := c.do(ctx, 10*time.Second, "release", evReleased); err != nil {
			return err
		}
	}
	if err := rivalAs(ctx, r, b, bKind, at); err != nil {
		return err
	}
	return r.release(ctx, b)
}

func runKillShared(ctx context.Context, r *round, _ *deployment) error {
	return killKinds(ctx, r, asShared, "", true)
}

func runKillPermit(ctx context.Context, r *round, _ *deployment) error {
	r.family = asPermit2
	return killKinds(ctx, r, asPermit2, asPermit2, false)
}

// release has p release its lock, and then checks that the key can be
// taken again.
func (r *round) release(ctx context.Context, p *proc) error {
	if _, err := p.do(ctx, 10*time.Second, "release", evReleased); err != nil {
		return err
	}
	return r.takeAgain(ctx, p)
}

// takeAgain checks, once every fault has cleared, that p can take the
// key and release it.
func (r *round) takeAgain(ctx context.Context, p *proc) error {
	for _, q := range r.procs {
		if err := q.restore(ctx); err != nil {
			return err
		}
	}
	if _, err := r.acquireAs(ctx, p, r.ttl, r.expiry(r.ttl), r.family); err != nil {
		return fmt.Errorf("the key could not be taken again after the fault cleared: %w", err)
	}
	r.recovered = true
	_, err := p.do(ctx, 10*time.Second, "release", evReleased)
	return err
}

// blackholeDelay holds every byte of a blackholed holder for longer than
// any round lasts: a silent partition.
const blackholeDelay = time.Hour

func runBlackhole(ctx context.Context, r *round, d *deployment) error {
	return isolate(ctx, r, d, "A's traffic silently dropped both ways", 0,
		func(a *proc) error { return a.fault(ctx, "latency", blackholeDelay.String()) })
}

func runLatency(ctx context.Context, r *round, d *deployment) error {
	delay := r.ttl * 45 / 100
	return isolate(ctx, r, d, fmt.Sprintf("A's traffic delayed by %v each way", delay), 4*delay,
		func(a *proc) error { return a.fault(ctx, "latency", delay.String()) })
}

// runLostReplies: A's acquisition is applied but A never hears so; the
// library must undo it (or the TTL must end it) so that B gets the key.
func runLostReplies(ctx context.Context, r *round, d *deployment) error {
	a, err := r.startProc(ctx, "A", r.url)
	if err != nil {
		return err
	}
	b, err := r.startProc(ctx, "B", r.url)
	if err != nil {
		return err
	}
	if err := a.fault(ctx, "hold", "on"); err != nil {
		return err
	}
	r.mark("A's replies held back")
	if _, err := r.acquire(ctx, a, r.ttl, time.Second); err == nil {
		return errors.New("A was granted the lock though no reply reached it")
	} else if !errors.Is(err, errWorker) {
		return err
	}
	if err := a.cut(ctx); err != nil {
		return err
	}
	at := r.mark("A gave up; its held replies dropped with its connections")
	if err := a.restore(ctx); err != nil {
		return err
	}
	if err := rival(ctx, r, b, r.expiry(r.ttl), at); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// runMinorityDown: with 3 of 5 nodes, the holder keeps the lock and the
// rival is refused; the killed nodes come back empty once it is released.
func runMinorityDown(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	d.servers[3].kill()
	d.servers[4].kill()
	r.mark("nodes 4 and 5 killed")
	if _, err := r.acquire(ctx, b, r.ttl, 2*time.Second); !errors.Is(err, errWorker) {
		return fmt.Errorf("the rival's acquisition with 3 of 5 nodes held by A: %v, want refused", err)
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	if _, err := a.do(ctx, 10*time.Second, "release", evReleased); err != nil {
		return err
	}
	for _, n := range d.servers[3:] {
		if err := n.start(ctx); err != nil {
			return err
		}
	}
	r.mark("nodes 4 and 5 back, empty")
	return r.takeAgain(ctx, b)
}

// runMajorityDown: with 2 of 5 nodes, nobody can hold the key (the
// rival is refused: too few nodes answer); the holder's refreshes fail
// and it must know it lost the lock before the nodes come back (empty,
// after the TTL and more) and the rival takes it.
func runMajorityDown(ctx context.Context, r *round, d *deployment) error {
	a, b, err := holder(ctx, r, d, r.ttl)
	if err != nil {
		return err
	}
	for _, n := range d.servers[2:] {
		n.kill()
	}
	at := r.mark("nodes 3, 4 and 5 killed")
	if _, err := r.acquire(ctx, b, r.ttl, time.Second); !errors.Is(err, errWorker) {
		return fmt.Errorf("the rival's acquisition with 2 of 5 nodes up: %v, want refused", err)
	}
	if err := sleep(ctx, r.ttl+r.slack+time.Second); err != nil {
		return err
	}
	for _, n := range d.servers[2:] {
		if err := n.start(ctx); err != nil {
			return err
		}
	}
	r.mark("nodes 3, 4 and 5 back, empty")
	if err := rival(ctx, r, b, r.expiry(r.ttl), at); err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// leaderTTL is the lock's TTL in the leader scenarios: an election takes
// seconds, and a lock whose TTL is shorter is lost to it however well
// the backend does.
const leaderTTL = 10 * time.Second

func runLeaderKill(ctx context.Context, r *round, d *deployment) error {
	return leaderFault(ctx, r, d, "killed", func(m *member) { m.kill() }, func(m *member) error { return m.start() })
}

func runLeaderPartition(ctx context.Context, r *round, d *deployment) error {
	return leaderFault(ctx, r, d, "stopped (SIGSTOP)",
		func(m *member) { m.signal(syscall.SIGSTOP) },
		func(m *member) error {
			if err := sleep(ctx, 4*time.Second); err != nil {
				return err
			}
			m.signal(syscall.SIGCONT)
			return nil
		})
}

// leaderFault: A holds the lock; the leader suffers fault; B must be
// refused while A believes it holds; A writes; the leader recovers (heal)
// and the cluster has a leader again before A releases and the key is
// taken again.
func leaderFault(ctx context.Context, r *round, d *deployment, what string, fault func(*member), heal func(*member) error) error {
	a, b, err := holder(ctx, r, d, leaderTTL)
	if err != nil {
		return err
	}
	c := d.cluster
	l, err := c.leader(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	fault(c.members[l])
	at := r.mark("the leader (member %d) %s", l+1, what)
	rivalHolds, err := rivalThenHolder(ctx, r, a, b, at, 3*time.Second)
	if err != nil {
		return err
	}
	if err := heal(c.members[l]); err != nil {
		return err
	}
	r.mark("member %d back", l+1)
	if _, err := c.leader(ctx, 60*time.Second); err != nil {
		return err
	}
	if _, err := a.do(ctx, 10*time.Second, "release", evReleased, evError); err != nil {
		return err
	}
	if rivalHolds {
		return r.release(ctx, b)
	}
	return r.takeAgain(ctx, b)
}

// runPauseLeader: A campaigns, leads and writes with its term; B reads
// the leader (A); A is paused past its TTL; B is elected once A's
// leadership has expired, writes with its term and reads the leader
// (itself); A resumes and makes the write it had decided on, with its
// old term, which a resource that checks terms refuses.
func runPauseLeader(ctx context.Context, r *round, d *deployment) error {
	ps, err := workers(ctx, r, "A", "B")
	if err != nil {
		return err
	}
	a, b := ps[0], ps[1]
	ea, err := r.campaign(ctx, a, d)
	if err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	if err := r.checkLeader(ctx, b, a, ea); err != nil {
		return err
	}
	at := r.pause(a)
	eb, err := r.campaign(ctx, b, d)
	if err != nil {
		return err
	}
	r.newHolder = eb.At - at
	if _, err := r.write(ctx, b, true); err != nil {
		return err
	}
	if err := r.checkLeader(ctx, b, b, eb); err != nil {
		return err
	}
	a.send("write") // read when A resumes: the write it had decided on
	a.signal(syscall.SIGCONT)
	r.mark("A resumed (SIGCONT)")
	if _, err := a.await(ctx, evWrite); err != nil {
		return err
	}
	return r.release(ctx, b)
}

// campaign has p campaign for the round's election with the round's TTL,
// waiting up to an expiry, with its name as its value where the backend
// stores values.
func (r *round) campaign(ctx context.Context, p *proc, d *deployment) (event, error) {
	wait := r.expiry(r.ttl)
	cmd := fmt.Sprintf("campaign %v %v", r.ttl, wait)
	if d.values {
		cmd += " leader-" + p.name
	}
	return p.do(ctx, wait+10*time.Second, cmd, evElected)
}

// checkLeader has reader read the election's leader, which must be the
// one elected (the event of its election): its term (where the backend
// reports one), its token (where it stores tokens) and its value.
func (r *round) checkLeader(ctx context.Context, reader, leader *proc, elected event) error {
	e, err := reader.do(ctx, 10*time.Second, "leader", evLeader)
	if err != nil {
		return err
	}
	switch {
	case e.Err != "":
		return fmt.Errorf("%s read %q while %s led", reader.name, e.Err, leader.name)
	case e.Fenced && (!elected.Fenced || e.Fence != elected.Fence):
		return fmt.Errorf("%s read the leader's term as %d, but %s was elected with term %s: the backend's Inspect must report the holder's own fence",
			reader.name, e.Fence, leader.name, fenceText(elected.Fence, elected.Fenced))
	case e.Token != "" && e.Token != elected.Token:
		return fmt.Errorf("%s read the leader's token as %s, but %s was elected with token %s", reader.name, e.Token, leader.name, elected.Token)
	case e.Value != elected.Value:
		return fmt.Errorf("%s read the leader's value as %s, but %s campaigned with %s", reader.name, valueText(e.Value), leader.name, valueText(elected.Value))
	}
	return nil
}
