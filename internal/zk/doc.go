// Package zk is the ZooKeeper client the zookeeper backend talks through:
// github.com/go-zookeeper/zk v1.0.4 (BSD-3-Clause, see LICENSE in this
// directory), copied here so that a defect of the released client can be
// fixed without waiting for a release.
//
// Taken from v1.0.4: conn.go, constants.go, create_mode.go,
// dnshostprovider.go, structs.go, util.go. Left out: the lock recipe
// (lock.go; the backend has its own) and the four-letter-word commands
// (flw.go).
//
// So that the backend can take an application's own go-zookeeper
// connection as well as one of these, every data type, state, flag,
// permission and error is an alias of go-zookeeper's (alias.go) instead of
// a type of its own; the error-code table maps to those errors
// (codeError, upstream's toError), and the struct literals that built the
// removed types are keyed.
//
// Changes from v1.0.4, each a defect of the released client:
//
//   - Conn.lastZxid is an atomic.Int64. On every reconnect the connection
//     loop reads it (to re-register watches) while the new connection's
//     receive loop may already be writing it from a reply: a data race,
//     reported by the race detector whenever a lock waiter's watch and a
//     request in flight meet a reconnect (upstream pull request 35, open
//     since 2020, not in a release).
//
// Additions, in locker.go, for what the lock backend needs and
// go-zookeeper's API does not give: WithSessionGranted (the session timeout
// granted on each connect) and Conn.CreateAndList (a create's zxid and
// session, and a listing sent behind it without waiting for its reply).
// They replace reading these off the wire under the client. Conn.GetWAll
// sets several data watches in one round trip. And a Stop for the
// requests on a lock's path (CreateAndList, ChildrenStop, GetWAll,
// DeleteStop): a caller whose context or session epoch ends
// stops waiting for the reply at once, without a goroutine per request to
// make that possible.
//
// Keep the copy close to upstream: change it only to fix a defect or to
// add what the backend needs, and list the change above.
package zk
