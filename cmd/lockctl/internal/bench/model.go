// Package bench is lockctl bench: it measures lock designs (the locker
// library's backends, the raw server primitives they are built on, and
// the peer libraries users would otherwise pick) in scenarios that take
// turns on one machine, and election designs (the library's Election,
// etcd's concurrency.Election, an election on zk.Lock) in the failover
// scenario, and reports the figures as a Report that renders to a
// terminal table, JSON, Markdown and a self-contained HTML page.
package bench

import "time"

// Report is everything one bench run measured, and what it ran on. It is
// what --json writes and what the other formats render.
type Report struct {
	Tool     string    `json:"tool"`    // "lockctl bench"
	Build    string    `json:"build"`   // lockctl's, the library's and Go's versions (buildinfo)
	Command  string    `json:"command"` // the command line, passwords redacted
	Started  time.Time `json:"started"`
	Elapsed  Duration  `json:"elapsed"`
	Machine  Machine   `json:"machine"`
	Settings Settings  `json:"settings"`
	// Backends are the deployments measured, one per --url, with what
	// their servers say of themselves.
	Backends []Backend `json:"backends"`
	// Results are the figures, one per scenario, design and parameter
	// set, in the order they were measured.
	Results []Result `json:"results"`
	// Targets are the project's targets, each judged met or missed from
	// Results, with why when missed.
	Targets []Target `json:"targets"`
	// Connections is the most connections the run had open at once to
	// each server (on Linux: the kernel's count, sampled at the end of
	// each step, before its clients close).
	Connections []ServerConns `json:"connections,omitempty"`
	// Notes are what the run wants the reader to know: a design that
	// could not run, a scenario skipped for a backend, and why.
	Notes []string `json:"notes,omitempty"`
}

// Duration is a time.Duration; in JSON, a whole number of nanoseconds.
type Duration = time.Duration

// Machine is the machine the run measured on.
type Machine struct {
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	Hostname  string `json:"hostname,omitempty"`
}

// Settings are the run's parameters.
type Settings struct {
	Scenarios []string `json:"scenarios"`
	Duration  Duration `json:"duration"` // per design and parameter set
	Clients   []int    `json:"clients"`  // swept in throughput
	Waiters   []int    `json:"waiters"`  // swept in hot-key
	RTT       Duration `json:"rtt"`      // added round-trip time, 0 for none
	HeldLocks int      `json:"held_locks"`
	HeldTTL   Duration `json:"held_ttl"` // TTL of the held locks, held for two of it
	// RecoveryRounds is how many holders the recovery scenario kills
	// per deployment.
	RecoveryRounds int `json:"recovery_rounds"`
	// FailoverRounds is how many leaders the failover scenario kills per
	// deployment and election design (0: 3).
	FailoverRounds int `json:"failover_rounds,omitempty"`
	// Readers is how many clients stream read locks in the read-write
	// scenario (0: DefaultReaders), and WriteEvery how long its writer
	// pauses between write locks (0: DefaultWriteEvery).
	Readers    int      `json:"readers,omitempty"`
	WriteEvery Duration `json:"write_every,omitempty"`
	// Permits is the semaphore's limit in the semaphore scenario (0:
	// DefaultPermits); twice as many clients contend for them.
	Permits int `json:"permits,omitempty"`
}

// Backend is one deployment named by a --url.
type Backend struct {
	Name    string `json:"name"`    // the backend: redis, redlock, zookeeper, etcd, postgres, memory
	URL     string `json:"url"`     // redacted
	Servers string `json:"servers"` // what the servers report of their version, where known
	// Capabilities as the Locker reports them.
	Fencing       bool     `json:"fencing"`
	FIFO          bool     `json:"fifo"`
	WakeOnRelease bool     `json:"wake_on_release"`
	ExpirySlack   Duration `json:"expiry_slack"`
	MinTTL        Duration `json:"min_ttl,omitempty"` // the shortest TTL the backend takes
	// Shared and Permits: the backend admits shared holds (read locks)
	// and semaphores; the read-write and semaphore scenarios run the
	// Locker only where it does.
	Shared  bool `json:"shared,omitempty"`
	Permits bool `json:"permits,omitempty"`
	// Clients is the most clients the run opened at once on the
	// deployment, each with connections of its own (ZooKeeper: one
	// session, one connection to one server).
	Clients int `json:"clients,omitempty"`
}

// Kinds of design.
const (
	KindLocker = "locker" // this library
	KindRaw    = "raw"    // the server primitives alone, no library
	KindPeer   = "peer"   // another library
)

// Result is one design measured in one scenario with one set of
// parameters.
type Result struct {
	Scenario string `json:"scenario"`
	Backend  string `json:"backend"`
	Design   string `json:"design"` // e.g. "locker", "raw", "redsync", "concurrency.Mutex"
	Kind     string `json:"kind"`   // KindLocker, KindRaw or KindPeer
	// Params are the scenario's parameters for this result: clients,
	// keys, waiters, nodes, locks.
	Params map[string]int `json:"params,omitempty"`
	RTT    Duration       `json:"rtt"`

	Ops      int64     `json:"ops"`    // operations completed
	Errors   int64     `json:"errors"` // operations that failed
	Elapsed  Duration  `json:"elapsed"`
	PerSec   float64   `json:"per_sec"` // ops (or handoffs) per second
	Unit     string    `json:"unit"`    // what PerSec counts: "ops" or "handoffs"
	Latency  Latency   `json:"latency"` // of one operation, or of a handoff
	Fairness *Fairness `json:"fairness,omitempty"`
	Recovery *Recovery `json:"recovery,omitempty"`
	Failover *Failover `json:"failover,omitempty"`
	Memory   *Memory   `json:"memory,omitempty"`
	// ReadWrite and Semaphore are the figures only the read-write and
	// semaphore scenarios measure.
	ReadWrite *ReadWrite `json:"read_write,omitempty"`
	Semaphore *Semaphore `json:"semaphore,omitempty"`
	// FirstError is the first error an operation returned, if any.
	FirstError string `json:"first_error,omitempty"`
}

