// Package gocronlocker makes the schedulers of github.com/go-co-op/gocron/v2
// coordinate through a locker.Locker, on any backend of package locker:
// per-job locks (gocron.WithDistributedLocker, WithDistributedJobLocker)
// with [NewLocker], and a leader that alone runs every job
// (gocron.WithDistributedElector) with [NewElector].
//
// It lives in a module of its own, so that programs using package locker
// without gocron never download gocron.
//
// # Job locks: each tick runs once
//
// Before every run of a job, gocron asks each instance's Locker for a lock
// keyed by the job's name (only the name: gocron tells the Locker nothing
// about which tick is due). The instance that gets it runs the job; the
// others get an error and skip that tick. [Locker.Lock] makes one attempt
// (TryAcquire): a key held elsewhere means that the tick runs, or ran,
// on another instance.
//
// Releasing the key as soon as a short job ends would let an instance
// whose tick fires a little later (its clock, a timer firing late, a busy
// process) take the same key again and run the same tick a second time.
// So a job's lock is held until the run ends and at least [WithMinHold]
// after it was acquired, whichever is later; the watchdog of package
// locker keeps it meanwhile. The guarantee, for a job whose ticks are due
// at the same instants on every instance (a cron schedule, or a duration
// job started at a common instant with gocron.WithStartAt):
//
//   - A tick runs at most once across the instances when every instance
//     asks for its lock within the minimum hold of the first one's
//     acquisition: clock skew plus firing delay below WithMinHold.
//   - A tick runs at least once when some instance asks for the lock after
//     the previous tick's hold ended: the previous run ended, and the
//     minimum hold plus a release's round trip passed, before the tick is
//     due. A run that lasts past the next tick makes every instance skip
//     that tick, as gocron's singleton mode does on one instance.
//
// Choose a minimum hold of about half the job's interval (or of the
// shortest interval among the jobs of a scheduler; give jobs with very
// different intervals Lockers of their own, gocron.WithDistributedJobLocker).
// Without WithMinHold the key is released when the run ends, gocron's own
// meaning of a job lock: the runs of a job never overlap across instances,
// but a tick may run more than once.
//
// The limits: an instance whose clock is further off than the minimum
// hold runs its ticks at other instants than the others, and may run a
// tick again; gocron documents the same of every Locker. An instance that
// fails to reach the backend skips the tick (it never runs a job without
// the lock), so a tick may also run nowhere. And a lock is a lease: an
// instance paused past the lock's TTL in the middle of a run (a long GC
// pause, a stopped VM) may still be running when another instance takes
// the key for the next tick. A job that writes somewhere that must not
// see two runs at once passes [Locker.Held]'s fence to the resource.
//
// # Leader election: one instance runs every job
//
// [NewElector] campaigns for a name (locker.NewElection) in the background,
// for as long as it is open: IsLeader says yes while it leads, that is
// while its leadership lock is held and within its validity, and no
// otherwise. When the leadership is lost (its refreshes failed, the server
// dropped it), the Elector campaigns again. [Elector.Close] resigns, so
// another instance leads at once; a crashed leader is replaced within
// the TTL plus the backend's expiry slack. Stop an instance by
// shutting its scheduler down first and then closing its Elector, so that
// no run of its starts after it resigned.
//
// A leader may be deposed while a job of its runs: gocron asks IsLeader
// before a run, not during it. [Elector.Leadership] gives the job the
// leadership's lock: its fence is the leader's term, and Lost closes when
// it ends.
//
// # Errors
//
// Locker.Lock's errors wrap package locker's: locker.ErrNotAcquired when
// another instance holds the job's key. IsLeader's errors wrap
// [ErrNotLeader]. Calls after Close fail with errors wrapping
// locker.ErrClosed.
package gocronlocker
