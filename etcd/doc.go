// Package etcd is the lock backend for an etcd cluster: a queue of keys
// ordered by create revision, each attached to a lease, where a waiter
// watches only the key whose departure it needs (for a mutex, the one just
// before its own). Mutexes, read/write locks and semaphores share the
// queue and one admission rule (see Shared holds and semaphores).
//
// # Opening
//
// Import the package for its side effect and open by URL, or pass your own
// client (go.etcd.io/etcd/client/v3) to New:
//
//	etcd://[user:password@]host:port[,host:port...][/namespace]
//	etcds://...?cacert=ca.pem&cert=client.pem&key=client-key.pem
//
// The path is the namespace, the etcd key prefix of every lock queue
// (default "locker"); a host without a port gets 2379. Parameters besides
// the shared ttl and prefix:
// dial_timeout (default 5s), and for etcds:// cacert (the CA that signed
// the servers' certificates; default: the system's), cert and key (a
// client certificate, for servers run with --client-cert-auth). A user
// and password in the URL authenticate the client (etcd's auth must be
// enabled, and the user's role must allow reading and writing the
// namespace). A Locker closes only clients it opened from a URL.
//
// A client whose KV was replaced, for example by clientv3/namespace, keeps
// the Locker's keys inside that namespace; set its Watcher and Lease too,
// since the Locker watches its keys and keeps them on leases.
//
// # How a lock works
//
// Lock K lives under <namespace>/<K escaped>/, where '%' and '/' in K are
// escaped as %25 and %2F: the escaped name has no '/', so the queue of
// "a" never contains the entries of "a/b" (etcd's own concurrency.Mutex
// lets them interfere, one prefix containing the other). Each acquisition
// puts one entry, named after the Locker's lease; for an exclusive hold (a
// mutex, a writer; for the other kinds see Shared holds and semaphores):
//
//   - If the queue is empty, the entry is put and the lock is ours: one
//     round trip, costing the server what a bare put-if-absent does. The
//     transaction carries nothing for the busy case: even in the branch
//     not taken, a second put made an uncontended Acquire+Release about 1%
//     slower, and reads about 4%.
//   - Otherwise a second put joins the queue, and the waiter reads the
//     entry just before its own (a read, which needs no raft round). It
//     watches that predecessor alone for deletion (no herd: a release
//     wakes one waiter), then reads again, since the predecessor may have
//     left without holding. TryAcquire puts nothing when the queue is
//     busy.
//
// The holder is the entry with the lowest create revision. Release and
// Refresh are transactions conditioned on our entry's create revision,
// never a bare delete: a release retried after its first reply was lost
// cannot delete a newer holder's entry (etcd issue 22082), even one under
// the same name. An acquire whose reply is lost (its request may have been
// applied) deletes its entry, if it is on our lease, before it reports the
// failure; a waiter whose context ends deletes its entry before Acquire
// returns. If such a cleanup cannot reach etcd, it is retried in the
// background, and the entry never outlives its lease.
//
// A cleanup that finds nothing after a lost reply settles nothing: etcd
// serves the put and the cleanup as separate requests, concurrently, and
// may apply the put after the cleanup looked, leaving an entry on a lease
// that is kept alive for the Locker's other locks. So the entry's name
// stays reserved and the lease looks for it again, first after a second,
// then at growing intervals up to a third of the TTL, until it finds and
// deletes it or the lease ends: a put applied late blocks the lock for
// at most max(1s, TTL/3) more. These looks, and the retries of failed
// cleanups, are made by one goroutine per lease while it has any, all due
// entries in one transaction; a lease that gathers 64 of them is taken out
// of use for new acquisitions, which get a new lease, and is revoked once
// its locks are gone.
//
// Entry names are reused: <lease id in hex>, with -N added while several
// acquisitions of one Locker with the same claim queue for the same lock,
// then the claim of a shared or permit hold (see below). etcd keeps every
// deleted key in its index until the next compaction, and a read of a
// queue walks them all, so a name per acquisition would make a busy lock
// slower the longer it is used on a cluster that does not compact
// automatically (etcd's default). A name is reused only once its
// entry is known to be deleted.
//
// # Shared holds and semaphores
//
// A shared hold (locker.Shared) and a permit hold (locker.Limit,
// locker.Weight) queue like a mutex's, one entry each, and the name of
// the entry carries its claim, so that one keys-only read of the queue
// tells every claim in it:
//
//	<lease id in hex>[-N]                    exclusive: the name every entry had before kinds
//	<lease id in hex>[-N].shared             shared
//	<lease id in hex>[-N].permit-<w>-of-<n>  w of a semaphore's n permits
//
// An exclusive entry is named as before, so a Locker of an older version
// reads a queue as it always did: it takes every entry for an exclusive
// one, which makes it wait for readers too, never admit itself beside
// them. A name without a claim this package writes counts as exclusive.
// The claim is in the name, not the value, so that moving the entry to
// another lease (Refresh with another TTL) puts it again without having
// to carry anything.
//
// The rule is backend.Admit over the entries in create-revision order:
// an entry is admitted when the units of every entry before it and its
// own fit the key (an exclusive entry takes all of them, a shared one one
// unit, a permit its weight of the limit). So holds are granted strictly
// in queue order: a waiter that does not fit (a writer behind readers, a
// request for 2 permits while 1 is free) blocks every later one, and a
// reader queued behind a waiting writer waits for that writer. An entry
// whose claim disagrees with one before it (another limit, a read/write
// request on a semaphore, or the reverse; an exclusive request judges by
// the entry just before its own, its TryAcquire by the first) removes
// itself, and its Acquire or TryAcquire fails with a *backend.Mismatch
// (locker.ErrKindMismatch).
// Its entry stays in the queue for the round trip this takes, and a
// request that agrees with the holders may meanwhile be refused because
// of it: either way, clients of one key that disagree are told so.
//
// A shared or permit request puts its entry and reads the queue in one
// transaction (an exclusive request keeps the mutex's path, above): when
// it fits, that one round trip grants it. Otherwise it waits for the one
// entry ahead whose departure it needs (Admission.Wait), by a watch on
// that key, deletes only, and reads the entries before its own again when
// it goes:
//
//   - exclusive: the entry just before its own (any entry ahead blocks it,
//     so it reads only that one, as the mutex does);
//   - shared: the nearest exclusive entry ahead;
//   - permit: the nearest entry ahead whose weight and its own exceed the
//     limit.
//
// When no single entry keeps a permit request out (the permits are taken
// by several holders), it watches every entry ahead, with one watch over
// the range of their keys, deletes only, and reads the queue again when
// any of them goes. Entries are never added ahead of an existing one (a
// later put has a later create revision), so what a waiter read can only
// shrink: an entry of any kind created after ours, even between our put
// and our read, has no say in our admission. A waiter that gives up
// deletes its entry before Acquire returns; the waiters behind it that
// watched it read the queue again, so a cancelled writer does not leave
// the readers behind it blocked. TryAcquire of a shared or permit hold
// reads the queue when it is not empty, and puts its entry only if it
// would be admitted at the end of it, on the condition that no entry
// joined since the read (it reads again when one did, up to 4 times); a
// request that would wait, or disagrees, puts nothing.
//
// The lifecycle of a held lock (its lease, the keepalives, Refresh and its
// batching, the watch of held entries, the expiry of an unrefreshed lock)
// does not depend on its kind. A crashed shared or permit holder's entry
// goes with its lease, within the TTL and ExpirySlack, as a mutex's does,
// and the waiters watching it read the queue again.
//
// Compared with etcd's experimental recipe.RWMutex
// (client/v3/experimental/recipes), which also orders keys by revision: a
// reader there waits for the last writer before it, and a writer for the
// last key before it, as here; but its keys are named after the time
// (etcd's index grows with every acquisition until a compaction), its
// calls take no context (a waiter cannot give up, nor time out), it
// watches from the revision it read (etcd's 100 ms catch-up loop: see
// Waiting), and it has no TryLock, no fences and no semaphore; a holder
// learns that its lock is gone only from its session's Done channel, if
// it watches that. BenchmarkShared measures both: see Performance.
//
// # Waiting
//
// A waiter's watch starts at the server's current revision, not at the
// revision it read the queue at. etcd serves a watch from an older
// revision through a catch-up loop that runs every 100 ms, which is why
// concurrency.Mutex hands a contended lock over in steps of up to 100 ms
// (measured: p99 about 80-90 ms with 8 waiters). A deletion between the
// read and the start of the watch is found by reading the watched entries
// (the predecessor, or the entries ahead) once the watch is in place,
// which is needed only when the store moved on in between: the watch
// covers every deletion from the read on, as one started at the read's
// revision would, without the catch-up loop. Waiters get the lock in the
// order they queued (Capabilities().FIFO), unless one's lease lapses and
// it queues again.
//
// # Leases and TTLs
//
// etcd counts lease TTLs in whole seconds, so a TTL is rounded up to the
// next second, and Lock.TTL and the local validity use the TTL in force.
// The server raises a TTL below its minimum (one and a half election
// timeouts: 2 seconds by default); New learns that minimum by asking for a
// one-second lease, and makes it Capabilities().MinTTL, so shorter TTLs
// fail with ErrInvalidTTL instead of being silently lengthened.
//
// All locks and waiters of one Locker with the same TTL share one lease,
// granted when first needed, kept alive by one goroutine (a keepalive a
// sixth of the TTL after the last answered one was sent), and revoked
// after a minute unused or when the Locker closes. Acquiring therefore
// costs no LeaseGrant round trip. The lease is what frees the locks of a
// process that dies or is cut off: they go when it expires on the server,
// within the TTL of the last keepalive plus the half second etcd's leader
// takes to notice (ExpirySlack is 1s). A lock that is not refreshed
// (WithAutoRefresh(false)) still expires while its process lives: the
// lease is kept alive for the others, so the Locker deletes the lock's
// entry itself when its validity runs out, and likewise after a Release
// that failed in transit and was not retried. Refresh with another TTL
// moves the entry to that TTL's lease; a put on an existing key keeps its
// create revision, so the fence and the queue position stay. The put does
// not keep that lease alive, which may be nearer its end than the new TTL:
// from the moment the put is sent, the lock counts the target lease among
// those it may be on, so that the lease's lapse closes Lost even while the
// put's reply is awaited or was lost.
//
// # What Lost promises
//
// A lease's confirmed validity is the sending of the last keepalive the
// server answered (or of the grant) plus the TTL it granted: the server
// cannot expire the lease before then (a leader change only extends
// leases). A lock lives on the server no longer than its lease, and its
// local validity (Lock.Until) never runs past the lease's confirmed
// validity less the drift allowance (1% of the TTL plus 2 ms): package
// locker caps it there after the acquisition and after every refresh
// (backend.Bounded). A refresh with the same TTL renews no lease (the
// lease loop does), so it does not extend the lock past that bound either.
// While keepalives succeed, a sixth of the TTL apart, a lock's validity
// therefore ends between five sixths of its TTL and its TTL (less the
// drift) after its acquisition or last refresh; an unrefreshed lock is
// deleted then. Lock.TTL reports the smaller of the lock's validity and
// the lease's confirmed validity.
//
// Lost closes at the lock's validity at the latest. It closes earlier
// when the lock is released; when its entry is deleted by someone else
// (an operator, a tool, a revoke of our lease), or put again under
// another create revision or on a lease the entry is not on (our lease no
// longer bounds it): the Locker's watch reports that as soon as etcd
// delivers the change (for a lock held less than 100 ms, when the watch
// starts; see below), and a Refresh or a Lock.TTL, each of which reads
// the entry, finds it too; when the server says the lease is gone (at the
// next keepalive);
// and when the lease lapses:
// its confirmed validity, less the drift allowance, passes without a
// newer keepalive answered. The lapse has a timer of its own, which
// neither a keepalive in flight nor any cleanup holds up. So a
// holder cut off from the cluster (a partition, the members it talks to
// gone) sees Lost before the server can expire its lease, and so before
// anyone else can acquire its lock, as long as the clocks run at about
// the same rate. The server frees the lock when the lease really ends
// (the last keepalive it received plus the TTL), or up to ExpirySlack
// later. After a lapse the Locker revokes the lease if it can still reach
// etcd, and later locks with that TTL get a new lease; Release of a lock
// lost with its lease returns ErrNotHeld without a request. A request
// that cannot reach etcd waits for it no longer than the lease it is made
// for lives. Where the Locker deletes a lost lock's entry itself (one on
// a lease it is not on, or left on another lease of ours by a move when
// the lease it was on ends), Lost closes before the delete is sent: the
// delete frees the key, and no waiter may be granted it while the old
// holder's Lost is still open.
//
// The watch is one per Locker, on its whole namespace, from the moment
// one of its locks has been held for 100 ms until a minute after its last
// lock, and it follows every change from a known revision on. Most locks
// are released sooner, and for them a watch would only cost each put and
// delete an event (see Performance); a deletion by someone else in a
// lock's first 100 ms is found by the reads the watch starts with, or by
// Release (ErrNotHeld). Before it starts, and again after any gap (its
// stream ended: no leader, a compaction of the revisions it would resume
// from, a connection that could not be resumed), the Locker reads every
// held entry and starts the watch just after the earliest revision those
// reads saw, so a change made during the gap is found by the reads or
// reported by the watch. A lock taken while the watch starts, or whose
// entry changed before the Locker knew of the lock, has its entry read
// once. The watch tells of a change a moment after it is applied (the
// time etcd takes to deliver it; during a gap, until the reads are done),
// and Lost is closed then: there is no bound on that delay but the lock's
// validity, which the lease alone bounds. A deletion by someone else is an
// operator's error, which no lease can prevent; fencing tokens cover the
// holder that acts in that moment.
//
// # Holding many locks
//
// Keeping N locks alive costs per lease (one per TTL in whole seconds in
// use), whatever N, one keepalive every sixth of its TTL, and nothing per
// lock: a refresh by the watchdog that keeps a lock's TTL renews nothing,
// since the lease is kept alive already, and reads nothing, since the
// watch reports a changed entry; it only records that the lease still
// lives. So with one TTL, N locks cost the server 6/TTL requests per
// second: 2 per second at a 3 s TTL, 0.2 at 30 s, for 100,000 locks as for
// one. (Measured with internal/heldtest's BenchmarkHeld, 100,000 locks at
// a 3 s TTL: about 4 server requests per second while held, the gRPC
// stream messages of the keepalives included; before the watch, when each
// refresh read its lock's entry in transactions of 128 reads, the server
// received about 800 such transactions per second, could not keep up on
// two cores, and 20-80% of the locks ran out of validity.)
//
// A lock the watchdog refreshes alone (the only one due within a
// thirtieth of the TTL; so at most about ten per refresh period, whatever
// N) is refreshed through Refresh, which reads its entry: one
// linearizable read. A lock refreshed with another TTL moves to that TTL's
// lease with a transaction of its own, as Refresh does; one whose lease
// was given up is told ErrNotHeld without a request.
//
// The watch costs the server a stream and an event per change in the
// namespace, every Locker's changes included (two per acquisition and
// release), and nothing per held lock. Covering a gap in it costs a read
// of every held entry, in linearizable transactions of up to 128 reads
// (etcd's default --max-txn-ops; on a server set lower, the first refusal
// teaches the Locker its limit), served without a raft round: N/128
// transactions, once per gap, not per period. The locks taken while the
// watch starts, or whose entries changed before the Locker knew of them
// (an acquisition whose reply came after the watch had passed a later
// change in the namespace), are read the same way, together, as they
// come.
//
// The Locker's goroutines do not grow with N: one per lease, one more
// while its keepalive is in flight and one while it has entries to clean
// up, one for the watch (and the client's own for its watch stream), and
// at most 16 helping the batched requests in flight, all together.
//
// # Fencing tokens
//
// The fence is the create revision of the holder's entry: etcd's revision
// is global to the cluster and only grows, so every later holder of any
// lock gets a larger one. Pass it to the resource you protect and have the
// resource reject one smaller than it has seen.
//
// Holds are admitted in queue order, which is create-revision order, so
// fences increase in the order of the grants, across kinds: a writer's
// fence exceeds that of every reader or writer granted before it, and a
// reader's that of every writer before it. Readers that hold together
// reach a resource in any order, so a resource used by shared holders
// checks a reader's fence against the largest fence of a writer it has
// seen (a reader with a smaller one started before that write and is
// refused), not against other readers'. A semaphore's permit holders,
// which may act together by design, are ordered by their fences alone.
//
// # Values and elections
//
// A hold's value (locker.WithValue, Lock.SetValue) is the value of its
// queue entry: the acquisition puts the entry with it, whatever the kind
// of hold, in the transaction that queues it. Values are up to 64 KiB
// (Capabilities().MaxValueLen, as on the memory backend): etcd refuses a
// request larger than its --max-request-bytes, 1.5 MiB by default, and
// keeps every value in memory and in each member's log, so values are for
// small things (an address, a host name), not payloads.
//
// SetValue is one transaction: it puts the new value on the entry if the
// entry's create revision is still ours, keeping the lease the entry is
// on (WithIgnoreLease), so the fence, the TTL and the place in the queue
// stay; a failed comparison is ErrNotHeld, and nothing is written, not
// even over an entry someone else made under our name. The Locker's watch
// of held entries sees that put with our create revision, on our lease,
// and takes it for ours, as it takes a move. A Refresh that moves the
// entry to another lease keeps its value (WithIgnoreValue), so that a
// move neither carries the value nor undoes a SetValue just before it.
// Inspect reports each holder's value: the keys of the queue and the
// first entry's value in one transaction, the others' values, when a key
// has several holders (shared, permits), in a second read at the same
// revision; the waiters' values are not read.
//
// locker.NewElection on an etcd Locker has the shape of etcd's
// concurrency.Election: a campaign puts a key with its value under the
// campaigner's lease, the leader is the key with the lowest create
// revision under the election's prefix, Proclaim puts a new value if that
// key's create revision is still the leader's, Resign deletes the key on
// the same condition, and Observe follows the prefix with a watch. The
// term (locker.Leader.Term, the leadership's Lock.Fence) is that create
// revision: concurrency.Election's Rev. Both wait for the nearest older
// key to go and look again; the differences are the Locker's: the key is
// the name's queue entry, the waiter's watch starts at the current
// revision (see Waiting), and a leader learns that its leadership ended
// (a lapsed lease, its key deleted by someone else) from Lost, where
// concurrency.Election tells it only of its session's end.
//
// Observe (backend.Observer, which Election.Observe uses) is one watch on
// the key's queue prefix, from before Observe returns: it waits for the
// server's created response, so an Inspect made after it misses no
// change. Every change of the key's holders is a put or a delete of an
// entry there (a grant, a release, an expiry when the lease's revoke
// deletes the entry, a force release, a SetValue), and each watch
// response with events sends a notice; so do changes that leave the
// holders as they were (a campaigner joining or leaving the queue),
// after which the observer reads the key and finds no new leader: an
// observer reads the key once per change of its queue, at most. The
// client resumes a watch whose connection broke from where it stopped;
// a watch that ends (its member lost the leader: the watch requires one,
// so that a member cut off from the cluster cannot leave it silent; its
// revisions were compacted; the server cancelled it) is created again,
// and then sends one notice for whatever it may have missed. Each Observe
// costs a goroutine until it is stopped, and a watch on a stream the
// client shares among its watches. concurrency.Election's Observe watches the leader's key alone, from the
// revision it read (etcd's 100 ms catch-up loop), and closes its channel
// when its watch is disrupted.
//
// # Guarantees and their limits
//
// etcd replicates through raft: an acquire is acknowledged only once a
// majority of members has it, and a leader change keeps every acknowledged
// entry. Leases survive a leader change (the new leader extends them by an
// election timeout, never shortens them), so killing the leader while a
// lock is held leaves exactly one holder. What a lease cannot prevent is a
// holder paused (GC, SIGSTOP) past its TTL that then acts without looking
// at Lost: fencing tokens cover that.
//
// # Performance
//
// Measured on one loopback member against concurrency.Mutex, against the
// raw pair (a put on a kept-alive lease, then a delete) and against the
// Locker's own two transactions sent by hand ("txns"), all on one client,
// taking turns, in one run of
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/etcd && go test -run '^$' -bench Uncontended -benchtime 10000x -count 2
//
// as ratios of uncontended Acquire+Release throughput: locker/mutex 0.983
// to 0.991, locker/raw 0.940, locker/txns 0.962 (the protocols alone:
// txns/mutex 1.022 to 1.029, txns/raw 0.975 to 0.980; the Locker's
// release must be a compare-and-delete transaction where the raw pair's is
// a bare delete, which a retried release could make delete a newer
// holder's entry). Timed call by call, an Acquire took some 13 µs more
// than its put sent by hand, and a Release as long as the
// compare-and-delete sent by hand. The 13 µs are the core's own work
// (token, options, bookkeeping of the lock), the two cancellable contexts
// the put runs under (the Locker's, which Close cancels, and the lease's
// life, which ends a put the server cannot answer before the lease
// would), reserving the entry's name on the lease and registering the
// held lock. None of them stood out above the noise of the machine: the
// two contexts alone, given to the hand-sent transactions, read from about
// 3% dearer to 3% cheaper from run to run.
//
// A watch running during such short locks costs about 4 points more
// (locker/mutex 0.95 to 0.97 when it started with the first lock): the
// server sends it an event for each put and delete in the namespace, on
// the connection the transactions' replies come by. Hence the 100 ms
// before it starts. Every process sharing a namespace receives every
// change in it once its watch runs, so give unrelated services namespaces
// of their own. Handing one key over between eight waiters (-bench
// Handoff -benchtime 2000x) measured 653 handoffs a second, p99 3.7 ms
// (concurrency.Mutex: 79 a second, p90 86 ms).
//
// A shared hold costs what an exclusive one does: a reader's Acquire
// (its put and the read of the queue, in one transaction) and Release
// against recipe.RWMutex's RLock (a put, then a read of the last writer's
// key) and RUnlock, on one client, taking turns, in package etcd's
//
//	go test -run '^$' -bench Shared -benchtime 2000x -count 3
//
// read shared/recipe 0.95 to 1.00 on a free key and 1.00 to 1.14 beside
// a reader holding it, and shared/exclusive (the Locker's mutex on a free
// key) 0.93 to 1.01, on a machine other tests were using (median
// latencies within 1% of the recipe's on a free key, within 10% beside a
// reader).
//
// # Servers
//
// The tests and benchmarks run against etcd 3.6 (the version
// tools/etcd/go.mod requires, built from the Go module proxy by
// scripts/install.sh), one member and a three-member cluster on loopback,
// with the client module go.etcd.io/etcd/client/v3 v3.5. The whole suite
// also passes against etcd 3.4 (Debian's etcd-server 3.4.23:
// LOCKER_ETCD_BIN=/usr/bin/etcd make test); there every transaction costs
// the server a copy of its write buffer, so a compare-and-delete release is
// dearer than a bare delete and the uncontended figures are a few percent
// lower relative to the raw pair. The transactions use range comparisons
// and puts that keep a key's lease or value (SetValue's ignore_lease, a
// move's ignore_value), all of which need etcd 3.3 or later.
package etcd
