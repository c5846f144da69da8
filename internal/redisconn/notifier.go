package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker/backend"
)

// subscribeTimeout bounds how long Watch waits for the server to confirm a
// subscription before the waiter falls back to polling. A variable for the
// tests that hold a confirmation back on purpose.
var subscribeTimeout = 2 * time.Second

// Notifier delivers release notices to the waiters of one Locker, and
// release and change notices to its observers (WatchEach), over a single
// subscriber connection, opened on the first Watch. A channel is
// subscribed while at least one waiter or observer watches it.
//
// Pub/sub messages are not stored: those published while the connection is
// down are lost. After a reconnect the notifier re-subscribes and wakes
// every waiter, so each looks at its key again; a waiter never depends on a
// message alone, since package locker also retries when the holder's TTL
// runs out.
//
// A subscription is ready when the server has confirmed its own SUBSCRIBE,
// not at the first subscribe confirmation for its channel: when a watch
// ends and another of the same channel starts at once, the confirmation of
// the old SUBSCRIBE can arrive after the new one was sent, and taking it
// for the new one would mark the new watch ready before the server has it
// (between the old UNSUBSCRIBE and the new SUBSCRIBE nobody is subscribed,
// and a release published then is lost). The server confirms every
// SUBSCRIBE and UNSUBSCRIBE, in order, so the notifier numbers the commands
// it sends for each channel on the connection and counts the confirmations.
type Notifier struct {
	c   Conn
	log *slog.Logger

	mu       sync.Mutex
	ps       PubSub // nil while disconnected
	running  bool   // the receive loop runs
	closed   bool
	subs     map[string]*subscription // by channel
	cmds     map[string]*channelCmds  // by channel, on the current connection
	stopLoop context.CancelFunc
	loopDone chan struct{}
	// want wakes a loop parked while the server was unreachable and
	// nobody watched: a watch started.
	want chan struct{}
}

// hooks let tests observe the package (set with setHooks, in its tests).
type hooks struct {
	parked func() // a notifier's loop parks: the server is unreachable and nobody watches
}

var testHooks atomic.Pointer[hooks]

// channelCmds counts the SUBSCRIBE and UNSUBSCRIBE commands sent for one
// channel on the current connection, and their confirmations so far.
type channelCmds struct{ sent, confirmed uint64 }

type subscription struct {
	watchers map[*watcher]struct{}
	// seq is the number of the SUBSCRIBE that serves this subscription
	// among its channel's commands on the current connection: the
	// confirmation that brings the count to seq is its own. 0: not sent
	// on this connection yet.
	seq       uint64
	confirmed bool
	ready     chan struct{} // closed when confirmed
	// resubscribed: confirmed again after a reconnect, when releases may
	// have been missed; the confirmation wakes the watchers.
	resubscribed bool
}

type watcher struct{ events chan struct{} }

func (w *watcher) wake() {
	select {
	case w.events <- struct{}{}:
	default:
	}
}

// NewNotifier returns a Notifier over c; it opens its connection on the
// first Watch.
func NewNotifier(c Conn, log *slog.Logger) *Notifier {
	return &Notifier{c: c, log: log, subs: map[string]*subscription{}, cmds: map[string]*channelCmds{}, want: make(chan struct{}, 1)}
}

// sentLocked records a SUBSCRIBE or UNSUBSCRIBE of channel sent on the
// current connection and returns its number; n.mu is held.
func (n *Notifier) sentLocked(channel string) uint64 {
	c := n.cmds[channel]
	if c == nil {
		c = &channelCmds{}
		n.cmds[channel] = c
	}
	c.sent++
	return c.sent
}

// brokenLocked gives up the current connection after a command could not
// be sent (it may have been sent in part): the receive loop sees it end,
// opens another and subscribes everything watched again; n.mu is held.
func (n *Notifier) brokenLocked(what, channel string, err error) {
	n.log.Debug("locker: redis "+what+" failed; reconnecting", "channel", channel, "err", err)
	n.ps.Interrupt()
}

