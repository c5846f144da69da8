package redlock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector: every node's holders with their
// PTTLs, asked of all nodes at once as a round is. A token is a holder
// when as many nodes hold it as its kind needs (quorumOf: a majority of
// all nodes, more for a semaphore's permits); its TTL is then how long
// that many nodes still hold it (the quorum-th longest PTTL among them),
// as Lock.TTL counts it. Holds lists every holder, with its kind (and a
// permit's limit and weight), by token: the nodes keep no grant order.
// Its value is the latest version among the nodes that hold its token:
// a SetValue that succeeded reached a quorum of them, and Inspect hears
// from a majority, so it reports that value or a later one (of a SetValue
// under way, or one that failed after it reached some nodes).
// There is no fence (see the package doc), and waiters are not counted:
// they wait for release notices, and nothing on the nodes lists them.
// Fewer than a majority of nodes answering is an error naming them.
//
// Detail: "redis key", the lock key on every node (named apart from the
// key Inspect was given); per node, under its address, "token T, ttl D"
// (a mutex's holder without a value), the family and
// each holder of a hash of holders ("shared: token A, ttl D; token B,
// ...", "permit 3: token A, weight 2, ttl D; ...", "exclusive: token A,
// ttl D, value N bytes"), "free" or its error; and,
// when any node holds the key, "majority": how many nodes hold which
// token.
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	states, errs := onEvery(ctx, d, func(ctx context.Context, i int) (redisconn.KeyState, error) {
		return redisconn.InspectKey(ctx, d.nodes[i].c, lockKey(key), "")
	})
	h := backend.Holder{Detail: map[string]string{"redis key": lockKey(key)}}
	var failed []string
	holders := map[string]*copies{} // by token
	for i, n := range d.nodes {
		if errs[i] != nil {
			h.Detail[n.addr] = "error: " + errs[i].Error()
			failed = append(failed, fmt.Sprintf("%s: %v", n.addr, errs[i]))
			continue
		}
		h.Detail[n.addr] = nodeDetail(states[i])
		for _, nh := range nodeHolds(states[i]) {
			c := holders[nh.Token]
			if c == nil {
				c = &copies{hold: nh.Hold, quorum: quorumOf(nh.Kind, nh.Limit, len(d.nodes)), version: nh.version}
				holders[nh.Token] = c
			}
			c.ttls = append(c.ttls, nh.TTL)
			if nh.version > c.version {
				c.version, c.hold.Value = nh.version, nh.Value
			}
		}
	}
	if answered := len(d.nodes) - len(failed); answered < d.quorum {
		return backend.Holder{}, fmt.Errorf("redlock: inspect reached only %d of %d nodes, %d needed (%s)",
			answered, len(d.nodes), d.quorum, strings.Join(failed, "; "))
	}
	if len(holders) > 0 {
		h.Detail["majority"] = d.majority(holders)
	}
	for _, token := range slices.Sorted(maps.Keys(holders)) {
		if hold, ok := holders[token].held(); ok {
			h.Holds = append(h.Holds, hold)
		}
	}
	if len(h.Holds) > 0 {
		first := h.Holds[0]
		h.Held, h.Token, h.Value = true, first.Token, first.Value
		h.TTL, h.TTLKnown = first.TTL, first.TTLKnown
	}
	return h, nil
}

// copies are the copies of one token's hold on the nodes.
type copies struct {
	hold   backend.Hold    // as the first node that has it tells
	quorum int             // how many nodes must hold it
	ttls   []time.Duration // on each node that holds it; -1 for no TTL
	// version is the latest version of the value among the nodes that
	// hold it, whose value hold.Value is.
	version uint64
}

// held returns the hold, if enough nodes hold it, with the TTL that many
// nodes still keep it.
func (c *copies) held() (backend.Hold, bool) {
	if len(c.ttls) < c.quorum {
		return backend.Hold{}, false
	}
	h := c.hold
	ttls := slices.Sorted(slices.Values(c.ttls))
	slices.Reverse(ttls)
	h.TTL, h.TTLKnown = 0, false
	if ttl := ttls[c.quorum-1]; ttl >= 0 {
		h.TTL, h.TTLKnown = ttl, true
	}
	return h, true
}

