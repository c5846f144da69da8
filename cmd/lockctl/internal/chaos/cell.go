package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// cell runs sc's rounds on d and judges them.
func (e *engine) cell(ctx context.Context, sc *Scenario, d *deployment) Cell {
	c := Cell{Scenario: sc.Name, Backend: d.label, Rounds: e.o.Rounds}
	for i := range e.o.Rounds {
		if ctx.Err() != nil {
			break
		}
		e.progress(d, fmt.Sprintf("%s on %s, round %d of %d", sc.Name, d.label, i+1, e.o.Rounds))
		res := e.round(ctx, sc, d, i)
		e.roundEnded(d)
		c.History = append(c.History, res)
		c.Counts.add(res.Counts)
		if res.Recovered {
			c.Recovered++
		}
		if res.Counts.StaleAccepted > 0 {
			c.StaleRounds++
		}
		c.NewHolder = max(c.NewHolder, res.NewHolder)
		if res.Err != "" {
			c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", i+1, res.Err))
		}
	}
	if len(c.History) > 0 {
		c.Example = &c.History[0]
	}
	for i := range c.History {
		if c.History[i].Counts.StaleAccepted > 0 {
			c.Example = &c.History[i]
			break
		}
	}
	if sc.Bounded {
		c.Bound = d.ttl + d.slack + expiryMargin
	}
	c.judge(expectation{violates: slices.Contains(sc.Violates, d.backend), fencing: d.fencing,
		keeps: slices.Contains(sc.Keeps, d.backend), loses: slices.Contains(sc.Loses, d.backend)})
	return c
}

