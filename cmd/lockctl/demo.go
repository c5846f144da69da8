package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
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
	story   string
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

Then shared holds and semaphores, on clients of their own:

  4. Readers share, a writer waits: two readers hold a read/write lock
     together; a writer asks for it and waits; a reader that asks again
     after the writer waits behind it where the backend queues (memory,
     ZooKeeper, etcd), so readers cannot starve a writer, and may
     overtake it where the backend keeps no queue (Redis, Redlock).
  5. A semaphore: one client more than the semaphore has permits asks at
     once; every permit is taken and the last client waits for one.

A backend that does not admit shared holds or semaphores (its
Capabilities) skips phase 4 or 5 and says so. --story fencing tells
phases 1 to 3 only, --story rw phases 4 and 5 only.

Then a summary: acquisitions, handoffs, writes accepted and rejected, the
fences seen; the readers that held together, how long the writer waited
and whether a reader overtook it; the permits in use at most. With --json, every event and the summary are JSON objects,
one per line, the summary last.

With no URL anywhere (see lockctl --help) the demo runs on the embedded
memory:// backend: no server, a few seconds, and always exactly one stale
write rejected. There the pause and the crash are those of the memory
backend's clients. On a server backend each worker is a client of its own
behind loopback proxies; the paused worker's lock is not refreshed while it
sleeps past its TTL, and the crashed worker's proxies cut it off.

Exit codes: 0 when the story ran; 1 when it broke a rule the backend claims
(a stale write accepted despite fencing, a writer granted beside another
holder, a reader overtaking a writer on a FIFO backend, more permits held
than the limit); 125 when it could not run.`,
		Example: `  # On the embedded backend, no server needed:
  lockctl demo

  # The same story on a Redis server, then on Redlock (no fencing tokens):
  lockctl demo --url redis://127.0.0.1:6379
  lockctl demo --url redlock://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003

  # Readers, a writer and a semaphore only:
  lockctl demo --story rw

  # Events and summary as JSON Lines; the summary is the last line:
  lockctl demo --json | tail -n 1 | jq .stale_writes_rejected`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return d.run(c.Context()) },
	}
	c.Flags().IntVar(&d.workers, "workers", 4, fmt.Sprintf("number of workers (%d to %d)", minDemoWorkers, maxDemoWorkers))
	c.Flags().DurationVar(&d.ttl, "ttl", time.Second, "TTL of the locks (raised to the backend's minimum)")
	c.Flags().StringVar(&d.story, "story", storyAll, "which story to tell: fencing (phases 1 to 3), rw (readers, a writer, a semaphore), or all")
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
	if !slices.Contains([]string{storyAll, storyFencing, storyKinds}, d.story) {
		return exitf(exitError, "--story %q: want %s, %s or %s", d.story, storyFencing, storyKinds, storyAll)
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
	if err := s.play(ctx, d.story); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: the story did not end within %v (is the backend reachable?)", err, demoTimeout)
		}
		return exitf(exitError, "demo: %w", err)
	}
	sum := s.summary()
	rep.end(sum)
	if bad := sum.broken(); bad != "" {
		return exitf(1, "demo: %s", bad)
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
	// Story is what --story told: all, fencing or rw. The counts above
	// are the fencing story's; ReadWrite and Semaphore are the rw
	// story's phases, nil when it was not told.
	Story     string      `json:"story"`
	ReadWrite *rwSummary  `json:"read_write,omitempty"`
	Semaphore *semSummary `json:"semaphore,omitempty"`
}

// fencingTold reports whether the summary's story included fencing.
func (s *summary) fencingTold() bool { return s.Story != storyKinds }

// broken says which rules of the backend's claims the story saw broken,
// or "" if none: a stale write accepted despite fencing, a grant against
// a kind's rule, a reader overtaking a writer on a backend that claims
// FIFO.
func (s *summary) broken() string {
	var bad []string
	if s.fencingTold() && s.Fencing && s.StaleAccepted > 0 {
		bad = append(bad, fmt.Sprintf("the backend claims fencing, yet the storage accepted %d stale write(s)", s.StaleAccepted))
	}
	if rw := s.ReadWrite; rw != nil && rw.Violations > 0 {
		bad = append(bad, fmt.Sprintf("%d grant(s) of the write lock beside another holder", rw.Violations))
	}
	if rw := s.ReadWrite; rw != nil && rw.FIFO && rw.Overtaken > 0 {
		bad = append(bad, fmt.Sprintf("the backend claims FIFO, yet %d reader(s) overtook the waiting writer", rw.Overtaken))
	}
	if sem := s.Semaphore; sem != nil && sem.Violations > 0 {
		bad = append(bad, fmt.Sprintf("%d permit(s) granted beyond the semaphore's limit of %d", sem.Violations, sem.Limit))
	}
	return strings.Join(bad, "; ")
}

// verdict explains the summary's outcome in a sentence or two for
// each story told.
func (s *summary) verdict() string {
	var parts []string
	if s.fencingTold() {
		parts = append(parts, s.fencingVerdict())
	}
	if s.Story != storyFencing {
		parts = append(parts, s.kindsVerdict())
	}
	return strings.Join(parts, " ")
}

// kindsVerdict explains what the readers, the writer and the semaphore
// showed.
func (s *summary) kindsVerdict() string {
	var parts []string
	switch rw := s.ReadWrite; {
	case rw == nil:
	case rw.Skipped != "":
		parts = append(parts, "Readers and a writer: skipped, "+rw.Skipped+".")
	case rw.Violations > 0:
		parts = append(parts, fmt.Sprintf("UNEXPECTED: the write lock was granted beside another holder %d time(s).", rw.Violations))
	case rw.Overtaken == 0:
		parts = append(parts, fmt.Sprintf("%d readers held the key together; the writer waited %v for them and went before the reader "+
			"that asked after it: a stream of readers cannot starve a writer.", rw.ReadersTogether, time.Duration(rw.WriterWaitMS)*time.Millisecond))
	case rw.FIFO:
		parts = append(parts, fmt.Sprintf("UNEXPECTED: %s claims FIFO, yet a reader that asked after the writer overtook it.", s.Backend))
	default:
		parts = append(parts, fmt.Sprintf("%d readers held the key together; a reader that asked after the writer overtook it "+
			"(%s keeps no queue): the writer waited %v, and waits as long as readers overlap.", rw.ReadersTogether, s.Backend,
			time.Duration(rw.WriterWaitMS)*time.Millisecond))
	}
	switch sem := s.Semaphore; {
	case sem == nil:
	case sem.Skipped != "":
		parts = append(parts, "Semaphore: skipped, "+sem.Skipped+".")
	case sem.Violations > 0:
		parts = append(parts, fmt.Sprintf("UNEXPECTED: the semaphore of %d permits granted one beyond its limit %d time(s).", sem.Limit, sem.Violations))
	default:
		parts = append(parts, fmt.Sprintf("The semaphore of %d permits had at most %d in use; %d client(s) waited for one.", sem.Limit, sem.MostHeld, sem.Waited))
	}
	return strings.Join(parts, " ")
}

// fencingVerdict explains the fencing story's outcome.
func (s *summary) fencingVerdict() string {
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
			"past its TTL, use a backend with fencing (redis, zookeeper, etcd, postgres).", s.StaleAccepted, s.Backend)
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
