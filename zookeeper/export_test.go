package zookeeper

import (
	"testing"
	"time"

	"github.com/distlock/locker/backend"
)

// NodeData is what the Locker writes into its lock nodes.
var NodeData = string(nodeData)

// EncodeKey is the key node name of lock key k.
func EncodeKey(k string) string { return encodeKey(k) }

// LockPrefix is the name, but for the sequence number the server appends,
// of a new lock node claiming c.
func LockPrefix(c backend.Claim) string { return protectedPrefix + newTag(c) + lockInfix }

// DecodeKey is the inverse of EncodeKey.
func DecodeKey(name string) (string, error) { return decodeKey(name) }

// Hooks observe the lock recipe from tests.
type Hooks struct {
	BeforeCreate func(prefix string)      // a protected create is about to be sent
	Created      func(path string)        // an acquisition's node was created, before its queue is judged
	Recovered    func(path string)        // a create whose reply was lost was found again
	FindFailed   func(err error)          // looking for that create could not reach the server
	Watching     func(self, pred string)  // a waiter set its watch on pred (the key node: a child watch)
	Listed       func(self string, n int) // a waiter listed the queue
	Pipelined    func(self string)        // the listing sent behind the create was used
	First        func(self string)        // the first node ever in its key node took the lock unlisted
	HandedOver   func(self string)        // the deletion of the only node ahead gave a waiter the lock unlisted
}

// SetHooks installs h for the rest of the test, or until restore is
// called. restore may be called more than once; it removes h only if no
// later SetHooks replaced it.
func SetHooks(t testing.TB, h Hooks) (restore func()) {
	p := &hooks{beforeCreate: h.BeforeCreate, created: h.Created, recovered: h.Recovered, findFailed: h.FindFailed, watching: h.Watching, listed: h.Listed, pipelined: h.Pipelined, first: h.First, handedOver: h.HandedOver}
	testHooks.Store(p)
	restore = func() { testHooks.CompareAndSwap(p, nil) }
	t.Cleanup(restore)
	return restore
}

// SetSessionIdle sets how long an unused session stays open, for the rest
// of the test.
func SetSessionIdle(t testing.TB, d time.Duration) {
	old := sessionIdle.Swap(int64(d))
	t.Cleanup(func() { sessionIdle.Store(old) })
}
