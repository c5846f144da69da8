package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redisconn"
)

func init() {
	locker.RegisterDiagnoser("redlock", diagnose)
	locker.RegisterDiagnoser("redlocks", diagnose)
}

// diagnose is the locker.Diagnoser of redlock:// and redlocks:// URLs. It
// reads them as open does, with open's errors, then checks the TTL
// against the backend's range and drift rule, the nodes as a whole (how
// many, how many answer, whether they are distinct servers, how far
// apart their clocks are) and each node as the redis backend
// checks its server, plus its round trip against node_timeout.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	o, hosts, co, err := readURL(u)
	if err != nil {
		return nil, err
	}
	set, err := o.settings()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			return nil, fmt.Errorf("redlock: host %s is listed twice: the nodes must be independent", h)
		}
		seen[h] = true
		if err := co.CheckClient([]string{h}); err != nil {
			return nil, fmt.Errorf("redlock: %w", err)
		}
	}
	ttl := u.DefaultTTL()
	c := redisconn.Checkup{Options: co, TTL: ttl, AllowEviction: o.AllowEviction, Kind: redisconn.KindRedlock}
	nodes := c.Inspect(ctx, hosts)
	fs := []locker.Finding{
		// The driver's range and drift rule are static: a driver with no
		// node tells them.
		locker.TTLFinding(&driver{cfg: set}, ttl),
		nodeCount(len(hosts), o.AllowFewNodes),
		quorum(nodes),
		independence(nodes),
		clockSkew(nodes, ttl, set),
	}
	for _, n := range nodes {
		fs = append(fs, c.Findings(n)...)
		if n.Err == nil {
			fs = append(fs, nodeTimeout(n, set.nodeTimeout))
		}
	}
	return fs, nil
}

