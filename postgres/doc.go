// Package postgres is the PostgreSQL lock backend: locks as lease rows in
// a table of the database an application already runs, with TTLs on the
// server's clock, fencing tokens from a sequence, and waiters woken by
// LISTEN/NOTIFY. It is written against package backend alone, on
// github.com/jackc/pgx/v5.
//
// # URLs
//
//	postgres://[user[:password]@]host[:port][/database][?param=value&...]
//	postgresql://...
//
// The URL is pgx's connection string (sslmode, pool_max_conns,
// application_name, target_session_attrs and the rest; a parameter pgx
// does not know is sent to the server as a setting, which the server
// refuses at connect when it knows no such setting), plus the shared ttl
// and prefix, and:
//
//	schema=locker          the schema of the lock tables (DefaultSchema)
//	create_schema=true     create missing tables at Open (false: fail, naming
//	                       the SQL to run)
//	sweep_interval=1m      how often lapsed rows are deleted
//
// [New] takes an application's own *pgxpool.Pool instead, and does not
// close it.
//
// # The tables
//
// Open creates, when they are missing and the role may, a schema with
// three tables, a sequence and three functions ([SchemaSQL] prints them;
// so does `lockctl schema`). Where the role may not, Open fails with an
// error that says so and what to run. Open then checks, in the same
// round trip as it looks for them, that the role may use the schema and
// every object (USAGE on the schema and the sequence, SELECT, INSERT,
// UPDATE and DELETE on the tables, EXECUTE on the functions), and fails
// naming what it lacks and the GRANTs to run ([GrantSQL]; `lockctl schema
// --grant ROLE` prints them after the schema's SQL), rather than at the
// first acquisition. The functions' names carry a version (acquire_v2),
// so that a later version of this package can add its own beside them
// while clients of both run: version 2 added writer_marks and the _v2
// functions, and running SchemaSQL on a version 1 schema adds them (the
// role then needs the grants on writer_marks). Clients of version 1 keep
// calling the _v1 functions, which ignore writer marks: their readers may
// still come in ahead of a waiting writer, which delays the writer but
// breaks no lock.
//
//   - locks: one row per key while it is held (or was, until a sweep).
//     For a mutex the row is the hold: the holder's token, its value, its
//     fence (once minted) and its expiry, a timestamptz on the server's
//     clock. A row whose expiry has passed is free, whatever else it says.
//   - holds: a read/write lock's shared holds and a semaphore's permits,
//     one row each, with their own expiries and fences; the key's row in
//     locks then names the family (kind and limit) and carries the latest
//     expiry of its holds, so that a mutex or writer request sees the key
//     taken while any of them is live.
//   - writer_marks: a row per writer waiting for a key that shared holds
//     keep from it (see Waiting), with an expiry on the server's clock.
//   - fences: the sequence every fence comes from.
//
// # Acquire, refresh, release
//
// A mutex is taken by one statement, as a raw INSERT is:
//
//	INSERT INTO locks ... VALUES (key, token, value, clock_timestamp() + ttl)
//	ON CONFLICT (key) DO UPDATE SET token = ..., expires_at = ...
//	WHERE locks.expires_at <= clock_timestamp()
//	RETURNING 1
//
// No row back means the key is taken: a second statement reads the
// holder's remaining TTL (how long a waiter may sleep at most) and marks
// the row waited for. Release deletes the row if the token is ours, and
// notifies the schema's channel when the row was waited for, so a release
// nobody waits for costs no NOTIFY (whose commit serializes on a lock
// shared by the whole server). Refresh updates the expiry if the token is
// ours and the lease has not lapsed; the watchdog's refreshes of many
// locks are one UPDATE over unnest() of their keys, tokens and TTLs, with
// the shared and permit holds' function call pipelined beside it.
//
// Shared and permit holds, and a mutex whose fence is minted with its
// grant, are taken by the function acquire_v2 in one call: it locks the
// key's row (creating it when missing), drops lapsed holds, checks the
// family and the room by package backend's admission rule, and inserts
// the hold with a fence from the sequence.
//
// A request whose reply is lost, or whose context ends while it is on the
// wire, may have been applied: the driver then deletes the row or hold by
// its token before returning the error, so that nothing is left behind to
// block the next owner.
//
// Expired rows do not accumulate: every Locker deletes, every
// sweep_interval, up to a thousand rows that lapsed more than a second ago
// (re-checked under each row's lock, so a row taken meanwhile stays), and
// a takeover overwrites the lapsed row it finds.
//
// # Fences
//
// Fences come from one sequence per schema. A fence is minted while the
// key's row is locked by the statement that mints it (acquire_v2, or the
// UPDATE of MintFence, which re-checks its token on the row version it
// updates), so every grant on a key between two fences is ordered between
// them: fences increase with grants per key, across kinds and across
// server restarts (a sequence never goes back on one server; after a
// crash it may skip values). A mutex taken by the one-statement INSERT
// mints its fence only when asked for (Lock.Fence), with an UPDATE that
// checks the token; from then on that Locker's exclusive acquisitions mint
// theirs with the grant, in acquire_v2, at no extra round trip.
//
// A failover to an asynchronous replica breaks both mutual exclusion and
// fences, as it does for Redis with Sentinel: rows and sequence values the
// old primary granted but had not yet sent are lost, so the promoted
// replica may grant a held key again, and hand out fences the old primary
// already handed out. Use synchronous replication (synchronous_commit =
// on or remote_apply with synchronous_standby_names) where a failover must
// not lose locks; `lockctl doctor` says which a deployment has, and
// `lockctl chaos` counts what a failover does.
//
// # Waiting
//
// Waiters are woken by NOTIFY on the release of a key they found taken,
// over one connection per Locker that LISTENs (dialled from the pool's
// configuration, on the first wait): the release of a key nobody waits for
// notifies no one. A waiter is not woken by a holder's expiry: it tries
// again when the holder's remaining TTL, as read when it found the key
// taken, has passed. Waiters are not queued: Capabilities().FIFO is false.
//
// A writer is not starved by readers that overlap: a waiting Acquire of
// the write lock that shared holds keep out leaves a writer-waiting mark
// (a row of writer_marks), and while a live mark is there acquire_v2
// refuses new shared holds; the readers that hold the key keep their
// holds and refresh them, and the writer gets the key when the last of
// them leaves (its release notifies). Several writers may wait, each with
// its mark; writers are not held back by marks, only readers. The mark
// expires at the writer's TTL after its latest attempt, and a waiting
// writer tries again within a third of its TTL, which keeps it alive; the
// writer's grant removes it, and so does the end of its wait by a cancel
// or Close (a DELETE that also wakes the readers it kept out, sent as the
// Acquire returns). A writer that crashes while it waits keeps readers out
// for no more than its TTL after its last attempt. TryAcquire leaves no
// mark. As with every writer-preferring read/write lock, a reader that
// already holds the key and asks for it again (without the owner that
// makes the request reentrant) while a writer waits waits for that writer,
// which waits for the reader: its Acquire ends only with its context.
//
// # Through a pooler
//
// Through a pooler in transaction mode (PgBouncer pool_mode=transaction)
// locks work, since every statement stands alone (a batch of refreshes is
// one implicit transaction), with two settings: pgx must not keep prepared
// statements on a server connection the pooler hands to others
// (default_query_exec_mode=exec or simple_protocol in the URL; the
// conformance suite runs in simple_protocol too), and LISTEN needs a
// session, so the listening connection must reach the server directly, or
// waiters wake only at the holder's expiry. A statement abandoned on the
// wire is then cleaned up by its token alone: the process id a pooled
// connection reports is the pooler's, and the driver terminates a server
// process only when it runs one of the driver's own acquisitions.
//
// # Losing a lock
//
// PostgreSQL tells no one that a lease lapsed: Lost closes at the lock's
// local validity (its TTL less the clock-drift allowance, counted from
// before the request that took or last refreshed it), or when a refresh
// finds the row gone or taken. A holder cut off from the server keeps
// its lock until that validity ends, and the server frees the row at its
// TTL, on its own clock.
//
// # Elections
//
// Values live in the row (or the hold), and SetValue notifies. A grant
// does not: package locker's Election announces its leader with SetValue,
// which observers hear. An observer marks the key's row waited for, so
// that the leader's release notifies it; an expiry is seen when the
// leader's TTL, as Inspect reported it, has passed.
//
// # Performance
//
// A mutex costs what the raw pair costs in statements: one INSERT to take
// it, one DELETE to release it, one round trip each, and a refresh is a
// row update, batched with the Locker's other due locks into one UPDATE.
// `make bench` (docs/benchmarks.md) measured the Locker at 0.92x the raw
// INSERT/DELETE pair uncontended on loopback, the rest being the
// client's own work around the statements that every backend shares (a
// token, the watchdog's registration, contexts that Close can cancel and
// that pgx watches during each statement); a key handed between waiters
// costs one notifying release and one take. A mutex whose fence is
// minted with its grant (once a Locker's lock asked for a fence) goes
// through acquire_v2, a plpgsql call: about 0.65x the raw pair
// (BenchmarkAcquireRelease/fenced and BenchmarkTurns in this package).
//
// Each refresh writes a row: 100,000 locks at a 3 s TTL are about 100,000
// row updates a second, beyond a two-core machine that also runs the
// client (internal/heldtest skips that case there); at the default 30 s
// TTL, 100,000 locks were held with none lost.
//
// # Advisory locks
//
// PostgreSQL's session-level advisory locks (pg_try_advisory_lock) are the
// raw baseline `lockctl bench` measures, not a mode of this package: they
// live as long as the session, not a TTL, so a holder that is paused or cut
// off keeps its lock until its connection is closed (which a half-open
// TCP connection may delay for as long as the server's keepalive settings
// allow), they carry no fence, and a pooler in transaction mode gives
// them to whichever client next uses the connection.
package postgres
