// Package redis is the lock backend for one Redis server (or one Sentinel
// failover group, or a Redis Cluster): the SET NX PX algorithm of the Redis
// distlock page, with fencing tokens, release notices and a watchdog.
//
// # Opening
//
// Import the package for its side effect and open by URL, or pass your own
// client to New (go-redis v9) or NewRedigo (redigo):
//
//	redis://[user:password@]host:port[/db]        one server, go-redis
//	rediss://...                                   the same over TLS
//	redis://host:port?client=redigo                one server, redigo
//	redis://h1:p1,h2:p2,h3:p3                      Redis Cluster (go-redis)
//
// Parameters besides the shared ttl and prefix: client (goredis, the
// default, or redigo), timeout (socket read/write timeout, a Go duration)
// and allow_eviction (see below). A Locker closes only clients it opened
// from a URL.
//
// # How a lock works
//
// Each operation is one Lua script, one round trip, run atomically by the
// server (EVALSHA, falling back to EVAL when the server has not seen the
// script):
//
//   - Acquire: SET key token NX PX ttl and, only if that succeeded, mint the
//     fencing token (below). A busy key answers with the holder's remaining
//     PTTL instead.
//   - Release: delete the key only if it still holds our token, and PUBLISH
//     a release notice.
//   - Refresh: PEXPIRE only if the key holds our token. TTL: PTTL likewise.
//
// No script ever changes a key that holds another token. Server keys are
// locker:{k:KEY}, locker:{k:KEY}:fence and so on: the braces are a Cluster
// hash tag, so a lock and its counter live in one slot.
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
// in the per-key counter. The counter makes it strictly increasing across
// holders; the clock floor keeps it increasing when the counter is lost,
// as it is when a server without persistence restarts, when a replica
// without the latest writes is promoted, or when an idle key's counter
// expires (it lives 24 hours after the last acquire). The floor holds as
// long as the server's clock does not step back by more than the time
// between two acquisitions of the key. Pass the fence to the resource you
// protect and have it reject a smaller one than it has seen: that, not the
// lock alone, is what keeps a paused or partitioned former holder from
// doing damage.
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
// The other design measured was a per-key wake-up list: Release pushes to
// it and waiters block on it with BLPOP, so the server wakes exactly one
// waiter. On loopback (BenchmarkHandoff) it hands the lock over about a
// fifth faster at the median (about 130 µs against 150-230 µs) because it
// wakes one waiter instead of all of them; with 8 waiters pub/sub was the
// fairer of the two (most to fewest acquisitions about 1.1 against 1.3).
// Pub/sub is kept because the list ties up one connection per waiting
// goroutine for as long as it waits: with go-redis's default pool of ten
// connections per CPU, a few dozen waiters in one process exhaust the pool,
// and the releases and refreshes that would let them in queue behind them.
// Pub/sub costs one connection per Locker whatever the number of waiters,
// and both designs hand over well within a millisecond on loopback.
// Neither is first-come first-served: Capabilities().FIFO is false.
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
// no cluster client. The watchdog refreshes the locks that fall due
// together in one pipeline per tick rather than one round trip each.
package redis
