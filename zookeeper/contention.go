package zookeeper

import "sync"

// contention remembers the keys (their key node paths) on which an
// acquisition of this Locker last had to wait. On those, the listing is
// not sent behind the create: where a queue is likely, it saves no round
// trip (a waiter lists again once woken) and costs the handoff some time,
// the freshly released key's next holder listing the queue at the moment
// the releaser's create and listing arrive (see Performance in the package
// doc). An acquisition that finds the key free forgets it again.
type contention struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// maxContended bounds the keys remembered; past it, all are forgotten.
const maxContended = 4096

// likely reports whether an acquisition of parent last had to wait.
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
	switch {
	case !queued:
		delete(c.keys, parent)
	case c.keys == nil || len(c.keys) >= maxContended:
		c.keys = map[string]struct{}{parent: {}}
	default:
		c.keys[parent] = struct{}{}
	}
}