// target names all the nodes, for findings about them as a whole.
func target(nodes []*redisconn.Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// nodeCount judges how many failures the nodes tolerate, as checkNodes
// does at Open.
func nodeCount(n int, allowFew bool) locker.Finding {
	f := locker.Finding{Check: "nodes"}
	q := n/2 + 1
	switch {
	case n < 3:
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("%d node(s), fewer than the 3 that tolerate one failure: with %d, a single node down stops all locking", n, n)
		f.Fix = "list at least 3 independent masters (5 tolerate two failures)"
		if allowFew {
			f.Status = locker.Warn
			f.Detail += "; the URL accepts this (allow_few_nodes=true)"
		}
	case n%2 == 0:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("%d nodes, an even number: the majority is %d, so they tolerate %d failure(s), no more than %d nodes would", n, q, n-q, n-1)
		f.Fix = fmt.Sprintf("use an odd number of nodes: %d, or %d", n-1, n+1)
	default:
		f.Detail = fmt.Sprintf("%d nodes: a majority is %d, so they tolerate %d failure(s)", n, q, n-q)
	}
	return f
}

// quorum judges whether a majority of the nodes answer: without one, no
// lock can be acquired.
func quorum(nodes []*redisconn.Node) locker.Finding {
	up := 0
	for _, n := range nodes {
		if n.Err == nil {
			up++
		}
	}
	q := len(nodes)/2 + 1
	f := locker.Finding{Check: "quorum", Target: target(nodes),
		Detail: fmt.Sprintf("%d of %d nodes answer; a lock needs a majority of %d", up, len(nodes), q)}
	if up < q {
		f.Status = locker.Fail
		f.Detail += ": no lock can be acquired or refreshed"
		f.Fix = "bring the unreachable nodes back (see their reachable findings)"
	}
	return f
}

// independence fails when two addresses reach one server (the same
// run_id): Redlock would count one server's vote twice.
func independence(nodes []*redisconn.Node) locker.Finding {
	f := locker.Finding{Check: "independence", Target: target(nodes)}
	byRun := map[string][]string{}
	var runs []string
	for _, n := range nodes {
		if n.Err != nil || n.RunID == "" {
			continue
		}
		if byRun[n.RunID] == nil {
			runs = append(runs, n.RunID)
		}
		byRun[n.RunID] = append(byRun[n.RunID], n.Addr)
	}
	var same []string
	for _, r := range runs {
		if len(byRun[r]) > 1 {
			same = append(same, strings.Join(byRun[r], " and "))
		}
	}
	if len(same) == 0 {
		f.Detail = fmt.Sprintf("the %d nodes that answer are distinct servers (distinct run_id)", len(runs))
		return f
	}
	f.Status = locker.Fail
	f.Detail = fmt.Sprintf("%s are one server (the same run_id): Redlock counts its vote once per address, so a majority of addresses can be a minority of servers, and two clients can hold one lock", strings.Join(same, "; "))
	f.Fix = "list each independent master once, by one address"
	return f
}

// clockSkew compares the nodes' clocks, read with TIME. Redis expires keys
// by its wall clock, and Redlock allows for clock drift by TTL x
// drift_factor + min_drift (settings.drift): clocks further apart than
// that point at nodes without time synchronisation, whose clocks drift and
// get stepped, and a step forward expires a lock early on that node.
func clockSkew(nodes []*redisconn.Node, ttl time.Duration, set settings) locker.Finding {
	f := locker.Finding{Check: "clock-skew", Target: target(nodes)}
	var timed []*redisconn.Node
	for _, n := range nodes {
		if n.Err == nil && n.ClockErr == nil {
			timed = append(timed, n)
		}
	}
	if len(timed) < 2 {
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("%d node(s) answered TIME: too few to compare clocks", len(timed))
		f.Fix = "bring the unreachable nodes back, and run the check again"
		return f
	}
	byOffset := func(a, b *redisconn.Node) int { return int(a.Offset - b.Offset) }
	lo, hi := slices.MinFunc(timed, byOffset), slices.MaxFunc(timed, byOffset)
	spread, within := hi.Offset-lo.Offset, hi.Uncertainty+lo.Uncertainty
	drift := time.Duration(float64(ttl)*set.driftFactor) + set.minDrift
	f.Detail = fmt.Sprintf("the nodes' clocks span %v (±%v: %s is furthest ahead, %s furthest behind); Redlock's drift allowance for the TTL %v is %v (TTL x drift_factor %g + min_drift %v)",
		spread.Round(time.Microsecond), within.Round(time.Microsecond), hi.Addr, lo.Addr, ttl, drift, set.driftFactor, set.minDrift)
	if spread-within > drift {
		f.Status = locker.Warn
		f.Detail += ": clocks this far apart are not synchronised, so they drift and get stepped, and Redis expires keys by its wall clock: a clock stepped forward expires a lock early on its node, and a second client can gather a majority while the first still counts on it"
		f.Fix = "synchronise the nodes' clocks (chrony or ntpd, slewing rather than stepping); or raise drift_factor or min_drift to cover the gap"
	}
	return f
}

// nodeTimeout judges a node's round trip against node_timeout, which
// bounds each node's part of a round: a node slower than that never
// answers in time, and counts as down in every round.
func nodeTimeout(n *redisconn.Node, limit time.Duration) locker.Finding {
	f := locker.Finding{Check: "node-timeout", Target: n.Addr,
		Detail: fmt.Sprintf("round trip %v against node_timeout %v", n.RTT.Round(time.Microsecond), limit)}
	switch {
	case n.RTT >= limit:
		f.Status = locker.Fail
		f.Detail += ": every request to the node times out, so it counts as down in every round"
		f.Fix = fmt.Sprintf("raise node_timeout to at least %v (four round trips), or run the clients nearer the node", 4*n.RTT)
	case n.RTT > limit/4:
		f.Status = locker.Warn
		f.Detail += ": more than a quarter of it, so a slow moment makes the node miss rounds"
		f.Fix = fmt.Sprintf("raise node_timeout to at least %v (four round trips), or run the clients nearer the node", 4*n.RTT)
	}
	return f
}
