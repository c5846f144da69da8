// Package redis is the lock backend for one Redis server (or one Sentinel
// failover group, or a Redis Cluster): the SET NX PX algorithm of the Redis
// distlock page, with fencing tokens, release notices and a watchdog, and
// read/write locks and semaphores beside it (# Shared holds and
// semaphores).
//
// # URLs
//
// Import the package for its side effect and open by URL, or pass your own
// client to New (go-redis v9) or NewRedigo (redigo):
//
//	redis://[user:password@]host:port[/db]        one server (db: 0 by default)
//	redis://h1:p1,h2:p2,h3:p3                      Redis Cluster (go-redis only)
//	redis+sentinel://[user:password@]s1:p1,s2:p2/master-name[/db]
//	                                               the master that Sentinels name
//	                                               (go-redis's failover client only)
//	rediss://..., rediss+sentinel://...            the same over TLS
//
// Parameters besides the shared ttl and prefix:
//   - client: goredis (the default) or redigo. redigo has neither a
//     Cluster nor a Sentinel client: with those, client=redigo is an error.
//   - timeout: the socket read and write timeout, a Go duration.
//   - allow_eviction: see Guarantees below.
//   - cacert, cert, key (TLS schemes only): file names of the CA that signed
//     the server's certificate (instead of the system's roots), and of a
//     client certificate and its key, which go together. On redis:// they
//     are an error; a file that is missing or holds no PEM data is an error
//     that names it. The server's name (the URL's host) is verified.
//   - sentinel_user, sentinel_password (Sentinel schemes only): the
//     Sentinels' own credentials; the user and password of the URL are the
//     master's.
//
// A host without a port gets 6379, a Sentinel without one 26379.
//
// Open looks at the servers before it trusts them, and fails with an error
// that names the problem: a database the server does not have (with the
// number it has, when CONFIG GET is allowed), several hosts that are not
// Redis Cluster nodes (use redlock:// for independent masters, or give one
// host), a Sentinel opened with redis:// or a server opened as a Sentinel,
// a master name no Sentinel knows, a TLS handshake that fails (a
// plain-text server given as rediss:// is told apart by a PING sent in
// the clear on a connection of its own, so the error comes within a
// fraction of a second instead of a timeout), a server that closes the
// connection of a redis:// client (one that expects TLS). A single host
// that is a Cluster node is opened with go-redis's Cluster client, since a
// plain client would be answered MOVED for the keys of the other nodes'
// slots; a database other than 0 there is an error. Passwords, the URL's
// and sentinel_password, appear in no error. A Locker closes only clients
// it opened from a URL.
//
// # Client libraries' logs
//
// The Locker logs through Config.Logger (locker.WithLogger), slog.Default
// when none is given, and nowhere else. go-redis also logs on its own
// (a failed dial, a Sentinel master switch), through one logger for the
// whole process, on stderr by default. The library never replaces that
// logger, as it serves the application's own clients too; instead:
//
//   - A server found down is not dialled per request. Once a dial to it
//     fails, the Locker's requests fail at once, without reaching the
//     client, with an error that says the server is down and wraps the
//     dial's error. The first request after a back-off (100ms, doubling
//     up to 5s, reset by an answer) dials the server with the client's
//     own dial function, which logs nothing (a failover client's asks
//     the Sentinels first, and go-redis logs a Sentinel that fails), and
//     goes on if the server accepts. An outage thus costs the lines of
//     the requests in flight when it began (go-redis logs each retry's
//     failed dial: up to 4 a request with its defaults), not a line per
//     request, and a server that comes back is used again within about
//     5 seconds. A request turned away would have failed all the same.
//     Only a dial that fails marks a server down, not one that answers
//     slowly or drops a connection. This holds for go-redis clients of
//     one server (Sentinel's failover client included) and redigo pools;
//     go-redis's Cluster and Ring clients track their nodes themselves.
//   - RouteClientLogs sends go-redis's lines to a *slog.Logger, for an
//     application that wants them there: one call at start-up, an opt-in
//     because it changes the logger of every go-redis client in the
//     process. Alternatively pass an adapter of your own to
//     goredis.SetLogger, or silence go-redis with logging.Disable from
//     github.com/redis/go-redis/v9/logging.
//
// redigo does not log.
//
// After Close returns, a Locker opened from a URL makes no connection to
// any server: go-redis dials in goroutines that outlive the client's
// Close, so the client is built with a dialer that Close shuts, cancelling
// the dials in flight and refusing the rest at once. A dial that was in
// flight may still log its failure, with the error "redis: client closed
// by its Locker", just after Close returns. A Locker on your own client
// (New, NewRedigo) stops using it at Close; the client's own pool is yours.
//
// # How a lock works
//
// Each operation is one round trip: a command, or a Lua script run
// atomically by the server (EVALSHA, falling back to EVAL when the server
// has not seen the script):
//
//   - Acquire: SET key token NX PX ttl. A busy key costs a waiter one more
//     round trip, the script Redlock's nodes run too (redisconn.Take): it
//     takes the key if it was freed meanwhile, counts our own token as
//     taken (a client library that sent the SET again after a connection
//     broke finds it there), and otherwise answers with the holder's
//     remaining TTL, for the wait's timer. Once a lock of the Locker
//     has been asked for its fence, Acquire is the acquire script instead:
//     the same SET NX PX and, only if that succeeded, the fence's mint
//     (below), the holder's PTTL when the key is busy, and a change notice
//     (see Values and observers) when it took the key.
//   - Release: delete the key only if it still holds our token, and PUBLISH
//     a release notice.
//   - Refresh: PEXPIRE only if the key holds our token. TTL: PTTL likewise.
//
// No script ever changes a key that holds another token. Server keys are
// locker:{k:KEY}, locker:{k:KEY}:fence and so on: the braces are a Cluster
// hash tag, so a lock and its counter live in one slot. The scripts that
// read an exclusive lock's key (release, refresh, TTL) read it with a
// protected GET: when the key is a hash (an exclusive hold with a value
// lives in one: see Values and observers), the GET fails, and only then
// does the script look for our hold in the hash, in a hash of family
// exclusive only; a key of shared holds taken since our lock expired has
// none, and the script answers that the lock is not held.
//
// An Acquire whose reply is lost (timeout, reset connection) may have
// taken the lock on the server. Before it reports the failure it runs the
// compare-and-delete for its token, so no orphan lock blocks other clients
// for a TTL. For the same reason a Release whose first reply was lost may
// report ErrNotHeld although it did release the lock.
//
// # Fencing tokens
//
// The fence is max(counter+1, server clock in microseconds), stored back
// in the per-key counter with the token of the lock it was minted for. The
// counter makes it strictly increasing across holders; the clock floor
// keeps it increasing when the counter is lost, as it is when a server
// without persistence restarts, when a replica without the latest writes
// is promoted, or when an idle key's counter expires (it lives 24 hours
// after the last mint). The floor holds as long as the server's clock does
// not step back by more than the time between two mints on the key. Pass
// the fence to the resource you protect and have it reject a smaller one
// than it has seen: that, not the lock alone, is what keeps a paused or
// partitioned former holder from doing damage.
//
// Fences are minted on demand. A Locker takes its locks with a plain SET
// NX PX until one of them is asked for its fence (Lock.Fence); that first
// Fence call runs the acquire script in its mint-only form, one round trip
// bounded by the lock's validity, which mints a fence only if the key
// still holds the lock's token, in the same atomic step. From then on the
// Locker mints every lock's fence as it takes the lock, in the acquire
// script, and Fence costs nothing: an application that fences pays for it
// once per Locker in a round trip and then with every acquisition, on the
// server, and one that never fences does not pay at all (Performance
// gives the figures). Minting later than the acquisition keeps fences
// safe: only the holder of the key can mint while it holds it, so a fence
// minted during a hold is above every fence of earlier holders and below
// every fence of later ones; and a holder whose lock expired, or was taken
// over, before it asked, gets no fence (Fence returns ok false, and the
// lock reports itself lost) rather than one above its successor's. Ask for
// the fence right after Acquire, before the work it protects: a Fence that
// finds the server unreachable returns ok false, and a holder without a
// fence must not write to a fenced resource.
//
// # Guarantees and their limits
//
// On one server that does not lose its data, at most one client holds a
// key at a time, on the server's clock. A holder that crashes blocks
// others for at most the TTL (plus ExpirySlack: Redis expires a key when
// it is touched, or within its background sweep).
//
// What Lost promises relative to the server: the server keeps a lock at
// least until the send time of the last request that set its TTL (the
// acquire, or a refresh) plus that TTL, however late the request arrived,
// since it sets the TTL when it is applied. Lock.Until, the moment Lost
// closes, is that time less the drift allowance (1% of the TTL + 2 ms):
//   - after the acquire sent at s: s + TTL - drift;
//   - while a refresh sent at s with TTL t is in flight: at most
//     s + t - drift, as the server may already have applied it (a shorter
//     TTL than the time left shortens the lock before the reply);
//   - after it succeeds: s + t - drift; after it fails without an answer
//     (a timeout, a dropped connection: the command may still be applied,
//     even after a later refresh, and go-redis may have retried it), no
//     later deadline assumes a longer TTL than t.
//
// Lost closes earlier when a refresh finds the key gone or owned by
// another token (an operator deleted it, the server lost it). It does
// not close when the key is deleted between refreshes: Redis tells no one,
// so the holder learns it at the next refresh, at most TTL/3 later with
// the watchdog on. Refreshes of one lock go out one at a time, so two
// can never be applied in the other order.
//
// Replication in Redis is asynchronous. If the primary fails after
// granting a lock and before the write reaches the replica that Sentinel
// or Cluster promotes, the new primary has no lock and grants it again:
// two holders. Fencing tokens are the remedy, and the clock floor above
// is what keeps them increasing across such a failover. The Redlock
// backend trades this failure mode for others; see its package doc.
//
// Redis may evict keys under memory pressure. Every lock key has a TTL, so
// every maxmemory-policy other than noeviction can evict a held lock, and a
// second client then acquires it. New and Open therefore read
// maxmemory-policy on the server, or on every master of a Cluster, and
// refuse it unless Options.AllowEviction (allow_eviction=true) says the
// risk is accepted; the error names each server at fault with its policy.
// Where CONFIG is not permitted, as on many managed services, they log one
// warning through Config.Logger and go on.
//
// # Waiting
//
// A waiter is woken by the release itself, not by polling. After a failed
// attempt it subscribes to the key's release channel and tries once more
// (the release may have come in between), then waits for a notice or for
// the holder's remaining PTTL, whichever comes first: the timer covers a
// holder that dies without releasing, and a notice lost while the
// subscriber connection reconnects. All waiters of one Locker share one
// subscriber connection, with one subscription per key however many wait
// for it.
//
// Pub/sub costs one connection per Locker whatever the number of waiters;
// the Performance section says what the other design measured and why it
// was rejected. Waiters are not served first-come first-served:
// Capabilities().FIFO is false. For what that means to a writer waiting
// for readers, see No queue below.
//
// # Shared holds and semaphores
//
// Besides the mutex (an exclusive hold, the default), a key may be a
// read/write lock, whose holds are exclusive (writers) or shared
// (locker.Shared: readers, any number of them at once, never beside a
// writer), or a semaphore of n permits (locker.Limit(n)), whose holds take
// one permit each, or w (locker.Weight(w)), never more than n together.
// Every client of a key must agree on what it is: a request of another
// family than the key's holders (a permit on a read/write lock's key, a
// shared or exclusive hold on a semaphore's, a semaphore of another limit)
// fails at once, Acquire as TryAcquire, with locker.ErrKindMismatch (a
// *backend.Mismatch that names both). Only holders that are there count:
// a free key takes any family.
//
// An exclusive hold without a value is the mutex's string key, taken by
// SET NX PX as above. Shared holds and a semaphore's permits (and an
// exclusive hold with a value: see Values and observers) live in a hash
// at the same server key, locker:{k:KEY}, so that on a Cluster the key,
// its fence counter and its release channel still share one slot:
//
//	kind       "shared", or "permit N" for a semaphore of N permits
//	           ("exclusive" for an exclusive hold with a value)
//	t:TOKEN    "EXPIRY WEIGHT FENCE": the hold's expiry in milliseconds of
//	           the server's clock (TIME), its permits (1 for a shared or
//	           exclusive hold), and its fence
//	v:TOKEN    the hold's value, if it has one
//
// Each operation on such a key is one script (internal/redisconn's
// hold.lua, hold_release.lua, hold_refresh.lua, hold_pttl.lua, over the
// library holds.lua) that reads the server's clock, deletes the holders
// whose expiry has passed, and sets the key's own TTL to the latest expiry
// of those left. Redis thus deletes the key when its last holder lapses,
// and a crashed holder frees its share within its TTL plus ExpirySlack,
// as a mutex does. A hold's expiry is its own: a holder's refresh, even to
// a shorter TTL, never shortens another's, and a release (which publishes
// the release notice waiters listen to) removes its own entry only; the
// release or refresh of a hold that expired finds no entry and returns
// ErrNotHeld. Acquire checks the family, then the room: shared holds have
// no limit, a permit fits while the weights held and its own are within
// the limit. A refused request learns how long the soonest holder has
// left, for its wait's timer. A request sent again with its token (its
// first reply lost and the client library retried) finds its hold and its
// fence, with its TTL set afresh. The watchdog's batched refresh (see
// Holding many locks) extends holds of every kind in one script call.
//
// The type of the key tells a writer without a value from readers, and the
// hash's family one with a value. A writer's SET NX PX finds the hash; the
// take script that follows any refused SET then answers busy for as long
// as the soonest reader (or the valued writer) has left, or a mismatch on
// a semaphore's key (and takes the key if every holder had lapsed). A
// reader finds a writer's string key and waits out its PTTL, or a valued
// writer's hash and waits out its expiry; a permit request calls either a
// mismatch. No script finds a hold of its own in a key of another kind of
// hold, and none touches it.
//
// Each operation on a key of n holders reads all n (to drop the expired
// and add up the weights): a key shared by thousands of readers makes
// each of their requests a script of thousands of steps, during which the
// server runs nothing else.
//
// # No queue, and a waiting writer's mark
//
// Waiters are not queued on the server, as for the mutex: a waiter is
// woken by each release notice and by the soonest holder's expiry, and
// tries again. So that readers that overlap, each arriving before the
// last has left, do not starve a writer, a waiting writer's attempt that
// finds readers marks the key (a w:<token> field of its hash, with its
// expiry on the server's clock): while a live mark is there no new shared
// hold is granted, the readers holding the key keep their holds (and
// refresh them), and the writer gets in when the last of them leaves. The
// mark lasts the writer's TTL and each of its attempts renews it (it tries
// again within a third of its TTL while it waits); its grant removes it,
// and the end of its wait by a cancel or Close takes it back and wakes the
// readers it kept out. A writer that crashes while it waits keeps readers
// out for at most its TTL. TryAcquire leaves no mark. The mark only ever
// refuses: no reader is let in beside a writer because of it.
//
// Semaphores have no such mark: a request for many permits waits while
// smaller ones that fit take the permits freed. Where a large request must
// not starve, use a backend that queues (memory, zookeeper, etcd:
// Capabilities().FIFO).
//
// # Fences of shared holds and permits
//
// Every shared or permit hold gets its fence as it is granted, in the
// same script: the counter's next value, the larger of counter + 1 and the
// server clock in microseconds, as for an exclusive hold. Fences thus
// increase in grant order across kinds, and an exclusive hold's fence,
// minted on demand while it holds the key, is above that of every hold
// granted before it. To a resource used by shared holders a fence means
// "granted after every smaller fence": a resource that keeps the largest
// fence it has seen refuses a write whose fence is smaller, so a writer
// whose lock expired (a pause, a partition) cannot write after readers or
// another writer were let in. Readers' fences let it also refuse a read
// that started before the last write was granted (a reader's fence below
// the last writer's), if it wants to; but two readers' fences order only
// their grants, and a resource must not refuse a reader because another,
// later, reader's fence was seen.
//
// # Values and observers
//
// A hold may carry a value of up to 64 KiB (locker.WithValue,
// Lock.SetValue), which Inspect reports with the hold and an Election
// reports as its leader's. A mutex's hold without a value stays the
// string key above, taken by SET NX PX at the same cost as before values
// existed. One with a value is kept in the key's hash of holders (see
// Shared holds and semaphores), as the one holder of a hash of family
// "exclusive", beside its value:
//
//	v:TOKEN    "VERSION VALUE": 1 for the value the hold was taken with,
//	           higher for each SetValue (an empty value keeps its version)
//
// This representation was chosen over a second key per lock (the value
// beside the string key) because the value then lives and dies with the
// hold: Redis expires and deletes both at once, a release or a release by
// force removes both, and no script has to keep a second TTL in step with
// the lock's. It also makes the exclusion of mixed clients on one key the
// hash's own rules. A valued hold's SET NX competitor (a client without a
// value) finds the key taken and is answered busy for the holder's TTL by
// the take script, the acquire script likewise; a valued request finds a
// mutex's string key busy, as it does another valued holder or readers;
// readers find a valued writer busy; and a semaphore's permit is a
// mismatch for it, as for a mutex (locker.ErrKindMismatch), and the other
// way round. The holder's scripts (release, refresh, TTL, the batched
// refresh) find its hold in either form, so that a hold taken without a
// value can be given one: SetValue then moves it into a hash of family
// exclusive, in the same atomic script, with its remaining TTL and with
// the fence minted for it if it had asked for one (the counter names its
// token), and from then on it lives there. An empty value removes the
// value, and leaves a string key as it is.
//
// A value costs what the hash costs. An acquisition with a value runs the
// hold script, which also mints the fence (Acquire's Lock has it at once)
// and stores the value: the server spends some 20 µs on it where a SET
// costs 1 to 2 µs, and the release then fails its GET before it finds the
// hold in the hash. BenchmarkExclusiveHash's "valued" design measures the
// whole: 0.73x to 0.80x the throughput of the fenced mutex's commands
// ("valued/scripts"), and 0.59x to 0.64x the raw pair (five runs of
// -benchtime 5000x on a shared machine of 2 cores). SetValue is one
// script call, which checks the token and replaces the value together and
// returns ErrNotHeld when the hold is not ours; a value of an older
// version than the hold's (two SetValue calls at once) is not taken.
// Every operation on a hash of holders reads all its holders' values, so
// a read lock with many readers that each keep a large value makes each
// of their requests read them all.
//
// A rollout note: a client of a version from before values reads an
// exclusive hash as a key of another kind, so while both versions run, an
// old client's request for a key a new client holds with a value fails at
// once with ErrKindMismatch instead of waiting. Mutual exclusion holds
// throughout.
//
// The driver is a backend.Observer, which locker.Election's Observe
// follows. Observe subscribes, on the Locker's one subscriber connection,
// to the key's release channel and to its change channel,
// locker:{k:KEY}:changed, and returns once the server has confirmed both.
// A notice is published by every script that changes the key's holders:
// a release and a release by force on the release channel; a grant by the
// hold script (holds with a value, shared holds, permits) or the acquire
// script (a fenced mutex), and every SetValue, even of an empty value, on
// the change channel. Three changes publish nothing:
//
//   - A mutex's grant by a plain SET NX PX, without a value and before
//     the Locker fences: publishing would need a script on the fastest
//     path. An observer sees such a holder at the key's next notice (its
//     SetValue or release, another client's grant). An Election never
//     leaves its leader unannounced: a Campaign without a value on a
//     Locker that has not fenced yet mints the term and then sets the
//     value again, which publishes.
//   - An expiry: Redis publishes nothing when a key expires (keyspace
//     notifications are off by default, and lost like any pub/sub message
//     while disconnected). A crashed holder is seen gone when its TTL, as
//     the observer last read it, runs out: Election.Observe looks again
//     then.
//   - A message lost while the subscriber connection was down: after it
//     reconnects and subscribes again, the observer gets a notice, and
//     looks again.
//
// # Clients
//
// go-redis ignores context deadlines on a client built without
// ContextTimeoutEnabled and waits for its socket timeouts instead (3
// seconds by default). Locker operations take a context: build your client
// with ContextTimeoutEnabled: true so that their deadlines hold, as the
// clients opened from a URL are. redigo's pooled connections honour the
// context through its DoContext.
//
// Redis Cluster is supported through go-redis's ClusterClient; redigo has
// no cluster client.
//
// # Holding many locks
//
// A held lock costs the server its key and the client about 600 bytes of
// heap, no goroutine or timer of its own. The watchdog refreshes each lock
// at a third of its TTL and gathers the locks due within a thirtieth of
// the TTL into one batch, sent as one pipeline of script calls that each
// extend up to 100 locks (internal/redisconn's refresh_many script: for
// each key, PEXPIRE only if it still holds our token, or for a shared or
// permit hold, its entry's expiry moved if the entry is still there). On a Cluster a call
// names keys of one hash slot only, so there it extends the locks of one
// slot; on a Ring each lock goes in a call of its own. So N locks of TTL T
// on one server cost about 3N/(100T) script calls a second, in about 30/T
// round trips: 100,000 locks of 3 s, some 1,000 calls a second (measured
// with internal/heldtest's BenchmarkHeld), where a call per lock made the
// server run 100,000 scripts a second and lose locks to its own backlog.
//
// # Performance
//
// An uncontended Acquire+Release costs two round trips, as the raw pair
// does (SET NX PX, then EVALSHA of a compare-and-delete): a SET NX PX,
// then the release script, which also publishes the release notice. A
// Locker whose locks are asked for their fence takes them with the
// acquire script instead, which mints the fence (TIME, the counter's GET
// and SET) in the same round trip. The server's command statistics
// (INFO commandstats, usec_per_call, over 1,000 to 5,000 calls in two
// sessions) put a SET at 1.0 to 1.9 µs, the release script at 6.0 to 7.6
// µs (the raw compare-and-delete at 4.4 µs), and the acquire script at 12
// to 15 µs: a fence costs the server some 10 to 13 µs per acquisition,
// which is why it is minted only for the Lockers that ask (see Fencing
// tokens).
//
// Three benchmarks isolate the costs; each runs its designs taking turns
// (benchkit), so that the machine's noise hits them alike, and reports
// ratios. The figures below are from three runs each on a shared machine
// of 2 cores, loopback redis-server 7.0:
//
//	go test -run '^$' -bench Turns -benchtime 20000x -count 3 ./redis/
//	go test -run '^$' -bench Clients -benchtime 60x -count 3 ./redis/
//	cd bench/redis && go test -run '^$' -bench . -benchtime 60x -count 3
//
// (bench/redis is a module of its own, with bsm/redislock; give its
// Uncontended benchmark 10000x.)
//
//   - The protocol, one client (Turns): the Locker's commands sent alone
//     run at 0.97x to 0.99x the raw pair ("setnx/raw"; the notice's
//     PUBLISH), and at 0.86x to 0.89x with the fence minted ("scripts/raw").
//   - The Locker's code, one client: a Locker runs at 0.95x its commands
//     ("new/setnx"), so at 0.93x to 0.94x the raw pair, and at 1.00x to
//     1.01x bsm/redislock (bench/redis). A holder that asks for its fence
//     every time runs at 0.81x to 0.84x the raw pair and 0.87x to 0.91x
//     redislock.
//   - Many clients, each with a Locker and a key of its own (Clients):
//     with 16 and 64, the Locker's commands alone run at 0.92x to 0.99x the
//     raw pair, and a Locker at 0.82x to 0.91x the raw pair, 0.90x to 1.00x
//     redislock. On two cores the clients' CPU competes with the server's,
//     and a Locker spends some 3 to 5 µs of client CPU per Acquire+Release
//     beyond its two commands (measured with getrusage over 32,000
//     operations: about 26 to 29 µs for the commands alone, 28 to 33 µs
//     through a Locker): the lock's record and Lost channel, its place in
//     the watchdog's timetable and the Locker's set of held locks (what
//     Close releases), the context that lets Close end an acquisition, and
//     the timer that bounds a release. A profile finds no single cost
//     above a few percent of it; the watchdog itself costs nothing here
//     (the same with WithAutoRefresh(false)). That is the floor this
//     backend reaches with those guarantees; redislock, which keeps none
//     of them, runs at 0.89x to 0.94x the raw pair in the same runs.
//
// The mutex keeps SET NX PX rather than the hash of holders that shared
// and permit holds use, although the mutex is the semaphore of one permit:
// BenchmarkExclusiveHash takes an exclusive hold through hold.lua (a
// permit of 1) and releases it through hold_release.lua, taking turns
// with the mutex's commands, in two sessions of
//
//	go test -run '^$' -bench ExclusiveHash -benchtime 3000x -count 3 ./redis/
//
// Without fences the hash ran at 0.53x to
// 0.77x the throughput of SET NX PX and release.lua (median 0.72x, six
// runs; p50 137 to 208 µs against 89 to 137), and with the fence minted
// at 0.79x to 0.90x the acquire script's (median 0.87x; a sixth run,
// disturbed, gave 1.26x); the server spends
// some 20 µs on hold.lua where a SET costs 1 to 2 µs, and 11 µs on
// hold_release.lua against 5 µs for release.lua (INFO commandstats on a
// private server). The mutex's figures above are unchanged by the shared
// holds: its SET NX path costs nothing more, and a busy key's take script
// asks the key's type only when the SET was refused.
//
// Values cost a holder without one nothing: its SET NX PX path is
// unchanged, and release.lua, refresh.lua and pttl.lua look into a hash
// only after their GET failed, with the library of the hash scripts put
// after that point so that the string key's path does not create it. In
// three alternating runs of the code before and after values (-bench
// 'Turns|ExclusiveHash' -benchtime 5000x, six ratios each), "setnx/raw"
// was 0.95x to 1.04x before and 0.96x to 1.01x after, and "scripts/raw"
// 0.75x to 0.90x before and 0.76x to 0.86x after: the acquire script's
// change notice (a PUBLISH, about half a microsecond of the server's
// time) is within the noise, as it no longer creates the library's
// closure on its fast path either.
//
// Before fences were minted on demand every acquisition ran the acquire
// script, and a Locker ran at 0.82x to 0.87x the raw pair with one client
// and 0.66x to 0.75x with 16 and 64. SET NX PX GET, which returns the
// holder's token in the same round trip, was measured and dropped:
// go-redis reports the free key's reply (nil) as an error, and its retry
// checks on that error allocate some twenty objects per acquisition; the
// script a busy SET NX is followed by costs that round trip only when the
// key is busy.
//
// A fence minted by INCR alone, floored by the clock only when the counter
// is missing, ran as fast as no fence at all, and was rejected: a replica
// promoted without the latest increments would hand out fences below the
// old master's. Flooring every fence by the clock is what keeps them
// increasing across such a failover (see Fencing tokens).
//
// Release notices by pub/sub were chosen over a per-key wake-up list:
// there Release also pushed to a list beside the lock key, and each waiter
// blocked on it with BLPOP on a connection of its own, so that the server
// woke exactly one waiter. BenchmarkHandoff compared the two designs on
// loopback, one key and 2 or 8 waiters, each with its own client and
// Locker, in two sessions of
//
//	go test -run '^$' -bench BenchmarkHandoff -benchtime 5000x -count 6 ./redis/
//
// on a machine of 2 CPUs shared with other jobs. Medians of each
// session's six runs (ratio: list over pub/sub; rows 1 and 3 are one
// session, rows 2 and 4 the other):
//
//	                 handoffs/s                    p50
//	waiters  pub/sub    list  ratio    pub/sub    list  ratio
//	      2    7,347  11,187   1.52     114 µs   77 µs   0.67
//	      2    6,980   8,066   1.16     126 µs   98 µs   0.78
//	      8    3,964   8,719   2.20     207 µs   97 µs   0.47
//	      8    5,339   5,920   1.11     159 µs  165 µs   1.04
//
// The list handed over 1.1 to 2.2 times as often, as it wakes one waiter
// where a notice wakes them all; the gap moved with the load on the
// machine. Pub/sub was the fairer with 8 waiters: the most acquisitions of
// one waiter over the fewest were 1.19 and 1.17 against 2.63 and 1.27, and
// in one run of the list 4 of the 8 waiters never acquired. The list was
// rejected, and removed, because it ties up a connection per waiting
// goroutine for as long as it waits: with go-redis's default pool of ten
// connections per CPU, a few dozen waiters in one process exhaust the
// pool, and the releases and refreshes that would let them in queue behind
// them. Both designs hand over well within a millisecond on loopback.
// BenchmarkHandoff goes on measuring the pub/sub design.
package redis
