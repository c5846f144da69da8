package bench

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The scenarios of shared holds and semaphores. They run the designs
// whose backend admits the kind (Design.Shared, Design.Permits: the
// Locker's from its Capabilities) and the peers that have it (etcd's
// recipe.RWMutex); a Locker whose backend does not is left out with a
// note naming the capability. No raw design takes part: the servers have
// no shared-hold or semaphore primitive (each library builds one from
// the mutex's), and the raw designs try once and never wait, while
// both scenarios are about waiting.

// Defaults of the scenarios' settings.
const (
	DefaultReaders    = 4
	DefaultWriteEvery = 50 * time.Millisecond
	DefaultPermits    = 4
)

// Hold times, which keep the key busy as real work would: readers that
// hold for a moment overlap one another almost always, which is what
// starves a writer where the backend keeps no queue; permit holders
// that hold for a moment keep the semaphore at its limit.
const (
	rwReadHold = 2 * time.Millisecond
	semHold    = time.Millisecond
)

func (r *Runner) readers() int { return orDefault(r.Settings.Readers, DefaultReaders) }

func (r *Runner) writeEvery() time.Duration {
	return orDefault(r.Settings.WriteEvery, DefaultWriteEvery)
}

func (r *Runner) permits() int { return orDefault(r.Settings.Permits, DefaultPermits) }

// orDefault returns v, or def when v is zero or negative.
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// kindDesigns are the designs of the scenario that needs a kind of hold
// (admits says whether a design's backend admits it: Design.Shared for
// read-write, Design.Permits for semaphore); a Locker whose backend does
// not is noted, naming the capability it lacks.
func (r *Runner) kindDesigns(designs []Design, note bool, scenario string, admits func(Design) bool, lacks string) []Design {
	var out []Design
	for _, d := range designs {
		switch {
		case admits(d):
			out = append(out, d)
		case note && d.Kind == KindLocker:
			r.notef("%s: %s %s: not run: the backend does not admit %s", scenario, d.Backend, d.Name, lacks)
		}
	}
	return out
}

// sharedDesigns are the designs of the read-write scenario.
func (r *Runner) sharedDesigns(designs []Design, note bool) []Design {
	return r.kindDesigns(designs, note, ScenarioReadWrite, func(d Design) bool { return d.Shared },
		"shared holds (Capabilities.Shared is false)")
}

// permitDesigns are the designs of the semaphore scenario.
func (r *Runner) permitDesigns(designs []Design, note bool) []Design {
	return r.kindDesigns(designs, note, ScenarioSemaphore, func(d Design) bool { return d.Permits },
		"semaphores (Capabilities.Permits is false)")
}

// ReadWrite: per design, Settings.Readers clients take read locks on one
// key back to back, each holding it for rwReadHold, while one more
// client takes the write lock every Settings.WriteEvery (in the first
// three quarters of each slice: see rwTally.write). The rate is the
// readers'; the writer's waits, the longest, and the writes still
// waiting when a step ended (starved) are the Result's ReadWrite.
func (r *Runner) ReadWrite(ctx context.Context, designs []Design) {
	readers, every := r.readers(), r.writeEvery()
	r.progress(fmt.Sprintf("read-write: %d readers streaming, a writer every %v, on one key", readers, every))
	os := r.open(ctx, ScenarioReadWrite, r.sharedDesigns(designs, true), readers+1)
	rws := make([]*rwTally, len(os))
	ts := inSlices(ctx, os, r.Settings.Duration, func(ctx context.Context, i int, o opened, t *tally, d time.Duration) {
		if rws[i] == nil {
			rws[i] = &rwTally{wait: newHist()}
		}
		rws[i].run(ctx, o, t, d, r.key("rw", o.d.Backend, o.d.Name), r.TTL, every)
	})
	for i, o := range os {
		res := ts[i].result(ScenarioReadWrite, o.d, map[string]int{"readers": readers}, r.Settings.RTT, "reads")
		res.ReadWrite = rws[i].figures(readers, every)
		r.results = append(r.results, res)
	}
	r.closeAll(os)
}

// rwTally is the writer's side of the read-write scenario, across the
// slices of one design.
type rwTally struct {
	wait    *hist
	writes  int64
	longest time.Duration
	starved int
}

func (w *rwTally) figures(readers int, every time.Duration) *ReadWrite {
	if w == nil {
		return nil
	}
	return &ReadWrite{Readers: readers, WriteEvery: every, Writes: w.writes, Wait: w.wait.latency(), LongestWait: w.longest, Starved: w.starved}
}

