package locker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

// ErrNoLeader: an election has no leader now (Election.Leader).
var ErrNoLeader = errors.New("no leader")

// The operations of an Election, as OpError.Op names them.
const (
	opCampaign = "campaign"
	opProclaim = "proclaim"
	opResign   = "resign"
	opLeader   = "leader"
)

// Leader is an election's leader as its servers record it.
type Leader struct {
	// Value is the leader's value (Campaign, Proclaim); nil when none.
	Value []byte
	// Term is the leader's term, meaningful when Termed is true: its
	// lock's fence, strictly larger than every earlier leader's, so a
	// resource that rejects a term below the largest it has seen rejects
	// a deposed leader's writes. Termed is false where the backend mints
	// no fences (Redlock).
	Term   uint64
	Termed bool
	// Token is the leader's Lock.Token where the backend stores tokens
	// (memory, Redis, Redlock, PostgreSQL); "" elsewhere (ZooKeeper,
	// etcd).
	Token string
}

// Election is a leader election on one name of a Locker, in the shape of
// etcd's concurrency.Election: Campaign blocks until this client leads,
// Proclaim replaces the leader's value, Resign lets go, Leader reads who
// leads and Observe follows the changes.
//
// A leader is the exclusive holder of the name, a lock like any other: it
// is kept by the watchdog, lost at its validity's end (Lost closes) and
// freed within TTL plus the backend's slack when the leader crashes. Its
// term is its fence, so a resource that checks terms rejects a deposed
// leader's late writes; on Redlock there are no terms.
//
// An Election is safe for concurrent use, and leads at most once at a
// time: Campaign while it leads fails. Many Elections, in one process or
// many, campaign on one name; one leads at a time.
type Election struct {
	l    Locker
	name string
	opts []Option

	mu        sync.Mutex
	lead      Lock // while this Election leads
	campaigns int  // Campaign calls in flight
}

// NewElection returns an election on name, whose campaigns take name in l
// with opts (WithTTL, WithMaxHold, ...; Shared and Limit are refused by
// Campaign: a leader holds the name alone).
func NewElection(l Locker, name string, opts ...Option) *Election {
	return &Election{l: l, name: name, opts: opts}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this client leads the election with value, or ctx
// ends, and returns the leadership as a Lock: Lost closes when the
// leadership ends (Resign, a crash, validity run out), Fence is the term,
// SetValue is Proclaim and Release is Resign. A leader that finds itself
// deposed stops acting: after Lost closes, another may lead.
//
// Leadership is never reentrant: a Campaign waits for the leadership of
// any other campaigner, whatever owner ctx carries (WithOwner), another
// Election of the same Locker and owner included; the owner does not
// carry over to the leadership.
//
// Where the backend's grant may tell observers nothing (a plain SET on
// Redis and Redlock, a row on PostgreSQL), Campaign mints the term if the
// backend mints fences on demand, and sets the value once more before it
// returns, so that Observe hears of the new leader, with its term: one
// more round trip.
func (e *Election) Campaign(ctx context.Context, value []byte) (Lock, error) {
	if ctx == nil {
		return nil, opErr(opCampaign, e.name, errNilContext)
	}
	if e.l == nil {
		return nil, opErr(opCampaign, e.name, errors.New("nil Locker"))
	}
	var o options
	for _, f := range e.opts {
		if f != nil {
			f(&o)
		}
	}
	if o.shared || o.limitSet {
		return nil, opErr(opCampaign, e.name, errors.New("a leader holds the name alone: Shared and Limit do not apply to an election"))
	}
	e.mu.Lock()
	if e.lead != nil && e.lead.Err() == nil {
		e.mu.Unlock()
		return nil, opErr(opCampaign, e.name, errors.New("this Election leads already: Proclaim to change its value, or Resign first"))
	}
	if e.campaigns > 0 {
		e.mu.Unlock()
		return nil, opErr(opCampaign, e.name, errors.New("this Election is campaigning already"))
	}
	e.campaigns++
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.campaigns--
		e.mu.Unlock()
	}()

	opts := append(append([]Option(nil), e.opts...), WithValue(value))
	// Without the owner ctx may carry (an empty owner is none):
	// leadership is never reentrant. Under an owner, a second Election
	// of the owner's would get a handle on the first's hold, and two
	// Elections would lead at once with one term.
	lk, err := e.l.Acquire(WithOwner(ctx, ""), e.name, opts...)
	if err != nil {
		return nil, opErr(opCampaign, e.name, err)
	}
	if err := e.announce(ctx, lk, value); err != nil {
		lk.Release(context.WithoutCancel(ctx))
		return nil, opErr(opCampaign, e.name, err)
	}
	e.mu.Lock()
	e.lead = lk
	e.mu.Unlock()
	return lk, nil
}

