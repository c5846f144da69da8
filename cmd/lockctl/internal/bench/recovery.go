package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// HolderCommand returns the command of a process that takes key on the
// deployment at url with ttl, prints a line once it holds the lock, and
// holds it until it is killed. lockctl's is "lockctl run".
type HolderCommand func(url, key string, ttl time.Duration) *exec.Cmd

// deployment is one deployment a run measures: its backend, the URL its
// designs reach it at, and its designs (fanout: Redlock's by node
// count).
type deployment struct {
	backend Backend
	url     string
	designs []Design
	fanout  map[int][]Design
}

// Recovery: for each deployment, rounds of: a holder process takes a key
// (Runner.Holder), a waiter in this process asks for it, the holder is
// killed with SIGKILL, and the time until the waiter holds the key is
// measured against TTL + ExpirySlack + one round trip (from a lock taken
// and released just before). The memory backend's locks live in one
// process, so it has no recovery to measure.
func (r *Runner) Recovery(ctx context.Context, targets []deployment) {
	for _, tg := range targets {
		if tg.backend.Name == "memory" {
			r.notef("recovery: memory's locks live in one process; no other process can hold them")
			continue
		}
		if r.Holder == nil {
			r.notef("recovery: %s: no holder command to run in another process", tg.backend.Name)
			continue
		}
		r.progress(fmt.Sprintf("recovery: a holder killed with SIGKILL on %s, %d rounds", tg.backend.Name, r.recoveryRounds()))
		res, err := r.recovery(ctx, tg)
		if err != nil {
			r.notef("recovery: %s: %v", tg.backend.Name, err)
		}
		if res != nil {
			r.results = append(r.results, *res)
		}
	}
}

func (r *Runner) recoveryRounds() int {
	if r.Settings.RecoveryRounds > 0 {
		return r.Settings.RecoveryRounds
	}
	return 3
}

// recoveryTTL is the TTL of the recovery scenario's locks: short, as the
// wait is one TTL per round; at least the backend's smallest, minTTL.
func recoveryTTL(minTTL time.Duration) time.Duration { return max(2*time.Second, minTTL) }

func (r *Runner) recovery(ctx context.Context, tg deployment) (*Result, error) {
	d := LockerDesign(tg.backend.Name, tg.url)
	c, err := d.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	caps := c.(lockerClient).l.Capabilities()
	ttl := recoveryTTL(caps.MinTTL)
	// One round trip: half an uncontended Acquire+Release.
	t0 := time.Now()
	if err := lockUnlock(ctx, c, r.key("recovery", tg.backend.Name, "rtt"), ttl); err != nil {
		return nil, err
	}
	rtt := time.Since(t0) / 2
	rec := &Recovery{TTL: ttl, ExpirySlack: caps.ExpirySlack, Bound: ttl + caps.ExpirySlack + rtt}
	t := newTally()
	for round := range r.recoveryRounds() {
		took, err := r.recoveryRound(ctx, c, tg.url, r.key("recovery", tg.backend.Name, round), ttl)
		t.record(took, err)
		if err != nil {
			continue
		}
		t.busy += took
		rec.Rounds++
		if took <= rec.Bound {
			rec.Within++
		}
	}
	res := t.result(ScenarioRecovery, d, map[string]int{"rounds": r.recoveryRounds()}, r.Settings.RTT, "ops")
	res.Recovery = rec
	if t.first != nil {
		return &res, fmt.Errorf("%d of %d rounds failed, the first: %w", t.errs, r.recoveryRounds(), t.first)
	}
	return &res, nil
}

// recoveryRound runs one round on key and returns how long the waiter
// took to hold the key after the holder was killed.
func (r *Runner) recoveryRound(ctx context.Context, c Client, url, key string, ttl time.Duration) (time.Duration, error) {
	cmd := r.Holder(url, key, ttl)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting the holder: %w", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	if err := awaitLine(ctx, out, 30*time.Second); err != nil {
		return 0, fmt.Errorf("the holder did not report holding %s: %w (its stderr: %s)", key, err, strings.TrimSpace(stderr.String()))
	}
	wctx, cancel := context.WithTimeout(ctx, 10*ttl+30*time.Second)
	defer cancel()
	type got struct {
		at     time.Time
		unlock Unlock
		err    error
	}
	done := make(chan got, 1)
	go func() {
		unlock, err := c.Lock(wctx, key, ttl)
		done <- got{time.Now(), unlock, err}
	}()
	// Let the waiter find the key held and settle into its wait: the
	// holder dies while it waits, not before it asks.
	select {
	case g := <-done:
		if g.err == nil {
			g.unlock(context.WithoutCancel(ctx))
			return 0, fmt.Errorf("the waiter took %s while the holder held it", key)
		}
		return 0, g.err
	case <-time.After(100 * time.Millisecond):
	}
	r.conns.Sample([]int{0, cmd.Process.Pid}) // the holder's and the waiter's
	if err := cmd.Process.Kill(); err != nil {
		return 0, fmt.Errorf("killing the holder: %w", err)
	}
	killed := time.Now()
	g := <-done
	if g.err != nil {
		return 0, fmt.Errorf("the waiter, after the holder was killed: %w", g.err)
	}
	took := g.at.Sub(killed)
	return took, g.unlock(context.WithoutCancel(ctx))
}

// awaitLine waits for the first line of r.
func awaitLine(ctx context.Context, r io.Reader, limit time.Duration) error {
	line := make(chan error, 1)
	go func() {
		_, err := bufio.NewReader(r).ReadString('\n')
		line <- err
	}()
	select {
	case err := <-line:
		return err
	case <-time.After(limit):
		return fmt.Errorf("nothing within %v", limit)
	case <-ctx.Done():
		return ctx.Err()
	}
}
