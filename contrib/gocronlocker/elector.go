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

// ErrNotLeader is wrapped by IsLeader's errors: this instance does not
// lead, so gocron skips the run.
var ErrNotLeader = errors.New("not the leader")

// How long a failed campaign waits before the next: from campaignRetry,
// doubling up to campaignRetryMax.
const (
	campaignRetry    = 50 * time.Millisecond
	campaignRetryMax = 5 * time.Second
)

// Elector is a gocron.Elector over a locker.Election: it campaigns in the
// background from NewElector to Close, and leads while it holds the
// election's name. Give each instance's scheduler its own, over the
// instance's locker.Locker, with the same name. It is safe for concurrent
// use.
type Elector struct {
	election *locker.Election
	value    []byte
	log      *slog.Logger
	cancel   context.CancelFunc
	done     chan struct{} // closed when the campaign goroutine ends

	mu      sync.Mutex
	lead    locker.Lock // the leadership, while this Elector leads
	stopped error       // why campaigning stopped for good, if it did
	closed  bool        // Close was called
	resign  error       // the resignation's outcome, once done is closed
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning for name in l, where every instance's
// Elector campaigns, and returns at once: IsLeader says no until the
// campaign is won. It does not own l: close l after the Elector.
func NewElector(l locker.Locker, name string, opts ...ElectorOption) (*Elector, error) {
	if l == nil {
		return nil, fmt.Errorf("gocronlocker: NewElector: %w", errNilLocker)
	}
	if name == "" {
		return nil, fmt.Errorf("gocronlocker: NewElector: %w: empty election name", locker.ErrInvalidKey)
	}
	c, err := resolveElector(opts)
	if err != nil {
		return nil, fmt.Errorf("gocronlocker: NewElector %q: %w", name, err)
	}
	if maxLen := l.Capabilities().MaxValueLen; maxLen > 0 && len(c.value) > maxLen {
		return nil, fmt.Errorf("gocronlocker: NewElector %q: %w: WithValue of %d bytes, longer than the %d this backend stores",
			name, locker.ErrInvalidValue, len(c.value), maxLen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{
		election: locker.NewElection(l, name, c.lockOptions()...),
		value:    c.value,
		log:      c.logger.With("election", name),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	if len(e.value) > 0 && l.Capabilities().MaxValueLen == 0 {
		e.log.Info("gocronlocker: the backend stores no values; campaigning without the value of WithValue")
		e.value = nil
	}
	go e.campaign(ctx)
	return e, nil
}

// IsLeader returns nil while this Elector leads: its leadership lock is
// held (Lost is not closed) and within its validity on this process's
// clock (Until). Otherwise it returns an error wrapping ErrNotLeader, and
// after Close one that also wraps locker.ErrClosed. ctx is not used: the
// answer is local, with no round trip.
func (e *Elector) IsLeader(ctx context.Context) error {
	_, err := e.leadership()
	return err
}

// Leadership returns the leadership's lock while this Elector leads, nil
// otherwise: a job that must not act once deposed checks its Lost, and a
// resource that checks terms gets its Fence.
func (e *Elector) Leadership() locker.Lock {
	lk, _ := e.leadership()
	return lk
}

// leadership returns the leadership while this Elector leads, or why it
// does not.
func (e *Elector) leadership() (locker.Lock, error) {
	e.mu.Lock()
	lk, stopped := e.lead, e.stopped
	e.mu.Unlock()
	name := e.election.Name()
	switch {
	case stopped != nil:
		return nil, fmt.Errorf("gocronlocker: %w of %q: %w", ErrNotLeader, name, stopped)
	case lk == nil:
		return nil, fmt.Errorf("gocronlocker: %w of %q", ErrNotLeader, name)
	case lk.Err() != nil:
		return nil, fmt.Errorf("gocronlocker: %w of %q any more: %w", ErrNotLeader, name, lk.Err())
	case !time.Now().Before(lk.Until()):
		return nil, fmt.Errorf("gocronlocker: %w of %q any more: the leadership's validity ran out", ErrNotLeader, name)
	}
	return lk, nil
}

// Close stops campaigning and resigns, so that another instance leads at
// once, and returns the resignation's error, if any. IsLeader says no from
// the moment Close is called. Call it after the scheduler's Shutdown, so
// that no run starts here after another instance took over. A second
// Close returns nil.
func (e *Elector) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.stopped = fmt.Errorf("elector closed: %w", locker.ErrClosed)
	e.mu.Unlock()
	e.cancel()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resign
}

// campaign is the Elector's goroutine: it campaigns, leads until the
// leadership is lost, and campaigns again, until ctx ends; then it
// resigns.
func (e *Elector) campaign(ctx context.Context) {
	defer close(e.done)
	retry := campaignRetry
	for {
		lk, err := e.election.Campaign(ctx, e.value)
		if ctx.Err() != nil {
			break // Close; a campaign won meanwhile is resigned below
		}
		if err != nil {
			if !e.campaignFailed(err) {
				break
			}
			if !sleep(ctx, retry) {
				break
			}
			retry = min(2*retry, campaignRetryMax)
			continue
		}
		retry = campaignRetry
		e.setLead(lk)
		select {
		case <-lk.Lost():
			e.log.Warn("gocronlocker: leadership lost; campaigning again", "err", lk.Err())
			e.setLead(nil)
			// The server may still hold the name (a refresh went
			// unanswered): free it rather than wait out its TTL.
			e.election.Resign(ctx)
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	e.setLead(nil)
	err := e.election.Resign(context.Background())
	if errors.Is(err, locker.ErrClosed) {
		err = nil // closing the Locker released the leadership
	}
	e.mu.Lock()
	e.resign = err
	e.mu.Unlock()
}

// campaignFailed handles a failed campaign, and reports whether to try
// again.
func (e *Elector) campaignFailed(err error) bool {
	switch {
	case errors.Is(err, locker.ErrUnsupported) && len(e.value) > 0:
		e.log.Info("gocronlocker: the backend stores no values; campaigning without the value of WithValue", "err", err)
		e.value = nil
	case errors.Is(err, locker.ErrClosed):
		e.log.Error("gocronlocker: the Locker is closed; campaigning stops", "err", err)
		e.mu.Lock()
		if !e.closed {
			e.stopped = fmt.Errorf("campaigning stopped: %w", err)
		}
		e.mu.Unlock()
		return false
	default:
		e.log.Warn("gocronlocker: campaign failed; trying again", "err", err)
	}
	return true
}

func (e *Elector) setLead(lk locker.Lock) {
	e.mu.Lock()
	e.lead = lk
	e.mu.Unlock()
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