// Latency is a latency distribution from an HDR histogram.
type Latency struct {
	Count int64    `json:"count"`
	Mean  Duration `json:"mean"`
	P50   Duration `json:"p50"`
	P90   Duration `json:"p90"`
	P99   Duration `json:"p99"`
	P999  Duration `json:"p999"`
	Max   Duration `json:"max"`
	// Percentiles is the distribution for charts: the latency at each
	// percentile of a fixed ladder (see Ladder).
	Percentiles []Point `json:"percentiles,omitempty"`
}

// Point is the latency at a percentile.
type Point struct {
	Percentile float64  `json:"percentile"`
	Value      Duration `json:"value"`
}

// Fairness says how evenly a hot key went round its waiters.
type Fairness struct {
	MaxMin      float64  `json:"max_min"`      // most acquisitions by one waiter over the fewest (1 is fair; -1 when one starved)
	Starved     int      `json:"starved"`      // waiters that never got the lock
	LongestWait Duration `json:"longest_wait"` // the longest a waiter waited for one acquisition
}

// Recovery is how long a waiter took to get a lock whose holder was
// killed (SIGKILL) while it waited.
type Recovery struct {
	TTL         Duration `json:"ttl"`
	ExpirySlack Duration `json:"expiry_slack"`
	Bound       Duration `json:"bound"` // TTL + ExpirySlack + one round trip
	Rounds      int      `json:"rounds"`
	Within      int      `json:"within"` // rounds that recovered within Bound
}

// Failover is what the failover scenario measured of an election design:
// the Result's Latency is the time from the leader's SIGKILL until
// another campaigner led (its p50, p90 and max are the figures), over
// Rounds leaders killed.
type Failover struct {
	// TTL is every design's: the Locker's TTL, the lease of etcd's
	// Session (whole seconds), the ZooKeeper session's timeout.
	TTL Duration `json:"ttl"`
	// ExpirySlack is the backend's, as its Locker reports it: how late
	// its servers may end an expired lease, session or key.
	ExpirySlack Duration `json:"expiry_slack"`
	Campaigners int      `json:"campaigners"` // contending in every round
	Rounds      int      `json:"rounds"`      // leaders killed whose successor was seen
}

// ReadWrite is what a writer went through on a key that a stream of
// readers holds: the read-write scenario. The Result's rate is the
// readers' (read locks granted per second) and its Latency their wait
// for one; these are the writer's.
type ReadWrite struct {
	Readers    int      `json:"readers"`
	WriteEvery Duration `json:"write_every"` // the writer's pause between write locks
	// Writes is how many write locks the writer got, and Wait its wait
	// for each.
	Writes int64   `json:"writes"`
	Wait   Latency `json:"wait"`
	// LongestWait is the longest the writer waited for one write lock,
	// counting a wait that a step's end cut short (Starved) up to then.
	LongestWait Duration `json:"longest_wait"`
	// Starved counts the writes still waiting when a step ended: where
	// the backend keeps no queue, readers that keep overlapping hold a
	// writer off for as long as they do.
	Starved int `json:"starved"`
}

// Semaphore is the semaphore scenario's own figures: the Result's rate
// is permits granted per second, its Latency a client's wait for one.
type Semaphore struct {
	Permits int `json:"permits"`
	Clients int `json:"clients"`
	// MostHeld is the most permits the clients held at once, as they
	// saw their grants and releases: more than Permits is a violation
	// of the semaphore, and an error of the result.
	MostHeld int `json:"most_held"`
}

// Memory is what holding many locks at once costs the client.
type Memory struct {
	Locks         int      `json:"locks"`
	TTL           Duration `json:"ttl"`
	Held          Duration `json:"held"`       // how long they were all held, refreshed by the watchdog
	Lost          int      `json:"lost"`       // locks whose Lost closed while held
	HeapBytes     uint64   `json:"heap_bytes"` // live heap growth while holding them
	BytesPerLock  float64  `json:"bytes_per_lock"`
	Goroutines    int      `json:"goroutines"`      // goroutine growth while holding them
	AcquireSecond float64  `json:"acquire_per_sec"` // how fast they were taken
}

// Target is one of the project's targets, judged from the results.
type Target struct {
	Name    string `json:"name"`
	Backend string `json:"backend"`
	Want    string `json:"want"`
	Got     string `json:"got"`
	Met     bool   `json:"met"`
	// Measured is false when the results to judge it were not taken
	// (the scenario or the design did not run): then Met means nothing.
	Measured bool   `json:"measured"`
	Why      string `json:"why,omitempty"`
}