// announce makes sure observers are told of a new leader, with its term.
// A grant that came with its fence (memory, ZooKeeper, etcd, and Redis
// when its script mints one) was announced by the backend. Otherwise the
// grant may have been one that tells no one (Redis, Redlock, PostgreSQL):
// announce mints the term where the backend mints fences on demand, then
// sets the value once more, which notifies observers.
func (e *Election) announce(ctx context.Context, lk Lock, value []byte) error {
	in, ok := innerLock(lk)
	if !ok || in.fenced {
		return nil
	}
	if e.l.Capabilities().Fencing {
		if _, ok := lk.Fence(); !ok {
			if err := lk.Err(); err != nil {
				return err
			}
			return fmt.Errorf("%w: the term (fence) could not be minted", ErrNotHeld)
		}
	}
	if _, isSetter := in.held.(backend.ValueSetter); !isSetter {
		return nil
	}
	return lk.SetValue(ctx, value)
}

// innerLock returns the *lock behind a Lock of this package.
func innerLock(l Lock) (*lock, bool) {
	switch v := l.(type) {
	case *lock:
		return v, true
	case *handle:
		return v.lock, true
	}
	return nil, false
}

// Leading returns the leadership Campaign won, while it lasts; nil when
// this Election does not lead.
func (e *Election) Leading() Lock {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lead == nil || e.lead.Err() != nil {
		return nil
	}
	return e.lead
}

// Proclaim replaces the leader's value, without an election: it fails with
// ErrNotHeld when this Election does not lead (or leads no longer).
func (e *Election) Proclaim(ctx context.Context, value []byte) error {
	lk := e.Leading()
	if lk == nil {
		return opErr(opProclaim, e.name, fmt.Errorf("%w: this Election does not lead", ErrNotHeld))
	}
	err := lk.SetValue(ctx, value)
	var oe *OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return opErr(opProclaim, e.name, err)
}

// Resign ends this Election's leadership, if it leads, so that another
// campaign may win at once. It returns nil when it does not lead.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	lk := e.lead
	e.lead = nil
	e.mu.Unlock()
	if lk == nil {
		return nil
	}
	err := lk.Release(ctx)
	if errors.Is(err, ErrNotHeld) {
		return nil // deposed already: nothing to resign
	}
	var oe *OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return opErr(opResign, e.name, err)
}

// Leader returns the election's leader as its servers record it now, or
// ErrNoLeader. It needs a backend that can inspect keys (every backend
// of this module can).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	h, err := Inspect(ctx, e.l, e.name)
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		return Leader{}, opErr(opLeader, e.name, err)
	}
	ldr, ok, err := leaderOf(h)
	if err != nil {
		return Leader{}, opErr(opLeader, e.name, err)
	}
	if !ok {
		return Leader{}, opErr(opLeader, e.name, ErrNoLeader)
	}
	return ldr, nil
}

// leaderOf reads the leader from what Inspect found of an election's name.
func leaderOf(h Holder) (Leader, bool, error) {
	if !h.Held || len(h.Holds) == 0 {
		return Leader{}, false, nil
	}
	first := h.Holds[0]
	if first.Kind != backend.Exclusive {
		return Leader{}, false, fmt.Errorf("%w: the name is held as a %s, not by a leader", ErrKindMismatch, first.Kind)
	}
	return Leader{Value: first.Value, Term: first.Fence, Termed: first.Fenced, Token: first.Token}, true, nil
}

// same reports whether two readings show one leader with one value.
func (l Leader) same(o Leader) bool {
	return l.Token == o.Token && l.Term == o.Term && l.Termed == o.Termed && bytes.Equal(l.Value, o.Value)
}

// Polling bounds of Observe.
const (
	// observePoll is how often Observe looks again on a backend that
	// cannot tell of changes (no backend.Observer).
	observePoll = time.Second
	// observeRetry is the first wait after a failed look, doubling up
	// to observePoll.
	observeRetry = 50 * time.Millisecond
)

// Observe returns a channel of the election's leaders, in order: the
// leader when Observe starts (if any), and then every new leader and every
// new value of one (Proclaim). It is closed when ctx ends.
//
// Each change is read from the servers after the backend tells of it: on
// ZooKeeper and etcd from watches, on Redis and Redlock from the notices
// their scripts publish, on PostgreSQL from the notices (NOTIFY) its
// releases and new values send, on memory from the store. A leader whose
// lock expires on Redis, Redlock or PostgreSQL (a crash) is seen when its
// TTL, as last read, runs out, as they tell of no expiry; a backend that
// tells of nothing is read once a second. Changes closer together than a
// round trip may be seen as one, the last; terms never go back. A slow
// reader delays the reading of later changes, not their order.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	go e.observe(ctx, ch)
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	defer close(ch)
	if ctx == nil {
		return
	}
	c, err := unwrapClient(e.l)
	if err != nil || c.checkKey(e.name) != nil {
		return
	}
	o := &observation{e: e, ch: ch, retry: observeRetry}
	if obs, ok := c.d.(backend.Observer); ok {
		ev, stop, err := obs.Observe(ctx, c.cfg.Prefix+e.name)
		if err == nil {
			o.events = ev
			defer stop()
		} else if ctx.Err() == nil {
			c.log.Warn("locker: election changes unavailable, polling instead", "name", e.name, "err", err)
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait, ok := o.look(ctx)
		if !ok {
			return
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait) // Go 1.23 timers: no stale tick after Reset
			tick = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-o.events:
		case <-tick:
		}
		timer.Stop()
	}
}

