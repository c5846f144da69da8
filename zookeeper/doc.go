// Package zookeeper is the lock backend for Apache ZooKeeper 3.5 or later
// (tested with 3.8), one server or an ensemble: the lock recipe of the
// ZooKeeper documentation, with a context on every call, TryAcquire,
// fencing tokens, TTLs, a lost-lock signal and keys of any bytes; and on
// the same queue, shared holds (read/write locks, locker.Shared) and
// semaphores (locker.Limit, locker.Weight), admitted in queue order. A
// hold carries a value in its node's data, and a key's changes are
// followed with watches (locker.Election's Leader and Observe).
//
// # Opening
//
// Import the package for its side effect and open by URL, or pass your own
// connection to New:
//
//	zookeeper://host:port[,host:port...][/path]   one server, or an ensemble
//	zk://...                                      the same
//	zookeeper://user:password@host:port/path      with digest credentials (see ACLs)
//
// The path names the node under which locks live, created as needed;
// default /locker. A host without a port gets ZooKeeper's 2181. Parameters:
// the shared ttl and prefix; any other is an error. Open asks a server for
// the range of session timeouts it grants (its minSessionTimeout and
// maxSessionTimeout): that range is the range of TTLs the Locker accepts
// (Capabilities().MinTTL and MaxTTL). A server that cannot be reached fails
// Open.
//
// # How a lock works
//
// Key K has a node of its own, <path>/k-<K escaped>: bytes other than
// letters, digits and -_.~ become %XX, so any key works, no two keys share
// a node and none nests in another. Keys are at most 1024 bytes.
//
//   - Acquire creates an ephemeral sequential node _c_<guid>-lock-<n> in
//     the key's node and lists the key's children. The lowest sequence
//     number holds the lock. Every other waiter watches the node just
//     before its own and nothing else, so a release wakes exactly one
//     waiter, the next in line. Waiters get the lock in the order they
//     queued (Capabilities().FIFO). This is the exclusive case of the
//     rule of Shared holds and semaphores below.
//   - A waiter woken by the deletion of the only node that was ahead of it
//     takes the lock from the watch event alone (a handover); any other
//     waiter lists again, as the node it watched may have left the queue
//     without holding. A handover needs to know that the deletion was not
//     a move (see TTLs and sessions): every lock node's data starts with
//     "locker:1" (see Values), which says that its moves are announced by
//     a change of its data first, and a waiter watching a node without it
//     (written by an earlier version, or another client) lists again; so
//     does one whose node ahead changed its data otherwise (a new value).
//     It also needs
//     our own node to be there still: the first wait on one of the
//     Locker's own connections sets a watch on our node too, and events
//     come in the order of the changes that fire them, so a deletion of
//     ours from outside is seen first. After a reconnect (whose re-set
//     watches fire in no set order), or a wait of a third of the session
//     timeout or more (the lock's TTL runs from the watch's request), the
//     waiter lists again instead.
//   - TryAcquire does the same once and removes its node if it is not
//     first. An Acquire whose context ends removes its node before it
//     returns.
//   - Release deletes exactly our node, never a parent and never another
//     holder's: its name carries our guid.
//   - Key nodes (and the path above them, where missing) are created as
//     containers, which the server deletes once their last child is gone,
//     so keys no longer used do not accumulate.
//
// A create whose reply is lost to a dropped connection may have been
// applied. The guid in the node's name ("protected" create) lets the
// acquisition find its node again instead of queueing a second one that
// would block the key for as long as the session lives; a node of ours
// that turns up late is deleted when the queue is next listed.
//
// An uncontended Acquire and Release send the bare recipe's three requests
// (create, list, delete) but wait for two round trips: the listing is sent
// right behind the create, without waiting for its reply. The server
// answers one session's requests in the order they arrive, so the listing
// already includes the new node. A key whose node does not exist yet
// costs two requests and two round trips more: the create (and the
// listing behind it) fail, the key node is created, then our node in it.
// That node is the key node's first, sequence number 0 (sequence numbers
// count every child created or deleted before), so nothing is ahead of it
// and no listing is needed.
//
// # Shared holds and semaphores
//
// Every hold of a key, of any kind, is one node in the key's queue, named
// with what it claims, so that one listing of the key's node tells a
// waiter all it needs. An exclusive hold's node is named as above; the
// others put a letter that is not a hex digit in front of fewer random
// digits, in the same 32 characters:
//
//	_c_<32 hex>-lock-<n>                              exclusive (a mutex, a write lock)
//	_c_s<31 hex>-lock-<n>                             shared (a read lock)
//	_c_p<limit:8 hex><weight:8 hex><15 hex>-lock-<n>  a permit: weight of limit
//
// The queue is the key's lock nodes ordered by the sequence number n (not
// by name). A node holds the key when backend.Admit admits it: when the
// units of the nodes ahead of it and its own fit the key (an exclusive
// node takes the whole key, a shared one a unit of it, a permit its
// weight of the limit). Holds are thus granted strictly in queue order: a
// writer queued behind readers blocks the readers queued after it, so a
// stream of readers cannot starve it, and a permit that does not fit
// blocks the smaller ones behind it, as golang.org/x/sync/semaphore's
// Weighted does. A node ahead of ours that disagrees with it (a permit
// with another limit, a shared or exclusive hold on a semaphore's key, a
// permit on a read/write lock's) fails the acquisition at once with
// ErrKindMismatch, and our node is deleted; nodes behind ours are theirs
// to judge (a request of another kind that queued just after ours is the
// one refused).
//
// A waiter that is not admitted watches one thing:
//
//   - An exclusive request watches the node just before its own, as the
//     mutex does (any node ahead blocks it, so that one decides): one
//     wake per release.
//   - A shared request watches the nearest exclusive node ahead of it:
//     the readers queued behind a writer all wake when it goes, and are
//     admitted together; a reader leaving ahead of that writer wakes none
//     of them.
//   - A permit watches the nearest node ahead whose weight and its own
//     exceed the limit, if there is one. Where no single node ahead
//     blocks it (several holders together take too many permits), any of
//     them going may admit it, so it sets a child watch on the key's node
//     and lists the queue again on every change: a node created or
//     deleted in the key wakes every waiter in that state, each listing
//     the whole queue. With w such waiters and n nodes, every release,
//     cancellation and new request costs w listings of n names, a herd
//     the other kinds do not have: a semaphore with many waiters blocked
//     at once pays it on every change.
//
// A waiter whose only node ahead goes takes the key from the watch event
// (a handover, as above), whatever its kind: a node alone in its queue is
// always admitted. A cancelled waiter deletes its node; those behind it
// that watched it, or the key's children, judge their place again, so a
// cancelled writer queued ahead of readers lets them in at once.
// Refreshing, the TTL, losing a lock and releasing it are the same for
// every kind: a hold is one node of its session.
//
// Inspect lists every holder (the front of the queue that Admit admits)
// with its kind, limit, weight, fence and value, and the waiters in order;
// ForceRelease deletes every holder's node and no waiter's.
//
// A version of this library that knows no kinds reads every node name
// above as an exclusive hold (it checks only the prefix, the 32
// characters, the infix and the number), so it waits for readers and
// permit holders as for writers, and its own nodes are exclusive to
// newer versions: a key used by both stays safe while they are upgraded.
//
// # Values
//
// A hold's value (locker.WithValue, Lock.SetValue) is its node's data,
// after the marker that every lock node's data starts with:
//
//	locker:1                      no value, as every earlier version wrote its nodes
//	locker:1\n<value>             a value: every byte after the newline
//	locker:1 <fence>[\n<value>]   a node that a move made again (see Fencing tokens)
//
// Values are at most 64 KiB (Capabilities().MaxValueLen): a server
// refuses a request larger than its jute.maxbuffer, 1 MiB by default,
// and a move's transaction carries the value twice; ZooKeeper is also
// made for small nodes, which every member keeps in memory. The create
// that queues a node writes its value, so a hold of any kind has its
// value from its grant, a waiter's queued node too.
//
// SetValue sends one setData of our node, at any version. The node's name
// carries our guid, so it is no other client's node, and it exists only
// while our session holds it: the server applies the write only while the
// lock is ours, and answers NoNode once the node is gone (released by
// force, its session expired), which SetValue reports as ErrNotHeld, as
// it does an answer saying the session expired. The write changes the
// node's data and its version, nothing else: not its czxid (the fence),
// its place in the queue or its session. It fires the watches on the node:
// the waiter queued behind it wakes and lists the queue again, a round
// trip that the waiter pays per SetValue; observers learn the new value.
// A write whose reply was lost may or may not have been applied: the
// value a later move writes is the one last asked for.
//
// Inspect reads the holders' nodes, up to 16 in one round trip on the
// Locker's own connections (each on a goroutine of its own on a
// connection given to New), and reports each holder's value and fence;
// waiters' values are not read. It lists the queue behind a sync, sent in
// the same write: the listing sees every change the ensemble's leader had
// committed when the sync reached it, on whichever member it is served, so
// that an Inspect made after an observer's notice sees the change the
// notice is for. A node whose data does not start with the marker
// (another client's, such as go-zookeeper's LockWithData) reports all of
// its data as its value. A version of this library that knows no values
// takes a node with a value for one without the marker: a waiter behind
// it lists the queue when it goes, rather than take it from the watch.
//
// # Observing a key
//
// The driver tells of every change of a key's holders (backend.Observer,
// which locker.Election's Observe follows) with watches, never by polling:
// a child watch on the key's node, which fires when a hold is granted,
// released, taken by force or expires with its session, or a waiter joins
// or leaves the queue (each is a child created or deleted); and a data
// watch on each holder's node, which fires when its value is replaced or
// the lock moves to another session. While the key's node does not
// exist, an exists watch waits for its creation. Refreshes change nothing
// and fire nothing.
//
// A watch fires once. The observer then sets it again (after a child
// watch, by listing the queue, which also names the holders whose data it
// watches) before it sends its notice: an Inspect made after the notice
// sees the change, and any later change fires one of the watches. The
// first watches are set before Observe returns. Watches outlive a dropped
// connection: the connection sets them again on the next one, and the
// server fires at once those whose node changed meanwhile; a reconnect
// sends one notice all the same. A session expiry ends the watches, and
// the observer sets them again in the new session, then sends a notice.
//
// So a leader or holder that crashes is seen when the server expires its
// session and deletes its node: within its TTL and Capabilities()'s
// ExpirySlack, as the next waiter sees it; until then, Inspect and an
// election's Leader report it. One that is cut off from the servers while
// it lives closes its Lost first (see Losing a lock).
//
// An observer costs a goroutine, a child watch and a data watch per
// holder, in one of the Locker's sessions (any that is open, or one of a
// 10 s timeout), which it keeps open; and per change that fires a child
// watch, a listing and a read of each new holder's node, in two round
// trips. Stopping it takes its watches out of the connection's: the
// server's go when they fire or the connection drops. With New, over
// go-zookeeper's connection, the watches of a stopped observer stay until
// they fire, and a reconnect sends no notice (go-zookeeper sets the
// watches again by itself, and the server fires those whose node changed).
//
// # TTLs and sessions
//
// The expiry mechanism is the session: the server deletes a session's
// ephemeral nodes when it has not heard from the client for the session
// timeout. A lock lives in a session whose timeout is the lock's TTL: the
// Locker keeps one session per distinct TTL, opened the first time a lock
// asks for that TTL and closed once it has held nothing for 30 seconds.
// A holder that crashes or is cut off thus blocks others for its TTL, plus
// up to one and a half ticks of the server (the leader checks for expired
// sessions once per tick, and learns of a follower's clients' activity up
// to half a tick late), plus the time to commit the expiry and wake the
// next waiter: Capabilities().ExpirySlack. The tick is not visible to
// clients; the slack assumes the default minSessionTimeout of two ticks.
//
// While the process lives, the client library keeps the session alive by
// itself, so the Locker enforces a live holder's TTL: a lock that is not
// refreshed (WithAutoRefresh(false)) has its node deleted when its TTL runs
// out, as a key with a TTL would expire. Refresh proves the session alive
// with a round trip to the leader (sync) and a read of our node; only a
// round trip made now shows that the server heard from the client now.
// The watchdog refreshes the locks due together in one request per session
// (see Holding many locks), which proves the same. Refresh with another
// TTL moves the lock into the session with that timeout, in one
// transaction (set our node's data, which tells the waiter behind that a
// move follows; delete our node; create it again under the same name): it
// keeps its place in the queue and its fence.
//
// A server grants session timeouts only within its range, and grants one
// on every connect and reconnect: an ensemble member whose range differs
// from that of the server Open asked may grant less or more than the TTL
// when a session moves to it, and the server then counts the session's
// life with what it granted (the Locker's connections ask for the TTL
// again on every reconnect, but a member grants only what its range
// allows). The Locker reads the timeout granted on each of its
// connections. A new session granted another timeout than the TTL
// fails the acquisition with ErrInvalidTTL naming the server's range,
// rather than holding a lock for a time nobody asked for. A session
// granted a shorter timeout on a reconnect loses its locks (see Losing a
// lock); one granted a longer timeout keeps them, since the server keeps
// them at least as long as promised. Either way the session takes no new
// lock, which would not expire with its TTL: new locks of that TTL go to a
// new session, and the old one is closed once it holds nothing.
//
// # Losing a lock
//
// The server deletes a lock's node when it expires the lock's session,
// which it does once it has heard nothing from the client for the session
// timeout it granted on the client's latest connection. Lost is closed at
// the first of the following. The first two close it before the server can
// expire the session, unless the process is paused or the server's clock
// runs fast (see Guarantees and their limits); the last two end the lock
// once its session is, or may be, gone.
//
//   - The lock's validity runs out on the local clock without a successful
//     refresh: the TTL, less a drift allowance, from the start of the last
//     refresh (or of the acquisition). Each of them sends its requests
//     after that start, and a session granted the TTL then lives at least
//     a TTL after the server receives them, even if the client was cut off
//     right after.
//   - A reconnect is granted a shorter session timeout than the TTL. The
//     grant is read before the client library sends anything on the new
//     connection, so no request of a lock is answered there while its
//     Lost is open. Refresh and Release then return ErrNotHeld with a
//     cause that names the grant (it also matches ErrInvalidTTL), and the
//     node is deleted. An Acquire waiting in that session gives up its
//     place and queues again in a new session, whose setup fails with
//     ErrInvalidTTL where the server grants less than the TTL.
//   - The server reports the session expired.
//   - The connection has been down for a whole session timeout, after
//     which the server may have expired the session (an Acquire in
//     progress then gives up too).
//
// Someone else deleting a lock's node (by hand, or a tool that forces a
// release) ends the lock on the server at once, session or not, but only
// the next refresh learns of it: that refresh returns ErrNotHeld, saying
// the node is gone, and closes Lost. With the watchdog, that is up to a
// third of the TTL later, in which time another client may take the key.
// Fencing tokens cover that too.
//
// A lock whose TTL ran out is deleted from the server as soon as it can be,
// so that the next waiter gets it. A Locker whose session expired goes on
// with a new one: later locks are unaffected.
//
// One reconnect cannot be checked: one whose answer is lost, the server
// having granted a shorter timeout on a connection that dropped before the
// client read the grant. Should the client then stay cut off from every
// server, the server may expire the session up to the difference between
// the two timeouts before Lost closes. Give every member of an ensemble
// the same session range; fencing covers the rest.
//
// # Holding many locks
//
// A held lock costs the server one ephemeral node (and its key node, a
// container), and the client about 1 KB of heap: no goroutine or timer of
// its own. A lock that waited behind a single holder keeps the watch on
// its own node (see How a lock works) until it is released. A session,
// one per distinct TTL, costs a connection, the one goroutine that reads
// it, and its heartbeats (a ping whenever nothing was sent for a third of
// the timeout, whatever the number of locks).
//
// The watchdog refreshes each lock about every third of its TTL, and
// gathers the locks due within a thirtieth of the TTL into one batch. The
// Locker checks a batch's locks of one session with a multi: one check
// operation per lock node (version -1: the node exists), in chunks of at
// most 1000 checks and 32 KiB of paths, about 300 locks with short keys.
// The server handles a multi as a write: the leader checks that the
// session is alive and evaluates every check against its latest state,
// the changes it has proposed included (an expiry of the session too), and
// answers once a quorum committed it. A successful multi thus proves what
// Refresh's sync and read prove, and counts the same: each lock's
// validity runs again from the start of the batch, taken before the multi
// was sent. A multi is applied whole or not at all; when a node is gone,
// the server names the first failing check, that lock gets ErrNotHeld
// (the node is gone), and the rest of its chunk is checked again without
// it. A lock whose TTL changes moves on its own, as by Refresh.
//
// So N locks of TTL T cost about 3N/T checks a second, in about 3N/(300T)
// requests: 10,000 locks of 3 s, some 35 requests a second (measured:
// 40, heartbeats included). Being writes, the checks also go to the
// servers' transaction logs, some 20 bytes plus the node's path each
// (10,000 locks of 3 s: about 1 MB a second): let the servers purge old
// logs (autopurge.snapRetainCount, autopurge.purgeInterval). A server
// keeps its last 500 transactions in memory for followers that fall
// behind, about three copies of each; 32 KiB multis keep that near 50 MB
// of its heap.
//
// Acquiring costs two requests where the key node exists (the create and
// the listing sent behind it) and four where it does not (see How a lock
// works); releasing, one. A permit that waits with a child watch lists
// the queue once more to set it, and again on every change of the queue
// (see Shared holds and semaphores).
//
// # Fencing tokens
//
// The fence is the czxid of the lock node: the id of the transaction that
// created it. Transaction ids are global and strictly increasing, and
// holders take a key in the order their nodes were created, so fences are
// strictly increasing across holders, also when the key's node is deleted
// and created again (sequence numbers restart then; zxids do not). With
// shared holds and permits too: holds are granted in queue order, so a
// writer's fence exceeds that of every hold granted before it, of either
// kind, and a reader's that of every writer before it.
//
// A lock that moves to another TTL's session (Refresh with a new TTL)
// keeps its fence, but its node is made again, and the new node's czxid
// is the move's: the move records the lock's fence in the node's data
// (see Values), and Inspect reports the recorded one. So Inspect's fence
// for a holder is always its Lock.Fence, and an election's term, read
// from it, that of the leader's lock.
//
// Shared holders hold together, so their fences do not order them among
// themselves: two readers holding at once have distinct fences, either of
// which may reach a resource first. What a fence tells a resource used by
// shared holders is the write it follows: a resource that remembers the
// highest fence it has seen refuses a write with a smaller one (a paused
// writer whose turn ended), and may refuse a reader whose fence is below
// the latest writer's, which started before that write. It must not
// refuse a reader because another reader's fence is higher; nor does a
// fence count a semaphore's holders, which the resource must check
// itself if it cares. The
// czxid is the zxid of the create's reply, which the Locker's own
// connections report (internal/zkclient's creates are create2 requests,
// whose reply carries the node's Stat; go-zookeeper's Create does not
// return it), so it costs no round trip. Where that reply is not
// at hand (a connection given to New, a create found again after a lost
// reply) the node is read back alongside the listing.
//
// # ACLs
//
// With credentials in the URL, every session authenticates with digest
// user:password, and every node the Locker creates carries the ACL
// digest:user:<hash> with all permissions plus world:anyone with read.
// ZooKeeper checks the permission to delete a node on its parent, so it is
// the key nodes' ACL that keeps clients without the credentials from
// deleting lock nodes (and from queueing); they can still read the queue.
// ACLs are not inherited: nodes created earlier without credentials keep
// their ACL until the server collects them.
//
// # Guarantees and their limits
//
// Writes go through the ensemble's leader and a quorum, so a lock survives
// the loss of a minority of servers, and the leader's failure: a new
// leader gives every session a full timeout again. If the election takes
// longer than a holder's validity, the holder sees Lost; it never goes on
// believing it holds a lock that another client was granted.
//
// Two limits remain, as with any ZooKeeper lock. A client connected to a
// follower renews its session through the follower, which reports it to
// the leader about every half tick; should the follower lose the leader
// right after a refresh and before reporting it, the leader may expire the
// session up to that much earlier than the client reckons. And a holder
// paused (a GC pause, a stopped VM) past its TTL still believes it holds
// the lock when it wakes. Fencing tokens checked by the protected resource
// cover both.
//
// # Performance
//
// Measured against go-zookeeper's zk.Lock on one loopback server, in one
// run of
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/zookeeper && go test -run '^$' -bench . -benchtime 2000x -count 3
//
// as ratios of operations per second, Locker over zk.Lock:
//
//   - Uncontended Acquire+Release: 1.37x to 1.38x (two round trips against
//     three), the p50 429 against 591 µs.
//   - The first acquisition of a key never locked before: 1.63x to 1.66x
//     (three round trips against four).
//   - Handoff between waiters on one key, the two libraries taking turns
//     50 handoffs at a time: 1.13x to 1.17x with two waiters, the p50 a
//     quarter lower (314 to 335 against 433 to 472 µs); 1.07x to 1.09x
//     with eight. The waiter next to the holder takes the lock from the
//     watch event (a handover, see How a lock works) where zk.Lock lists
//     the queue again; with eight, most waiters queued behind more than
//     one node and list once woken, as zk.Lock's do.
//
// And against the bare recipe (create, list, delete, each after the
// previous reply) in one run of
//
//	go test -run '^$' -bench Uncontended -benchtime 2000x -count 3 ./zookeeper/
//
// uncontended Acquire+Release is 1.36x to 1.38x the recipe over
// go-zookeeper's connection and 1.29x to 1.31x the recipe over
// internal/zkclient, which itself runs the recipe 1.05x to 1.06x as fast
// as go-zookeeper: the client's requests are written by the caller's
// goroutine and read by one goroutine per connection, with no hand-off to
// a sending goroutine, and the requests on a lock's path wait for their
// reply on the caller's goroutine, not on one started for each
// cancellable request. The watchdog costs nothing measurable here
// (autorefresh/locker 0.98x to 1.02x).
//
// With every waiter listing once woken (before handovers), two waiters
// handed over 7% to 13% more often when a key handed back and forth
// listed after the create's reply instead of behind it; with handovers,
// the listing behind the create measured 5% to 11% ahead of zk.Lock, and
// the other way 1% behind, so it goes behind the create on every key.
//
// Holding 100,000 locks (internal/heldtest, LOCKER_HELD_SIZES=100000 in
// make bench-go) lost none, at the default TTL and at 3 s, with 892 and
// 966 bytes of client heap per lock and two or three goroutines in all.
//
// Values, in one run of
//
//	go test -run '^$' -bench Value -benchtime 2000x -count 3 ./zookeeper/
//
// with a 100-byte value: SetValue runs at 0.98x to 1.04x a bare setData
// of the node over internal/zkclient (the p50 208 to 233 µs); Inspect of
// a held key at 0.87x to 0.97x the bare requests it sends (a sync and a
// listing in one write, then the holder's node read; the p50 421 to 469
// µs). The sync costs 7% to 13% against a listing and read without it.
//
// # The client
//
// The sessions a Locker opens by URL run over internal/zkclient, a
// ZooKeeper client written in this project for what a lock needs (its
// package doc says what and why): the timeout granted on every connect,
// read before anything is sent on the connection; the czxid from the
// create's reply; a listing sent behind the create (or a sync), and
// several watches or reads, in one round trip; requests a caller stops
// waiting for without a goroutine each; watches that outlive a reconnect
// without a data race, and that an observer that stops takes out. It
// speaks go-zookeeper's data types and errors, so that errors compare the
// same with either connection.
//
// # Your own connection
//
// New takes a *zk.Conn you opened with go-zookeeper. All locks of that
// Locker live in its session, so their TTL is its timeout, which you must
// pass as Options.SessionTimeout (go-zookeeper does not expose it; New
// checks it against the server's range). The Locker does not close the
// connection. Mutual exclusion, expiry with the session, safe release and
// czxid fences hold as with a Locker opened by URL; what go-zookeeper's
// API does not give costs this much:
//
//   - A session expiry is noticed by the next refresh rather than at once
//     (Capabilities().LossSignal is false), and the timeouts granted on the
//     connection's reconnects are not seen: a member that grants a shorter
//     one can expire the session before Lost closes, so give every member
//     the same session range.
//   - The fence is read back with the listing (the create's reply does not
//     carry it), the listing waits for the create's reply, and a waiter
//     woken lists the queue again rather than taking the lock from the
//     watch event: a round trip more each.
//   - A request that a context can cancel waits for its reply on a
//     goroutine of its own.
//   - go-zookeeper v1.0.4 races on its last zxid when a reconnect meets a
//     watch and a request in flight (see internal/zkclient); a waiting
//     Acquire sets a watch, so the race detector can report that race in
//     your program's own connection.
package zookeeper
