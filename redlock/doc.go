// Package redlock is the lock backend for N independent Redis masters: the
// Redlock algorithm of the Redis distlock page, complete, with its
// trade-offs stated here rather than discovered in production, and
// read/write locks and semaphores on the same nodes (# Shared holds and
// semaphores).
//
// # Opening
//
//	redlock://[user:password@]h1:p1,h2:p2,h3:p3,h4:p4,h5:p5[/db]
//	redlocks://...                       the same over TLS
//
// Parameters besides the shared ttl and prefix: client (goredis, the
// default, or redigo), node_timeout (default 100ms), drift_factor (0.01),
// min_drift (2ms), retry_delay (20ms), timeout (socket timeout),
// allow_eviction and allow_few_nodes. A node without a port gets 6379.
// Or pass your own clients to New (go-redis) or NewRedigo.
// The nodes must be independent masters: not replicas of each other, not
// one Cluster. Use an odd number; five tolerate two failures. Fewer than
// three is an error unless allow_few_nodes=true (Options.AllowFewNodes)
// says it is intended: with two nodes either one down stops all locking,
// and one node is a single Redis server at Redlock's cost.
//
// Open, New and NewRedigo ask every node for its maxmemory-policy (see
// Operating it), all at once, within ten node timeouts. When fewer than a
// majority answer, no lock could ever be taken, so they fail, as the
// other backends do when they cannot reach their servers, with an error
// that names each node that did not answer and why. While a majority
// answers, each node that does not is one warning through Config.Logger
// (locker.WithLogger), and the Locker goes on without it (see A node
// down).
//
// # Keys on the nodes
//
// Lock K is the string key redlock:{k:K} on every node (in the database
// the URL selects), holding the holder's token (Lock.Token) and expiring
// with the lock's TTL; nothing else is stored, as there is no fence
// counter (see No fencing tokens), unless the hold has a value (below). Releases are published on the channel
// redlock:{k:K}:released. K is used as it is, unescaped: a fixed prefix
// and a closing brace keep every key distinct, and apart from the redis
// backend's locker:{k:K}, so the two backends can share servers without
// mistaking each other's locks. (In the redis backend the braces are a
// Cluster hash tag; Redlock's nodes are not a Cluster, and the braces
// only keep the two layouts alike.) Keys are at most 1024 bytes. To look
// at a lock by hand on a node: GET and PTTL of redlock:{k:K}.
//
// A key of shared holds or of a semaphore's permits is instead a hash at
// the same name on every node, laid out as the redis backend's (see its
// package doc): its family ("shared", "permit N") under kind, and each
// holder under t:TOKEN with its expiry on the node's clock, its weight,
// and fence 0. HGETALL redlock:{k:K} shows it. So is the key of an
// exclusive hold with a value, of family "exclusive", with the value
// under v:TOKEN (see Values and observers). Grants made by a script and
// new values are published on redlock:{k:K}:changed.
//
// # The algorithm
//
//  1. Read the clock, t1. Send SET key token NX PX ttl, with one random
//     token, to every node at once, each bounded by the per-node timeout,
//     so that a dead or hung node costs that much and not the TTL. A node
//     that refuses is asked again by a script (redisconn.Take) that
//     counts our own token already there as taken, setting its TTL
//     afresh, and otherwise answers with the holder's remaining TTL: a
//     SET that outlived its node timeout can land after the round was
//     undone over another connection, and that copy must not refuse the
//     next round of its own acquisition.
//  2. The lock is taken iff a majority (N/2+1) accepted and validity =
//     TTL - (now - t1) - drift is positive, where drift = TTL x
//     drift_factor + min_drift allows for clock-rate differences and
//     Redis's expiry precision. The holder may rely on the lock for the
//     validity only: Lock.Until is t1 + validity, and Lost closes then
//     unless a refresh moved it. A refresh sent at t with TTL ttl counts
//     only if a majority extended the lock; its validity, from the moment
//     it is sent until its reply, is at most t + ttl - drift, as each node
//     sets the TTL when the command is applied there. Lost closes earlier
//     when a refresh finds no majority still holding the lock.
//  3. Otherwise the round is undone on every node that accepted or did not
//     answer (its SET may have landed); a node that answered with another
//     holder certainly did not take ours.
//  4. A waiter tries again when any node publishes a release, when the
//     holder's TTL runs out, and after a split vote (no client won a
//     majority) after a random delay in [retry_delay/2, retry_delay], so
//     that contenders fall out of step instead of splitting again. A
//     release notice wakes every waiter at once, and rounds started
//     together split the vote: a waiter woken by one first asks the
//     first node that is not skipped alone, whose SET NX lets exactly one
//     waiter through to a whole round and tells the others the new
//     holder's TTL (a waiter woken by a TTL or a poll asks every node at
//     once, in case that node kept a copy nobody holds). Each split vote
//     also widens a random delay the waiter adds after a notice, up to 8
//     retry delays, and each round another waiter won cleanly narrows it.
//     With 8 and 32 waiters on one key this took handoffs from 205 and
//     12.6 a second (11 of 32 waiters starved) to 660-770 and 235-270, none
//     starved (lockctl bench --scenario hot-key; TestWaitersGoThroughTheGate
//     counts the rounds).
//  5. Refresh runs compare-and-PEXPIRE on every node and counts only if a
//     majority extended the lock within the new validity. Release runs
//     compare-and-delete on every node; it returns ErrNotHeld when a
//     majority no longer held the lock (copies a minority still had, their
//     SET having arrived late, are deleted all the same). TTL reports how
//     long a majority still holds the lock, bounded by the local validity.
//
// The per-node timeout is for the node's answer, not for our own queue:
// each node takes at most as many requests at once as go-redis's default
// pool has connections (a window that narrows by one with each request
// that timed out and widens again with answers), and a request's timeout
// starts when it goes into the window. A burst of a thousand Acquire calls waits
// there for its turn, its rounds' validity still measured from t1 (the
// wait counts against the TTL), instead of spending the node timeout in
// the client's queue for a connection and taking the node for one that
// does not answer.
//
// With a majority of nodes down or hung, TryAcquire (and Open) fail with
// an error that names the nodes and their errors: at once when they
// refuse connections, after about two per-node timeouts when they hang
// (one for the round, one for undoing it). Acquire tries again, as long
// as its context allows: unavailability is transient (a restart, a
// partition healing, a burst of our own), and the caller's context says
// how long to wait. Between rounds that no majority answered it waits a
// random delay in [b/2, b], b starting at retry_delay and doubling up to
// a second, so that many waiters do not retry in step. When the context
// ends, the error is the context's (errors.Is finds
// context.DeadlineExceeded or context.Canceled) wrapping the last round's,
// which names each node and what it said.
//
// # A node down
//
// A node that refuses connections fails its part of a round at once: the
// clients Open builds neither retry a dial nor resend a command (go-redis
// by default dials five times 100 ms apart and sends a command up to four
// times, which made a dead node cost the whole node timeout in every
// round). Build the clients you pass to New with DialerRetries: 1 and
// MaxRetries: -1 for the same.
//
// A node that fails three requests in a row (a connection error or the
// per-node timeout; an error reply is an answer) is skipped: it is asked
// nothing and counts as a node that did not answer, and the log says so,
// naming it. One goroutine per Locker probes the skipped nodes in the
// background, first after 100ms, then twice as long each time up to 2s,
// and a node that answers is used again. When fewer than a majority of
// nodes are left unskipped (for a semaphore's permit, fewer than its
// quorum: see Shared holds and semaphores), every node is asked, so that
// skipping never costs a quorum that the nodes would have given. Errors
// name each node that failed or was skipped, with the last failure.
//
// Beneath the skipping, each node's client keeps the state of a node
// whose dial failed, as in the redis package (# Client libraries' logs):
// requests to it fail at once, without a dial, until one made after a
// back-off (100ms, doubling up to 5s) finds, by a dial of its own that
// logs nothing, that it accepts connections again. So neither the probes
// nor the rounds that ask every node make go-redis log a failed dial per
// request, and a node that comes back is used again within about 5
// seconds.
//
// Skipping is safe: a majority is always counted over all N nodes, never
// over the nodes asked, so a skipped node only withholds its vote, as a
// dead one does, in acquire, refresh, batched refresh, TTL and release
// alike. Release does not reach a lock's copy on a node skipped since the
// lock was taken: the copy expires with its TTL and, on a minority of
// nodes, blocks nobody meanwhile. Close stops the probes and waits for
// requests still running, so that the Locker dials no node after Close.
//
// A waiter subscribes to the key's release channel on every node; until a
// majority has confirmed (every node where the holder's key was, a
// majority, publishes the release, so one of ours hears it) it also polls
// every few retry delays.
//
// # Shared holds and semaphores
//
// locker.Shared, locker.Limit and locker.Weight work as on the redis
// backend, whose package doc gives the semantics: every node keeps the
// holders of a shared or permit key in a hash, with the same scripts
// (internal/redisconn's hold.lua and the rest), which drop expired
// holders, check the family and the room, and set the key's TTL to its
// latest holder's expiry; only the fence counter is left out. A round asks
// every node at once, as for the mutex, with one token, and the hold is
// taken when a quorum of nodes granted it with validity left (TTL -
// elapsed - drift, as above); otherwise it is released on every node that
// granted it or did not answer. Refresh, TTL and Release count the same
// quorum. Waiters are woken as for the mutex, and are not queued; a
// waiting writer marks the key on every node where readers hold it, after
// each busy round, so that no new reader is granted there while it waits
// (see No queue, and a waiting writer's mark, in the redis package's doc).
// The marks are a liveness aid, set and taken back best-effort: a reader
// needs a majority, so marks on a majority keep new readers out.
//
// The quorum depends on the kind. An exclusive hold and a shared one need
// a majority, N/2+1 nodes: two holds that conflict (a writer and anyone
// else) are never both granted by one node, and two majorities share a
// node, so a majority keeps them apart exactly as it keeps two mutex
// holders apart; readers do not conflict, and every node admits them all.
// A semaphore of k permits needs more. Each node admits at most k permits,
// so k + 1 holders on q nodes each need (k + 1) q permits of the k N that
// the nodes have; with a majority they fit whenever (k + 1) q <= k N. With
// k = 2 and N = 5, three holders on three nodes each take 9 of the 10
// permits, for instance on nodes {0,1,2}, {2,3,4} and {0,1,3}, where no
// node has more than two: three clients, each of which reaches only its
// three nodes, would all hold one of the 2 permits. A permit hold
// therefore needs
//
//	Q = floor(k N / (k + 1)) + 1
//
// nodes, the least q with (k + 1) q > k N: holders of more than k permits
// in all would need more permits than the nodes have (with weights alike:
// holds of total weight w need w q permits). For k = 1, Q is the majority.
// TestPermitQuorum shows both: with 5 nodes and 2 permits, the three
// clients above are each refused (4 nodes needed), and with four nodes
// each, two are admitted and the third is refused.
//
//	permits k   Q, N = 3   Q, N = 5   Q, N = 7
//	1               2          3          4
//	2               3          4          5
//	3               3          4          6
//	4 or 5          3          5          6
//	6 or more       3          5          7
//
// The price is availability. A permit hold is taken, refreshed and kept
// only while Q nodes answer, so N - Q nodes may be down, where the mutex
// and read/write locks tolerate N - (N/2+1). With 5 nodes: two down for
// the mutex, read/write locks and k = 1; one for k = 2 (Q = 4) or 3; none
// for k >= 4, where every node must answer. A semaphore of many permits on
// Redlock stops when one node does.
//
// A request is refused as a mismatch (locker.ErrKindMismatch) when a
// majority of nodes answer that the key's holders are of another family:
// a hold is on a majority at least, so then they are. A copy of another
// family on a minority of nodes (left by a release that did not reach
// them) does not stop the request on the others, and is not touched; it
// expires with its TTL. There are no fences, for shared holds and permits
// as for the mutex (below).
//
// # Values and observers
//
// A hold may carry a value of up to 64 KiB (locker.WithValue,
// Lock.SetValue), kept on every node that holds it as the redis backend
// keeps it on its one server (see Values and observers in its package
// doc): an exclusive hold without a value is the SET NX PX string key of
// the round above, at the same cost as before values existed; one with a
// value is a hash of family "exclusive" on each node, taken by the hold
// script in the round instead of SET NX PX, which costs each node a
// script of some 20 µs where a SET costs 1 to 2. Clients of one key with
// and without values exclude each other as one mutex's clients do: each
// node answers busy, and a semaphore's permit is a mismatch.
//
// SetValue runs, on every node at once, the script that replaces the
// value only where the node still holds our token, and succeeds when as
// many nodes as hold the lock (its quorum) replaced it; ErrNotHeld when
// too many said the hold is not theirs for a quorum to be left. Each
// SetValue of a hold sends the next version of its value (the value it
// was taken with is version 1), and a node never takes an older version
// than it has, so the nodes agree again after calls that overlapped or
// failed part way. Inspect reports, for each holder, the value of the
// latest version among the nodes that hold its token: a SetValue that
// succeeded reached a quorum of them and Inspect hears from a majority,
// so it reports that value or a later one. The rule "the value a majority
// agrees on" was rejected: while a SetValue is under way, or after one
// that reached too few nodes, the nodes may agree on no value (two
// against two with a node down), and an observer would report a value
// nobody set.
//
// There is no term: Inspect reports no fence (see No fencing tokens), and
// an Election's Leader has Termed false, told apart from the one before
// by its token and value only.
//
// The driver is a backend.Observer. Observe subscribes to the key's
// release and change channels on every node at once, and returns once a
// majority of nodes confirmed both; the nodes that confirm later are
// watched too, and one that cannot be reached is not. Each node publishes
// what it applies: a release, a release by force, a grant by the hold
// script (every hold with a value, shared holds, permits), a SetValue. A
// holder's change is applied on a majority at least, so one of the nodes
// watched hears it. The observer then inspects, and sees the new holder
// once as many nodes hold it as its kind needs: each node's grant
// publishes after the node applied it, so the last notice of a round
// comes after a majority holds the lock. Nothing is published for a
// mutex's grant by SET NX PX without a value, nor for an expiry (Redis
// publishes none): such a holder is seen at the key's next notice, and a
// crashed one is seen gone when its TTL, as the observer last read it,
// runs out. An Election that campaigns with a value is announced by its
// grant; one that campaigns without a value takes the name by SET NX PX,
// and is seen at the key's next notice (the leader's Proclaim or Resign,
// another client's grant).
//
// # No fencing tokens
//
// Fence returns ok=false and Capabilities().Fencing is false. A fencing
// token must increase strictly across holders even when nodes fail, and
// that needs agreement on a counter: consensus, which Redlock does not
// have. A counter incremented on a majority of nodes can repeat a value
// once a node restarts without its data or a partition heals, and a token
// that looks safe but is not is worse than none. This is the core of
// Martin Kleppmann's critique ("How to do distributed locking"): a client
// paused for longer than the validity (GC, page fault, a stopped VM) or a
// node whose clock jumps can leave two clients believing they hold the
// lock, and without a fencing token the protected resource cannot tell
// them apart. antirez's reply is that Redlock is safe under its timing
// assumptions and that the resource can use the unique token for
// compare-and-set instead. Both are right about their assumptions: use
// Redlock for efficiency (avoiding duplicate work) or where the protected
// resource checks Token() itself; where a second holder would corrupt
// data, use a backend that mints fences (zookeeper, etcd, postgres, or the
// redis backend, whose fences rest on one server's counter and clock).
//
// # Operating it
//
// From the distlock page, and they matter:
//
//   - Persistence: a node that restarts without the keys it had lets a
//     second client win a majority while the first still holds the lock.
//     Either run with appendonly yes and appendfsync always (slow), or
//     keep a crashed node out for at least the longest TTL in use (delayed
//     restart) so that every lock it knew has expired elsewhere too.
//   - Clocks: safety assumes that clocks on clients and servers advance at
//     about the same rate, within drift_factor. A server clock that jumps
//     forward (an administrator, an NTP step) expires keys early; run NTP
//     slewing, not stepping, on the nodes.
//   - Memory: like the redis package, Open reads maxmemory-policy on
//     every node and refuses the nodes whose policy can evict lock keys,
//     naming each, unless allow_eviction=true.
//   - Timeouts: keep node_timeout well below the TTL; a round that takes
//     longer than TTL - drift never succeeds.
//   - A node down is skipped (see above): with one of five refusing
//     connections, an uncontended Acquire+Release is no slower than with
//     all five up (BenchmarkDeadNode).
//
// # Cost
//
// A round fans out to all nodes at once, so on a network its latency is
// about one round trip to the slowest node of a majority: with 1 ms of
// added round-trip time, five nodes measured about 1.2x one Redis server
// (BenchmarkUncontended/rtt=1ms). On one machine with fewer cores than
// nodes the servers queue for the CPU instead, and the raw parallel
// fan-out of SET NX PX and compare-and-delete to five local servers is
// itself several times the single-server round trip (raw-fanout-5 against
// raw-single in BenchmarkUncontended). Against that raw fan-out to five
// local servers, taking turns with it in one run, an uncontended
// Acquire+Release measured a p50 of 1.03x to 1.05x (for example 368
// against 352 microseconds) and 0.95x to 0.97x its throughput, in
// go test -run '^$' -bench FanOut -benchtime 3000x -count 3:
// about 1 to 2.5 points of it is the per-node timeout the algorithm
// needs (the "timeouts" design: the raw fan-out bounded by node_timeout).
// Each node's part of a request runs on a worker goroutine that outlives
// it (at most four per node wait for the next request, for up to 5 s).
// With a goroutine started per node and request, as the raw fan-out
// does, the stack of each grew into the client library on every round:
// that copying took about a fifth of the client's CPU, and the p50 was
// 1.11x to 1.17x. The release notice costs nothing measurable. Two
// clients handing one key back and forth made 1,330 to 2,080 handoffs a
// second, p50 0.45 to 0.70 ms (-bench 'Handoff/waiters=2'), depending on
// the load on the machine.
package redlock