// observation is one Observe call's state between its looks at the key.
type observation struct {
	e      *Election
	ch     chan<- Leader
	events <-chan struct{} // the backend's notices; nil: none
	last   Leader          // the leader last sent
	seen   bool            // a leader was sent
	retry  time.Duration   // the wait after a failed look
}

// look reads the election's leader, sends it if it is new, and returns
// how long to wait for a notice before looking again (0: no longer than
// the next notice); false once ctx has ended.
func (o *observation) look(ctx context.Context) (time.Duration, bool) {
	h, err := Inspect(ctx, o.e.l, o.e.name)
	if ctx.Err() != nil {
		return 0, false
	}
	if err != nil {
		wait := o.retry
		o.retry = min(2*o.retry, observePoll)
		return wait, true
	}
	o.retry = observeRetry
	ldr, ok, _ := leaderOf(h)
	if ok && (!o.seen || !ldr.same(o.last)) && !(ldr.Termed && o.last.Termed && ldr.Term < o.last.Term) {
		select {
		case o.ch <- ldr:
		case <-ctx.Done():
			return 0, false
		}
		o.last, o.seen = ldr, true
	}
	switch {
	case o.events == nil:
		return observePoll, true
	case ok && h.TTLKnown:
		// Told of every change but an expiry: look when the leader
		// would expire unless refreshed.
		return h.TTL + minPoll, true
	}
	return 0, true
}

// opRun is Run's operation, as OpError.Op names it.
const opRun = "run"

// RunOption changes how Election.Run runs.
type RunOption func(*runOptions)

type runOptions struct {
	onNewLeader func(Leader)
}

// OnNewLeader makes Run call f with each leader Observe reports while Run
// runs, this Election's own leadership included: the leader when Run
// starts, every new leader and every new value of one. f is called on a
// goroutine of its own, one call at a time, and Run returns once the call
// in progress has.
func OnNewLeader(f func(Leader)) RunOption {
	return func(o *runOptions) { o.onNewLeader = f }
}

// Run leads whenever it can, until ctx ends or lead fails: it campaigns
// with value, calls lead with the leadership, resigns when lead returns,
// and campaigns again, as client-go's leaderelection.RunOrDie runs its
// OnStartedLeading with ReleaseOnCancel.
//
// lead's ctx is cancelled when the leadership is lost (context.Cause then
// wraps ErrNotHeld) or ctx ends: a leader stops acting once it is
// cancelled, as another may lead then. The leadership is resigned on
// every path out of lead: if lead panics (or calls runtime.Goexit), Run
// resigns and lets the panic go on, as Do releases its lock.
//
// What lead returns decides what follows: nil, or anything once its
// leadership was lost (a deposed leader's work fails for being deposed),
// and Run campaigns again; an error while it still leads, and Run returns
// that error, joined with Resign's. Run also returns when ctx ends, with
// ctx's error (lead's, if it returned one), and when Campaign fails (the
// Locker closed, the servers unreachable), with Campaign's error.
func (e *Election) Run(ctx context.Context, value []byte, lead func(ctx context.Context, l Lock) error, opts ...RunOption) error {
	switch {
	case ctx == nil:
		return opErr(opRun, e.name, errNilContext)
	case lead == nil:
		return opErr(opRun, e.name, errors.New("nil lead"))
	}
	var o runOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.onNewLeader != nil {
		octx, stop := context.WithCancel(ctx)
		observed := make(chan struct{})
		go func() {
			defer close(observed)
			for ldr := range e.Observe(octx) {
				o.onNewLeader(ldr)
			}
		}()
		defer func() {
			stop()
			<-observed
		}()
	}
	for {
		lk, err := e.Campaign(ctx, value)
		if err != nil {
			return err
		}
		again, err := e.term(ctx, lk, lead)
		if !again {
			return err
		}
		if err := ctx.Err(); err != nil {
			return opErr(opRun, e.name, err)
		}
	}
}

// term calls lead with lk, this Election's leadership, under a context
// cancelled when lk is lost, and resigns when lead returns or panics. It
// reports whether Run campaigns again, and otherwise the error Run
// returns.
func (e *Election) term(ctx context.Context, lk Lock, lead func(context.Context, Lock) error) (again bool, err error) {
	lctx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lk.Lost():
			cancel(opErr(opRun, e.name, fmt.Errorf("%w: the leadership was lost while lead was running", ErrNotHeld)))
		case <-lctx.Done():
		}
	}()
	var leadErr error
	// On every path out of lead, a panic included: the leadership ends
	// here, not when its TTL runs out.
	defer func() {
		cancel(nil)
		<-watched
		lost := errors.Is(context.Cause(lctx), ErrNotHeld)
		resignErr := e.Resign(context.WithoutCancel(ctx))
		switch {
		case leadErr != nil && !lost:
			again, err = false, errors.Join(leadErr, resignErr)
		case ctx.Err() != nil:
			again, err = false, opErr(opRun, e.name, ctx.Err())
		default:
			again = true
		}
	}()
	leadErr = lead(lctx, lk)
	return
}
