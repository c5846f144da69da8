package gocronlocker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/distlock/locker"
)

// Locker is a gocron.Locker over a locker.Locker: per-job locks, held
// while a run lasts and at least the minimum hold (WithMinHold). Give each
// instance's scheduler its own, over the instance's locker.Locker, with
// the same options. It is safe for concurrent use.
type Locker struct {
	l       locker.Locker
	opts    []locker.Option
	prefix  string
	minHold time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	held   map[string]*jobLock // by job name, from Lock to the release
	closed bool
	later  sync.WaitGroup // releases deferred to the end of a minimum hold
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a gocron.Locker whose locks are l's, keyed by the
// job's name after the prefix (WithKeyPrefix). It does not own l: close l
// after the Locker.
func NewLocker(l locker.Locker, opts ...LockerOption) (*Locker, error) {
	if l == nil {
		return nil, fmt.Errorf("gocronlocker: NewLocker: %w", errNilLocker)
	}
	c, err := resolveLocker(opts)
	if err != nil {
		return nil, fmt.Errorf("gocronlocker: NewLocker: %w", err)
	}
	return &Locker{
		l: l, opts: c.lockOptions(), prefix: c.prefix, minHold: c.minHold, log: c.logger,
		held: map[string]*jobLock{},
	}, nil
}

// Lock takes job's key for one run, in one attempt. gocron calls it before
// every run and skips the run when it fails: with an error wrapping
// locker.ErrNotAcquired when another instance holds the key (it runs, or
// ran, this tick), or the backend's error when the backend cannot be
// reached, as a tick is better skipped than run twice.
func (x *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	x.mu.Lock()
	closed := x.closed
	x.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("gocronlocker: lock job %q: %w", job, locker.ErrClosed)
	}
	lk, err := x.l.TryAcquire(ctx, x.prefix+job, x.opts...)
	if errors.Is(err, locker.ErrNotAcquired) {
		return nil, fmt.Errorf("gocronlocker: job %q runs on another instance, or ran this tick there: %w", job, err)
	}
	if err != nil {
		return nil, fmt.Errorf("gocronlocker: lock job %q: %w", job, err)
	}
	jl := &jobLock{x: x, job: job, lk: lk, minUntil: time.Now().Add(x.minHold)}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		lk.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("gocronlocker: lock job %q: %w", job, locker.ErrClosed)
	}
	x.held[job] = jl
	x.mu.Unlock()
	return jl, nil
}

// Held returns the lock of job on this instance while a run of it holds
// one (and during its minimum hold), nil otherwise. A job that writes to
// a resource that must never see two runs at once checks the lock's
// fence there (Fence), or stops when Lost closes.
func (x *Locker) Held(job string) locker.Lock {
	x.mu.Lock()
	defer x.mu.Unlock()
	if jl := x.held[job]; jl != nil {
		return jl.lk
	}
	return nil
}

// Close ends the Locker: later Lock calls fail with locker.ErrClosed, the
// locks kept for the rest of their minimum hold are released at once, and
// Close returns when those releases are done. Call it after the
// scheduler's Shutdown: the lock of a run still in progress is released
// when the run ends. A second Close returns nil.
//
// Releasing early lets an instance whose tick fires later run the last
// tick again; a process that exits without Close leaves those keys to
// expire at their TTL instead.
func (x *Locker) Close() error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.closed = true
	var due []*jobLock
	for _, jl := range x.held {
		if jl.timer != nil && jl.timer.Stop() {
			due = append(due, jl)
		}
	}
	x.mu.Unlock()
	var errs []error
	for _, jl := range due {
		errs = append(errs, jl.release(context.Background()))
		x.later.Done()
	}
	x.later.Wait()
	return errors.Join(errs...)
}

// jobLock is the gocron.Lock of one run of a job.
type jobLock struct {
	x        *Locker
	job      string
	lk       locker.Lock
	minUntil time.Time // end of the minimum hold

	// Guarded by x.mu.
	unlocked bool
	timer    *time.Timer // the deferred release, once Unlock deferred it
}

// Unlock ends the run's hold: at once when the minimum hold has passed
// (or the Locker is closed), else when it passes, and then it returns nil
// at once. gocron calls it when the run ends.
func (jl *jobLock) Unlock(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	x := jl.x
	x.mu.Lock()
	if jl.unlocked {
		x.mu.Unlock()
		return fmt.Errorf("gocronlocker: unlock job %q: %w: unlocked already", jl.job, locker.ErrNotHeld)
	}
	jl.unlocked = true
	if wait := time.Until(jl.minUntil); wait > 0 && !x.closed {
		x.later.Add(1)
		jl.timer = time.AfterFunc(wait, func() {
			defer x.later.Done()
			jl.release(context.WithoutCancel(ctx))
		})
		x.mu.Unlock()
		return nil
	}
	x.mu.Unlock()
	return jl.release(ctx)
}

// release releases the lock and forgets it. A failure is logged as well
// as returned, as a deferred release has no caller to tell.
func (jl *jobLock) release(ctx context.Context) error {
	err := jl.lk.Release(ctx)
	x := jl.x
	x.mu.Lock()
	if x.held[jl.job] == jl {
		delete(x.held, jl.job)
	}
	x.mu.Unlock()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, locker.ErrNotHeld):
		// Lost before the release (validity ran out, the server dropped
		// it): another instance may have taken the key meanwhile.
		x.log.Warn("gocronlocker: a job's lock was lost before its release", "job", jl.job, "err", err)
	default:
		x.log.Warn("gocronlocker: a job's lock could not be released; it expires at its TTL", "job", jl.job, "err", err)
	}
	return fmt.Errorf("gocronlocker: unlock job %q: %w", jl.job, err)
}
