package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector: every node's token and PTTL, asked
// of all nodes at once as a round is. The key is held when a majority of
// all nodes hold one token; TTL is then how long a majority still holds
// it (the quorum-th longest PTTL among them), as Lock.TTL counts it.
// There is no fence (see the package doc), and waiters are not counted:
// they wait for release notices, and nothing on the nodes lists them.
// Fewer than a majority of nodes answering is an error naming them.
//
// Detail: "key", the lock key on every node; per node, under its address,
// "token T, ttl D", "free" or its error; and, when any node holds the key,
// "majority": how many nodes hold which token.
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	states, errs := onEvery(ctx, d, func(ctx context.Context, i int) (redisconn.KeyState, error) {
		return redisconn.InspectKey(ctx, d.nodes[i].c, lockKey(key), "")
	})
	h := backend.Holder{Detail: map[string]string{"key": lockKey(key)}}
	var failed []string
	holders := map[string][]time.Duration{} // token: the remaining TTL on each node that holds it
	for i, n := range d.nodes {
		st := states[i]
		switch {
		case errs[i] != nil:
			h.Detail[n.addr] = "error: " + errs[i].Error()
			failed = append(failed, fmt.Sprintf("%s: %v", n.addr, errs[i]))
		case st.Token == "":
			h.Detail[n.addr] = "free"
		default:
			h.Detail[n.addr] = fmt.Sprintf("token %s, ttl %v", st.Token, nodeTTL(st))
			var ttl time.Duration = -1 // no TTL: counts as holding, but bounds nothing
			if st.TTLKnown {
				ttl = st.TTL
			}
			holders[st.Token] = append(holders[st.Token], ttl)
		}
	}
	if answered := len(d.nodes) - len(failed); answered < d.quorum {
		return backend.Holder{}, fmt.Errorf("redlock: inspect reached only %d of %d nodes, %d needed (%s)",
			answered, len(d.nodes), d.quorum, strings.Join(failed, "; "))
	}
	if len(holders) > 0 {
		h.Detail["majority"] = d.majority(holders)
	}
	for token, ttls := range holders {
		if len(ttls) < d.quorum {
			continue
		}
		h.Held, h.Token = true, token
		slices.Sort(ttls)
		slices.Reverse(ttls)
		if ttl := ttls[d.quorum-1]; ttl >= 0 {
			h.TTL, h.TTLKnown = ttl, true
		}
	}
	return h, nil
}

// nodeTTL formats a node's remaining TTL.
func nodeTTL(st redisconn.KeyState) string {
	if !st.TTLKnown {
		return "none"
	}
	return st.TTL.String()
}

// majority describes which tokens the nodes hold, most held first.
func (d *driver) majority(holders map[string][]time.Duration) string {
	tokens := make([]string, 0, len(holders))
	for t := range holders {
		tokens = append(tokens, t)
	}
	slices.SortFunc(tokens, func(a, b string) int { return len(holders[b]) - len(holders[a]) })
	var parts []string
	for _, t := range tokens {
		parts = append(parts, fmt.Sprintf("%d of %d nodes hold token %s", len(holders[t]), len(d.nodes), t))
	}
	s := strings.Join(parts, "; ")
	if len(holders[tokens[0]]) < d.quorum {
		s += fmt.Sprintf(" (no token on a majority of %d: nobody holds the lock; the copies expire with their TTL)", d.quorum)
	}
	return s
}

// ForceRelease implements backend.Inspector: on every node at once, it
// deletes the lock key whoever holds it and publishes the release notice
// a release does, so that waiters try again at once. A node that cannot
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
