package zookeeper

import "sync"

// contention remembers the keys (their key node paths) on which an
// acquisition of this Locker recently had to wait. On those, the listing
// is not sent behind the create: where a queue is likely, it saves no
// round trip (a waiter lists again once woken) and costs the handoff some
// time, the freshly released key's next holder listing the queue at the
// moment the releaser's create and listing arrive (see Performance in the
// package doc). A key is forgotten once forgetAfter acquisitions in a row
// found it free: a key handed back and forth finds it free every other
// time or so, and stays remembered.
type contention struct {
	mu   sync.Mutex
	keys map[string]int // key node path: acquisitions in a row that found it free since one waited
}

const (
	// maxContended bounds the keys remembered; past it, all are forgotten.
	maxContended = 4096
	// forgetAfter is how many acquisitions in a row must find a key free
	// for it to be forgotten.
	forgetAfter = 8
)

// likely reports whether an acquisition of parent recently had to wait.
func (c *contention) likely(parent string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.keys[parent]
	return ok
}

// saw records whether an acquisition of parent found others queued ahead.
func (c *contention) saw(parent string, queued bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	free, ok := c.keys[parent]
	switch {
	case !queued && !ok:
	case !queued && free+1 >= forgetAfter:
		delete(c.keys, parent)
	case !queued:
		c.keys[parent] = free + 1
	case ok:
		c.keys[parent] = 0
	case c.keys == nil || len(c.keys) >= maxContended:
		c.keys = map[string]int{parent: 0}
	default:
		c.keys[parent] = 0
	}
}
