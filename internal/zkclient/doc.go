// Package zkclient is the ZooKeeper client the zookeeper backend opens its
// sessions with: the part of the protocol a lock needs, written for it in
// this project from the ZooKeeper programmer's guide and the jute record
// definitions (zookeeper.jute), for ZooKeeper 3.5 or later.
//
// It speaks go-zookeeper's data types and errors (Stat, ACL, Event,
// MultiResponse, the request types of Multi, ErrNoNode and the rest),
// imported from that module, so that the backend handles a connection of
// either client the same way, and code compares errors with errors.Is
// across both. Only the connection is its own.
//
// # Why not go-zookeeper's connection
//
// What the backend needs and go-zookeeper v1.0.4 (the latest release) does
// not give:
//
//   - The session timeout the server granted, on every connect and
//     reconnect, before anything is sent on the new connection
//     (Config.OnChange with StateConnected): a lock's TTL is its session's
//     timeout, and a server may grant another one on a reconnect.
//   - A create's czxid, the lock's fence, from the create's own reply: the
//     backend's creates are create2 requests (opcode 15), whose reply
//     carries the new node's Stat.
//   - Requests pipelined on the connection: a listing sent in the same
//     write as the create it follows (CreateAndList) or the sync it
//     follows (SyncChildrenStop), several reads or data watches in one
//     round trip (GetAll, GetWAll).
//   - Requests a caller can stop waiting for, when its context or its
//     session epoch ends (Stop), without a goroutine per request.
//   - No data race across a reconnect: go-zookeeper's connection loop
//     reads the last zxid seen, to set watches again, while the new
//     connection's receive loop may be writing it from a reply (upstream
//     pull request 35, not in a release). Here the connection's goroutine
//     alone reads replies, keeps the last zxid, sets and fires the
//     watches, and sets them again before any queued request goes out.
//
// # How it works
//
// A Conn is one goroutine per session. It dials a server (the list
// shuffled, then in turn), opens or resumes the session, reports the grant
// (OnChange), and opens the connection to requests: credentials first,
// then SetWatches for every watch of the session's (from the last
// zxid seen, so that the server fires at once those whose node changed
// meanwhile), then whatever waited for a connection, in one write. It then
// reads the connection until it fails, pinging the server when nothing was
// sent for a third of the granted timeout and giving up on a server silent
// for two thirds, and connects again. A dial and handshake may take the
// session timeout shared among the servers (at least a second), as in the
// Java client: on a link slower than two thirds of the timeout,
// connections keep dropping for silence, but each reconnect resumes the
// session and what is sent on it is applied. The answer to the session
// request is waited for less, though: an eighth of that (at least a
// second), or three times the round trip the link last showed (its latest
// handshake, or the silence that dropped the connection) if longer, and
// twice as long after each request left unanswered: a starting ZooKeeper
// server may accept a connection and never answer it, and the session
// must not spend its whole timeout on that one. A connection that lasted
// less than a second is followed by a pause (10 ms, doubling up to a
// second), and so is a pass over the servers that all failed.
//
// A caller's request is encoded on the caller's goroutine and written by
// it, under a mutex that also hands out the xid and appends the request to
// the queue of those awaiting a reply: the server answers a session's
// requests in the order they arrive, so a reply belongs to the head of
// that queue (a reply for another xid ends the connection as a protocol
// error). Each request is completed exactly once: by its reply, by the
// connection's end (ErrConnectionClosed: its outcome is unknown), by a
// whole pass over the servers failing while it waited for a connection
// (ErrNoServer: not sent), by the session's expiry (ErrSessionExpired:
// not sent) or by Close (ErrClosing).
//
// A data watch (GetW, GetWAll) fires once, on a change of the node's data
// or its deletion, and outlives a dropped connection; so does a child
// watch (ChildrenW), on a child created or deleted, or the node's
// deletion: the backend's semaphore waiters wait with one for any holder
// to leave, and its observers of a key for any change of the queue. An
// exists watch (ExistsW) on a node that does not exist fires when it is
// created: an observer of a key whose node is not there yet waits with
// one. When the session expires or the Conn is closed, the watch gets
// EventNotWatching instead. After an expiry the Conn opens a new session
// by itself (StateExpired, then StateConnected with another session id).
// Unwatch takes a watch its caller no longer waits for out of the
// session's, so that a watch on a node that never changes does not stay
// in memory for the session's life; ZooKeeper's removeWatches request is
// left out, and the server's watch goes when it fires or when the
// connection drops (the watches set again on the next are the Conn's).
//
// Bytes from the server are decoded with every length checked against
// what is left of the packet: a malformed reply or packet ends the
// connection (ErrProtocol), never the process (FuzzDispatch). So does a
// reply whose meaning contradicts its request: a create's path that the
// create cannot have made (CheckCreated, FuzzCheckCreated), a sync's path
// that is not the one synced, a child's name holding a slash. Its request
// fails as one whose reply was lost (ErrConnectionClosed): the server's
// word on it is not to be believed.
//
// Left out, as the backend does not use them: read-only sessions, chroot,
// SASL, persistent watches, removeWatches, TTL nodes, reconfig.
package zkclient
