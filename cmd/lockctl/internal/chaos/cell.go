package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// cell runs sc's rounds on d and judges them.
func (e *engine) cell(ctx context.Context, sc *Scenario, d *deployment) Cell {
	c := Cell{Scenario: sc.Name, Backend: d.backend, Rounds: e.o.Rounds}
	for i := range e.o.Rounds {
		if ctx.Err() != nil {
			break
		}
		e.step++
		if e.o.Progress != nil {
			e.o.Progress(e.step, e.steps, fmt.Sprintf("%s on %s, round %d of %d", sc.Name, d.backend, i+1, e.o.Rounds))
		}
		res := e.round(ctx, sc, d, i)
		c.Counts.add(res.Counts)
		if res.Recovered {
			c.Recovered++
		}
		c.NewHolder = max(c.NewHolder, res.NewHolder)
		if res.Err != "" {
			c.Errors = append(c.Errors, fmt.Sprintf("round %d: %s", i+1, res.Err))
		}
		if c.Example == nil || c.Example.Counts.StaleAccepted == 0 && res.Counts.StaleAccepted > 0 {
			c.Example = &res
		}
	}
	c.judge(slices.Contains(sc.Violates, d.backend), d.fencing)
	return c
}

// round runs one round of sc on d, on servers of its own where sc
// restarts servers.
func (e *engine) round(ctx context.Context, sc *Scenario, d *deployment, i int) RoundResult {
	key := fmt.Sprintf("lockctl-chaos/%s/%s/%s/%d", e.id, sc.Name, d.backend, i)
	dd := *d
	dd.bare = sc.Bare
	if sc.Servers != givenServers {
		bin, err := findRedisServer(e.o.RedisServer)
		if err != nil {
			return RoundResult{Err: err.Error()}
		}
		servers, url, err := ownServersFor(ctx, sc.Servers, d.backend, bin, e.dir)
		defer stopServers(servers)
		if err != nil {
			return RoundResult{Err: err.Error()}
		}
		dd.url, dd.servers = url, servers
	}
	r := newRound(key, dd.url, dd.ttl, dd.slack, e.o.Worker, dd.fencing)
	err := sc.run(ctx, r, &dd)
	r.stopAll()
	res := r.outcome()
	if err != nil {
		res.Err = err.Error()
	}
	return res
}

// judge sets the cell's expectation and verdict. What must hold
// everywhere: the key can be taken again once the faults clear, and no
// write of the current holder is refused. Where the backend fences, no
// stale write may be accepted; where the scenario is Redlock's known
// weakness, a stale write accepted is what the checker must see.
func (c *Cell) judge(violates, fencing bool) {
	var bad []string
	if len(c.Errors) > 0 {
		bad = append(bad, fmt.Sprintf("%d round(s) failed", len(c.Errors)))
	}
	if c.Recovered < c.Rounds {
		bad = append(bad, fmt.Sprintf("the key was taken again in %d of %d rounds", c.Recovered, c.Rounds))
	}
	if c.Counts.RightfulRejected > 0 {
		bad = append(bad, fmt.Sprintf("%d rightful write(s) rejected: a fence went backwards", c.Counts.RightfulRejected))
	}
	switch {
	case violates:
		c.Expect = "stale writes accepted: this backend cannot fence, and this fault hands a rival the lock"
		if c.Counts.StaleAccepted < c.Rounds {
			bad = append(bad, fmt.Sprintf("stale writes accepted in fewer rounds than expected (%d of %d)", c.Counts.StaleAccepted, c.Rounds))
		}
	case fencing:
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
	c.Expected = len(bad) == 0
	c.Verdict = "as expected"
	if !c.Expected {
		c.Verdict = "UNEXPECTED: " + strings.Join(bad, "; ")
	}
}
