package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func init() { addCommand(newDemoCmd) }

// Bounds of the demo's flags.
const (
	minDemoWorkers = 3 // a paused holder, the one that takes over, a crashed holder
	maxDemoWorkers = 20
	// demoTimeout bounds the whole story: on memory:// it takes a few
	// seconds, on a server a few TTLs plus the backend's expiry slack.
	demoTimeout = 2 * time.Minute
)

// demoCmd is one `lockctl demo`.
type demoCmd struct {
	app     *app
	workers int
	ttl     time.Duration
}

func newDemoCmd(a *app) *cobra.Command {
	d := &demoCmd{app: a}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Watch workers share a lock, and fencing tokens stop a paused holder's stale write",
		Long: `Demo tells, as it happens, what a distributed lock does and what fencing
tokens are for. Several workers contend for one lock and write to a storage
that checks fencing tokens: it rejects a write whose fence is lower than the
highest it has accepted. The story:

  1. Contention: the workers take turns; each acquisition carries a larger
     fence, and every write is accepted.
  2. A paused holder: a worker stops while holding the lock, as in a long
     garbage-collection pause. Its lock expires, another worker takes over
     and writes. The paused worker wakes, still believing it holds the
     lock, and writes: its stale write is REJECTED by its fence. On a
     backend that cannot mint fencing tokens (Redlock) the storage cannot
     tell, and the stale write is ACCEPTED: the demo says so.
  3. A crashed holder: a worker crashes while holding the lock; the lock
     expires at its TTL and the next waiter gets it.

Then a summary: acquisitions, handoffs, writes accepted and rejected, the
fences seen. With --json, every event and the summary are JSON objects,
one per line, the summary last.

With no URL anywhere (see lockctl --help) the demo runs on the embedded
memory:// backend: no server, a few seconds, and always exactly one stale
write rejected. There the pause and the crash are those of the memory
backend's clients. On a server backend each worker is a client of its own
behind loopback proxies; the paused worker's lock is not refreshed while it
sleeps past its TTL, and the crashed worker's proxies cut it off.

Exit codes: 0 when the story ran; 1 when it broke a rule the backend claims
(a stale write accepted despite fencing); 125 when it could not run.`,
		Example: `  # On the embedded backend, no server needed:
  lockctl demo

  # The same story on a Redis server, then on Redlock (no fencing tokens):
  lockctl demo --url redis://127.0.0.1:6379
  lockctl demo --url redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003

  # Events and summary as JSON Lines; the summary is the last line:
  lockctl demo --json | tail -n 1 | jq .stale_writes_rejected`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return d.run(c.Context()) },
	}
	c.Flags().IntVar(&d.workers, "workers", 4, fmt.Sprintf("number of workers (%d to %d)", minDemoWorkers, maxDemoWorkers))
	c.Flags().DurationVar(&d.ttl, "ttl", time.Second, "TTL of the locks (raised to the backend's minimum)")
	return c
}

func (d *demoCmd) run(ctx context.Context) error {
	if d.workers < minDemoWorkers || d.workers > maxDemoWorkers {
		return exitf(exitError, "--workers %d: want %d to %d (the story needs a paused holder, one that takes over, and a crashed holder)",
			d.workers, minDemoWorkers, maxDemoWorkers)
	}
	if d.ttl <= 0 {
		return exitf(exitError, "--ttl %v: must be positive", d.ttl)
	}
	t, err := d.app.resolve("memory://")
	if err != nil {
		return withCode(exitError, err)
	}
	ctx, cancel := context.WithTimeout(ctx, demoTimeout)
	defer cancel()
	rep := newReporter(d.app.stdout, d.app.json)
	s, err := newStory(ctx, d.app, t, d.workers, rep)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.setTTL(d.ttl); err != nil {
		return withCode(exitError, err)
	}
	if err := s.play(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: the story did not end within %v (is the backend reachable?)", err, demoTimeout)
		}
		return exitf(exitError, "demo: %w", err)
	}
	sum := s.summary()
	rep.end(sum)
	if sum.Fencing && sum.StaleAccepted > 0 {
		return exitf(1, "demo: the backend claims fencing, yet the storage accepted %d stale write(s)", sum.StaleAccepted)
	}
	return nil
}

// demoKey returns a key of its own for this run, so that two demos on one
// deployment do not meet.
func demoKey() string {
	b := make([]byte, 4)
	rand.Read(b)
	return "lockctl-demo/" + hex.EncodeToString(b)
}

// storage is the resource the workers write to. Like a storage service
// that checks fencing tokens, it rejects a write whose fence is lower than
// the highest it has accepted (the same holder may write again with its
// own). A write without a fence it cannot check, and accepts.
type storage struct {
	highest uint64
	owner   string // whose data it holds
}

// writeResult is what became of a write.
type writeResult struct {
	accepted bool
	highest  uint64 // the highest fence accepted before the write
	prev     string // whose data the storage held before the write
}

func (s *storage) write(who string, fence uint64, fenced bool) writeResult {
	r := writeResult{highest: s.highest, prev: s.owner}
	if fenced && fence < s.highest {
		return r
	}
	if fenced {
		s.highest = fence
	}
	s.owner, r.accepted = who, true
	return r
}

// summary ends the story, as --json prints it.
type summary struct {
	Type           string   `json:"type"` // "summary"
	URL            string   `json:"url"`  // password redacted
	Backend        string   `json:"backend"`
	Fencing        bool     `json:"fencing"`
	Workers        int      `json:"workers"`
	TTLMS          int64    `json:"ttl_ms"`
	Acquisitions   int      `json:"acquisitions"`
	Handoffs       int      `json:"handoffs"` // acquisitions by another worker than the one before
	WritesAccepted int      `json:"writes_accepted"`
	WritesRejected int      `json:"writes_rejected"`
	StaleAccepted  int      `json:"stale_writes_accepted"`
	StaleRejected  int      `json:"stale_writes_rejected"`
	Fences         []uint64 `json:"fences"` // in the order of the acquisitions
	ElapsedMS      int64    `json:"elapsed_ms"`
	Verdict        string   `json:"verdict"`
}

// verdict explains the summary's outcome in a sentence or two.
func (s *summary) verdict() string {
	switch {
	case s.Fencing && s.StaleAccepted == 0:
		return fmt.Sprintf("Fencing worked: %d stale write(s) REJECTED, none accepted. The paused worker woke up believing it "+
			"still held the lock, but its fence was lower than one the storage had accepted, so its write "+
			"could not overwrite newer data. A lease alone cannot protect against such a pause; fencing can.", s.StaleRejected)
	case s.Fencing:
		return fmt.Sprintf("UNEXPECTED: %d stale write(s) ACCEPTED although %s claims fencing tokens.", s.StaleAccepted, s.Backend)
	default:
		return fmt.Sprintf("%d stale write(s) ACCEPTED: %s cannot mint safe fencing tokens (Fence() returns false), so the "+
			"storage had nothing to compare and the paused worker overwrote newer data. Where a holder may pause "+
			"past its TTL, use a backend with fencing (redis, zookeeper, etcd).", s.StaleAccepted, s.Backend)
	}
}

// storyErr says which worker's step of the story failed.
func storyErr(who, what string, err error) error {
	if err == nil {
		return nil
	}
	if who == "" {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %s: %w", who, what, err)
}