// Watch subscribes to channel, waits until the server confirms, and
// returns a channel that receives (without blocking the notifier) after
// each message; stop ends the watch.
func (n *Notifier) Watch(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	events := make(chan struct{}, 1)
	stop, err := n.WatchInto(ctx, channel, events)
	if err != nil {
		return nil, nil, err
	}
	return events, stop, nil
}

// WatchInto is Watch delivering to the caller's channel, so that one
// waiter can watch the same channel on several servers. Sends never
// block: events should have a buffer of one.
func (n *Notifier) WatchInto(ctx context.Context, channel string, events chan struct{}) (func(), error) {
	w := &watcher{events: events}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, backend.ErrClosed
	}
	s := n.subs[channel]
	if s == nil {
		s = &subscription{watchers: map[*watcher]struct{}{}, ready: make(chan struct{})}
		n.subs[channel] = s
		select {
		case n.want <- struct{}{}:
		default:
		}
		if n.ps != nil {
			if err := n.ps.Subscribe(ctx, channel); err != nil {
				n.brokenLocked("subscribe", channel, err)
			} else {
				s.seq = n.sentLocked(channel)
			}
		}
	}
	s.watchers[w] = struct{}{}
	if !n.running {
		n.running = true
		lctx, cancel := context.WithCancel(context.Background())
		n.stopLoop = cancel
		n.loopDone = make(chan struct{})
		go n.loop(lctx)
	}
	ready := s.ready
	n.mu.Unlock()

	stop := func() { n.unwatch(channel, w) }
	t := time.NewTimer(subscribeTimeout)
	defer t.Stop()
	select {
	case <-ready:
		return stop, nil
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	case <-t.C:
		stop()
		return nil, fmt.Errorf("redis: subscription to release notices not confirmed within %v", subscribeTimeout)
	}
}

// WatchEach is WatchInto of each of channels, delivering to the one
// events channel: a message on any of them sends on it. It returns once
// the server has confirmed every subscription, and stop ends them all;
// when one fails, it ends those already made and returns the error.
func (n *Notifier) WatchEach(ctx context.Context, events chan struct{}, channels ...string) (func(), error) {
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for _, ch := range channels {
		stop, err := n.WatchInto(ctx, ch, events)
		if err != nil {
			stopAll()
			return nil, err
		}
		stops = append(stops, stop)
	}
	var once sync.Once
	return func() { once.Do(stopAll) }, nil
}

func (n *Notifier) unwatch(channel string, w *watcher) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	if s == nil {
		return
	}
	delete(s.watchers, w)
	if len(s.watchers) > 0 {
		return
	}
	delete(n.subs, channel)
	if n.ps != nil && !n.closed {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := n.ps.Unsubscribe(ctx, channel); err != nil {
			n.brokenLocked("unsubscribe", channel, err)
		} else {
			n.sentLocked(channel)
		}
	}
}

// loop owns the subscriber connection: it connects, subscribes what is
// watched, dispatches messages, and reconnects after errors.
func (n *Notifier) loop(ctx context.Context) {
	defer close(n.loopDone)
	backoff := 10 * time.Millisecond
	warned := false // about this outage
	for ctx.Err() == nil {
		ps, err := n.c.Subscribe(ctx)
		if err != nil && ctx.Err() != nil {
			return // closed: nothing to report
		}
		if err != nil {
			warned = n.unavailable(err, warned)
			if n.pause(ctx, backoff) {
				backoff = 10 * time.Millisecond
			} else {
				backoff = min(2*backoff, time.Second)
			}
			continue
		}
		backoff = 10 * time.Millisecond
		if warned {
			warned = false
			n.log.Info("locker: redis release notices available again")
		}
		if !n.attach(ctx, ps) {
			ps.Close()
			return
		}
		n.receive(ctx, ps)
		n.detach()
		ps.Close()
	}
}