// nodeHold is one node's copy of a hold, with the version of its value
// (0 for none).
type nodeHold struct {
	backend.Hold
	version uint64
}

// nodeHolds returns the holds one node has of the key: its mutex's holder
// without a value, or the holders in its hash of holders; TTL -1 for a
// key without one.
func nodeHolds(st redisconn.KeyState) []nodeHold {
	if st.Token != "" {
		ttl := time.Duration(-1) // no TTL: counts as holding, but bounds nothing
		if st.TTLKnown {
			ttl = st.TTL
		}
		return []nodeHold{{Hold: backend.Hold{Kind: backend.Exclusive, Token: st.Token, TTL: ttl}}}
	}
	var out []nodeHold
	for _, s := range st.Holds {
		h := backend.Hold{Kind: st.Kind, Token: s.Token, TTL: s.TTL, Value: s.Value}
		if st.Kind == backend.Permit {
			h.Limit, h.Weight = st.Limit, s.Weight
		}
		out = append(out, nodeHold{h, s.Version})
	}
	return out
}

// nodeDetail describes what one node holds of the key.
func nodeDetail(st redisconn.KeyState) string {
	switch {
	case st.Token != "":
		return fmt.Sprintf("token %s, ttl %v", st.Token, nodeTTL(st))
	case len(st.Holds) == 0:
		return "free"
	}
	family := st.Kind.String()
	if st.Kind == backend.Permit {
		family = fmt.Sprintf("permit %d", st.Limit)
	}
	var parts []string
	for _, h := range st.Holds {
		part := fmt.Sprintf("token %s, ttl %v", h.Token, h.TTL)
		if st.Kind == backend.Permit {
			part = fmt.Sprintf("token %s, weight %d, ttl %v", h.Token, h.Weight, h.TTL)
		}
		if len(h.Value) > 0 {
			part += fmt.Sprintf(", value %d bytes", len(h.Value))
		}
		parts = append(parts, part)
	}
	return family + ": " + strings.Join(parts, "; ")
}

// nodeTTL formats a node's remaining TTL.
func nodeTTL(st redisconn.KeyState) string {
	if !st.TTLKnown {
		return "none"
	}
	return st.TTL.String()
}

// majority describes which tokens the nodes hold, most held first.
func (d *driver) majority(holders map[string]*copies) string {
	tokens := slices.Sorted(maps.Keys(holders))
	slices.SortStableFunc(tokens, func(a, b string) int { return len(holders[b].ttls) - len(holders[a].ttls) })
	var parts []string
	enough := false
	for _, t := range tokens {
		c := holders[t]
		part := fmt.Sprintf("%d of %d nodes hold token %s", len(c.ttls), len(d.nodes), t)
		if c.quorum != d.quorum {
			part += fmt.Sprintf(" (a permit of a semaphore of %d, which needs %d)", c.hold.Limit, c.quorum)
		}
		parts = append(parts, part)
		enough = enough || len(c.ttls) >= c.quorum
	}
	s := strings.Join(parts, "; ")
	if !enough {
		s += fmt.Sprintf(" (no token on a majority of %d: nobody holds the lock; the copies expire with their TTL)", d.quorum)
	}
	return s
}

// ForceRelease implements backend.Inspector: on every node at once, it
// deletes the lock key whoever holds it (every shared or permit holder
// with it) and publishes the release notice a release does, so that
// waiters try again at once. A node that cannot
// be reached (or is skipped as down) is named in the error, and released
// reports whether any node deleted a lock: the copies left on unreachable
// nodes expire with their TTL and, on a minority of nodes, block no one.
// The holder learns of it at its next refresh, which finds no majority of
// nodes holding its token and closes its Lost.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	deleted, errs := onEvery(ctx, d, func(ctx context.Context, i int) (bool, error) {
		return redisconn.ForceRelease(ctx, d.nodes[i].c, lockKey(key), channelOf(key))
	})
	released := slices.Contains(deleted, true)
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", d.nodes[i].addr, err))
		}
	}
	if len(failed) > 0 {
		return released, fmt.Errorf("redlock: force release reached %d of %d nodes; on the others a copy of the lock, if any, lasts until its TTL (%s)",
			len(d.nodes)-len(failed), len(d.nodes), strings.Join(failed, "; "))
	}
	return released, nil
}