// round runs one round of sc on d, on servers of its own where sc
// restarts servers.
func (e *engine) round(ctx context.Context, sc *Scenario, d *deployment, i int) RoundResult {
	key := fmt.Sprintf("lockctl-chaos/%s/%s/%s/%d", e.id, sc.Name, d.label, i)
	dd := *d
	dd.bare = sc.Bare
	stop, err := e.ownServers(ctx, sc.Servers, &dd)
	defer stop()
	if err != nil {
		return RoundResult{Err: err.Error()}
	}
	r := newRound(key, dd.url, dd.ttl, dd.slack, e.spawn, dd.fencing)
	r.started = e.track
	err = sc.run(ctx, r, &dd)
	r.stopAll()
	res := r.outcome()
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// ownServers starts the servers of set for d, pointing d's URL at them,
// and returns what stops them.
func (e *engine) ownServers(ctx context.Context, set serverSet, d *deployment) (stop func(), err error) {
	switch set {
	case givenServers:
		return func() {}, nil
	case ownCluster:
		c, err := e.startCluster(ctx, d.backend)
		if c == nil {
			return func() {}, err
		}
		d.url, d.cluster = c.url(), c
		return c.stop, err
	}
	if d.backend == "postgres" {
		servers, url, err := e.pgServersFor(ctx, set)
		d.url, d.pg = url, servers
		return func() { stopPG(servers) }, err
	}
	bin, err := findRedisServer(e.o.RedisServer)
	if err != nil {
		return func() {}, err
	}
	servers, url, err := ownServersFor(ctx, set, d.backend, bin, e.dir)
	d.url, d.servers = url, servers
	return func() { stopServers(servers) }, err
}

// startCluster starts a three-member cluster of backend (etcd or
// zookeeper) and waits for its leader.
func (e *engine) startCluster(ctx context.Context, backend string) (*cluster, error) {
	var c *cluster
	var err error
	switch backend {
	case "etcd":
		var bin string
		if bin, err = findEtcd(e.o.Etcd); err == nil {
			c, err = etcdCluster(bin, e.dir)
		}
	case "zookeeper":
		var cp string
		if cp, err = findZK(e.o.ZKClasspath); err == nil {
			c, err = zkEnsemble(cp, e.dir)
		}
	default:
		err = fmt.Errorf("no cluster of %s", backend)
	}
	if err == nil {
		_, err = c.leader(ctx, 90*time.Second)
	}
	return c, err
}

// lateRounds counts the rounds of a Bounded cell whose rival got the key
// only after the bound.
func (c *Cell) lateRounds() int {
	n := 0
	for _, h := range c.History {
		if c.Bound > 0 && h.NewHolder > c.Bound {
			n++
		}
	}
	return n
}

// expectation is what a cell's scenario and backend promise (see
// Scenario.Violates, Keeps and Loses).
type expectation struct {
	violates bool // a stale write accepted in every round: the backend cannot fence
	fencing  bool // the backend fences
	keeps    bool // the lock survives the fault: no second holder
	loses    bool // the fault loses the lock and its fence, in every round
}

// judge sets the cell's expectation and verdict. What must hold
// everywhere: the key can be taken again once the faults clear, and,
// unless the fault loses fences, no write of the current holder is
// refused. Where the backend fences, no stale write may be accepted;
// where the scenario is Redlock's known weakness, a stale write accepted
// is what the checker must see; where the fault loses the lock and its
// fence (a failover to an asynchronous replica), a second holder and a
// repeated fence are; where the lock survives the fault, no second
// holder may be seen.
func (c *Cell) judge(x expectation) {
	var bad []string
	if len(c.Errors) > 0 {
		bad = append(bad, fmt.Sprintf("%d round(s) failed", len(c.Errors)))
	}
	if c.Recovered < c.Rounds {
		bad = append(bad, fmt.Sprintf("the key was taken again in %d of %d rounds", c.Recovered, c.Rounds))
	}
	if c.Counts.RightfulRejected > 0 && !x.loses {
		bad = append(bad, fmt.Sprintf("%d rightful write(s) rejected: a fence went backwards", c.Counts.RightfulRejected))
	}
	if late := c.lateRounds(); late > 0 {
		bad = append(bad, fmt.Sprintf("in %d round(s) the rival waited past TTL + expiry slack + %v (%v), up to %v", late, expiryMargin, c.Bound, c.NewHolder.Round(time.Millisecond)))
	}
	if x.keeps && c.Counts.Overlaps > 0 {
		bad = append(bad, fmt.Sprintf("the lock was lost to the fault: a second holder in %d round(s)", c.overlapRounds()))
	}
	switch {
	case x.loses:
		c.Expect = "a second holder and a repeated fence in every round: the promoted replica never received the holder's grant nor its fence"
		if n := c.overlapRounds(); n < c.Rounds {
			bad = append(bad, fmt.Sprintf("a second holder in fewer rounds than expected (%d of %d)", n, c.Rounds))
		}
		if n := c.repeatedFenceRounds(); n < c.Rounds {
			bad = append(bad, fmt.Sprintf("a repeated fence in fewer rounds than expected (%d of %d)", n, c.Rounds))
		}
	case x.violates:
		c.Expect = "stale writes accepted: this backend cannot fence, and this fault hands a rival the lock"
		if c.StaleRounds < c.Rounds {
			bad = append(bad, fmt.Sprintf("stale writes accepted in fewer rounds than expected (%d of %d)", c.StaleRounds, c.Rounds))
		}
	case x.fencing:
		c.Expect = "no stale write accepted (the fence rejects it), no rightful write rejected"
		if n := c.Counts.StaleAccepted + c.Counts.LateAccepted; n > 0 {
			bad = append(bad, fmt.Sprintf("%d stale write(s) accepted although the backend fences", n))
		}
	default:
		c.Expect = "no stale write: the holder knows it lost the lock before a rival can take it"
		if n := c.Counts.StaleAccepted + c.Counts.LateAccepted; n > 0 {
			bad = append(bad, fmt.Sprintf("%d stale write(s) accepted", n))
		}
	}
	if x.keeps {
		c.Expect = "the lock survives the fault (no second holder); " + c.Expect
	}
	if c.Bound > 0 {
		c.Expect += fmt.Sprintf("; the rival holds the key within %v of the fault (TTL + expiry slack + %v)", c.Bound, expiryMargin)
	}
	c.Expected = len(bad) == 0
	c.Verdict = "as expected"
	if !c.Expected {
		c.Verdict = "UNEXPECTED: " + strings.Join(bad, "; ")
	}
}

// overlapRounds counts the rounds in which two clients believed they held
// the key at once.
func (c *Cell) overlapRounds() int {
	n := 0
	for _, h := range c.History {
		if h.Counts.Overlaps > 0 {
			n++
		}
	}
	return n
}

// repeatedFenceRounds counts the rounds in which a fence was not above
// an older holder's: the newer holder's write refused, or the older
// holder's accepted.
func (c *Cell) repeatedFenceRounds() int {
	n := 0
	for _, h := range c.History {
		if h.Counts.RightfulRejected+h.Counts.StaleAccepted+h.Counts.LateAccepted > 0 {
			n++
		}
	}
	return n
}