// pause waits before the loop dials again after a failure: backoff while
// someone watches; while nobody does, until a watch starts, so that a
// server that is down is not dialled every second for nothing. It reports
// whether it parked so.
func (n *Notifier) pause(ctx context.Context, backoff time.Duration) (parked bool) {
	n.mu.Lock()
	watched := len(n.subs) > 0
	n.mu.Unlock()
	if watched {
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return false
	}
	if h := testHooks.Load(); h != nil && h.parked != nil {
		h.parked()
	}
	select {
	case <-ctx.Done():
	case <-n.want:
	}
	return true
}

// unavailable reports a failed connection and wakes every waiter, who
// falls back to the holder's TTL. It warns once an outage (warned says it
// did already), and not while nobody waits (the loop then parks until a
// watch starts; see pause). It returns whether it warned.
func (n *Notifier) unavailable(err error, warned bool) bool {
	n.mu.Lock()
	watched := len(n.subs) > 0
	n.mu.Unlock()
	if watched && !warned {
		warned = true
		n.log.Warn("locker: redis release notices unavailable; waiters fall back to the holder's TTL", "err", err)
	} else {
		n.log.Debug("locker: redis release notices still unavailable", "err", err)
	}
	n.wakeAll()
	return warned
}

// attach makes ps the current connection and subscribes there every
// channel watched, in one SUBSCRIBE (the server confirms each channel).
// It returns false if the notifier was closed meanwhile.
func (n *Notifier) attach(ctx context.Context, ps PubSub) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.ps = ps
	var chans []string
	for ch, s := range n.subs {
		chans = append(chans, ch)
		s.seq = n.sentLocked(ch)
	}
	if len(chans) > 0 {
		// Under n.mu, like every other subscribe: a connection takes one
		// writer at a time.
		if err := ps.Subscribe(ctx, chans...); err != nil {
			n.brokenLocked("subscribe", chans[0], err)
		}
	}
	return true
}

// detach forgets the connection that ended: every subscription must be
// confirmed again on the next one, where the commands are counted afresh.
func (n *Notifier) detach() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ps = nil
	clear(n.cmds)
	for _, s := range n.subs {
		s.seq = 0
		if s.confirmed {
			s.confirmed = false
			s.resubscribed = true
			s.ready = make(chan struct{})
		}
	}
}

func (n *Notifier) receive(ctx context.Context, ps PubSub) {
	for {
		ch, ev, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("locker: redis subscriber connection lost", "err", err)
			}
			return
		}
		n.mu.Lock()
		s := n.subs[ch]
		wake := false
		switch ev {
		case EventMessage:
			wake = true
		case EventSubscribed, EventUnsubscribed:
			c := n.cmds[ch]
			if c == nil || c.confirmed >= c.sent {
				break // not an answer to a command of ours
			}
			c.confirmed++
			if s != nil && !s.confirmed && s.seq == c.confirmed {
				// The confirmation of this subscription's own SUBSCRIBE.
				s.confirmed = true
				close(s.ready)
				// After a reconnect a release may have been missed while
				// unsubscribed: let the waiters look at their key again.
				wake = s.resubscribed
				s.resubscribed = false
			}
			if c.confirmed == c.sent && s == nil {
				delete(n.cmds, ch)
			}
		}
		if wake && s != nil {
			for w := range s.watchers {
				w.wake()
			}
		}
		n.mu.Unlock()
	}
}

func (n *Notifier) wakeAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.subs {
		for w := range s.watchers {
			w.wake()
		}
	}
}

func (n *Notifier) Close() {
	n.mu.Lock()
	n.closed = true
	ps, stop, done := n.ps, n.stopLoop, n.loopDone
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
	if ps != nil {
		ps.Interrupt() // ends a blocked receive; the loop closes ps
	}
	if done != nil {
		<-done
	}
}