// run measures one slice of d: the readers are o's clients but the
// last, which is the writer.
func (w *rwTally) run(ctx context.Context, o opened, t *tally, d time.Duration, key string, ttl, every time.Duration) {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex // guards t
	readers := len(o.clients) - 1
	concurrently(len(o.clients), func(i int) {
		if i == readers {
			w.write(sctx, o.clients[i], t, &mu, key, ttl, every, time.Now().Add(d*3/4))
			return
		}
		c := o.clients[i].(SharedClient) // Design.Shared promises it
		for sctx.Err() == nil {
			t0 := time.Now()
			unlock, err := c.LockShared(sctx, key, ttl)
			if isStop(sctx, err) {
				return
			}
			mu.Lock()
			t.record(time.Since(t0), err)
			mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond) // a failing backend is not to be spun on
				continue
			}
			time.Sleep(rwReadHold)
			if err := unlock(context.WithoutCancel(sctx)); err != nil {
				mu.Lock()
				t.record(0, err)
				mu.Unlock()
			}
		}
	})
}

// write is the writer: every pause, it asks for the write lock, notes
// how long it waited, and releases it at once. It asks no more after
// lastAsk, a quarter of the slice before its end, so that a write still
// waiting at the end (starved) has waited that long at least: on a
// backend that queues, a writer waits only for the readers holding the
// key when it asked.
func (w *rwTally) write(ctx context.Context, c Client, t *tally, mu *sync.Mutex, key string, ttl, every time.Duration, lastAsk time.Time) {
	pause := time.NewTimer(every)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		if time.Now().After(lastAsk) {
			return
		}
		asked := time.Now()
		unlock, err := c.Lock(ctx, key, ttl)
		waited := time.Since(asked)
		w.longest = max(w.longest, waited)
		switch {
		case isStop(ctx, err):
			w.starved++
			return
		case err != nil:
			mu.Lock()
			t.record(0, err)
			mu.Unlock()
		default:
			w.writes++
			w.wait.add(waited)
			if err := unlock(context.WithoutCancel(ctx)); err != nil {
				mu.Lock()
				t.record(0, err)
				mu.Unlock()
			}
		}
		pause.Reset(every)
	}
}

// Semaphore: per design, twice Settings.Permits clients take a permit of
// a semaphore of Settings.Permits on one key, hold it for semHold and
// give it back, as fast as they can: the semaphore is at its limit all
// the while, and half the clients wait. The rate is permits granted per
// second, the Latency a client's wait for one. The clients count the
// permits held at once from their grants and releases; more than the
// limit is an error of the result.
func (r *Runner) Semaphore(ctx context.Context, designs []Design) {
	permits := r.permits()
	clients := 2 * permits
	r.progress(fmt.Sprintf("semaphore: %d clients on a semaphore of %d permits", clients, permits))
	os := r.open(ctx, ScenarioSemaphore, r.permitDesigns(designs, true), clients)
	most := make([]int, len(os))
	ts := inSlices(ctx, os, r.Settings.Duration, func(ctx context.Context, i int, o opened, t *tally, d time.Duration) {
		most[i] = max(most[i], semRun(ctx, o, t, d, r.key("sem", o.d.Backend, o.d.Name), permits, r.TTL))
	})
	for i, o := range os {
		res := ts[i].result(ScenarioSemaphore, o.d, map[string]int{"permits": permits, "clients": clients}, r.Settings.RTT, "grants")
		res.Semaphore = &Semaphore{Permits: permits, Clients: clients, MostHeld: most[i]}
		r.results = append(r.results, res)
	}
	r.closeAll(os)
}

// semRun measures one slice of d and returns the most permits held at
// once. A holder counts itself in once its grant returned and out
// before it releases, so the count never exceeds what the servers hold.
func semRun(ctx context.Context, o opened, t *tally, d time.Duration, key string, permits int, ttl time.Duration) int {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex // guards t and count
	count := permitCount{limit: permits}
	concurrently(len(o.clients), func(i int) {
		c := o.clients[i].(PermitClient) // Design.Permits promises it
		for sctx.Err() == nil {
			t0 := time.Now()
			unlock, err := c.LockPermit(sctx, key, permits, ttl)
			if isStop(sctx, err) {
				return
			}
			mu.Lock()
			t.record(time.Since(t0), err)
			if err == nil {
				if err := count.grant(); err != nil {
					t.record(0, err)
				}
			}
			mu.Unlock()
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			time.Sleep(semHold)
			mu.Lock()
			count.release()
			mu.Unlock()
			if err := unlock(context.WithoutCancel(sctx)); err != nil {
				mu.Lock()
				t.record(0, err)
				mu.Unlock()
			}
		}
	})
	return count.most
}

// permitCount counts the permits held at once, as the holders see
// their grants and releases.
type permitCount struct {
	limit, held, most int
}

// grant counts a grant in, and says if it took more than the limit.
func (c *permitCount) grant() error {
	c.held++
	c.most = max(c.most, c.held)
	if c.held > c.limit {
		return fmt.Errorf("%d permits held at once, above the semaphore's limit of %d", c.held, c.limit)
	}
	return nil
}

func (c *permitCount) release() { c.held-- }
