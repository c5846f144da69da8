package redisconn

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

// subscribeTimeout bounds how long Watch waits for the server to confirm a
// subscription before the waiter falls back to polling.
const subscribeTimeout = 2 * time.Second

// notifier delivers release notices to the waiters of one Locker over a
// single subscriber connection, opened on the first Watch. A channel is
// subscribed while at least one waiter watches it.
//
// Pub/sub messages are not stored: those published while the connection is
// down are lost. After a reconnect the notifier re-subscribes and wakes
// every waiter, so each looks at its key again; a waiter never depends on a
// message alone, since package locker also retries when the holder's TTL
// runs out.
type Notifier struct {
	c   Conn
	log *slog.Logger

	mu       sync.Mutex
	ps       PubSub // nil while disconnected
	running  bool   // the receive loop runs
	closed   bool
	subs     map[string]*subscription // by channel
	stopLoop context.CancelFunc
	loopDone chan struct{}
}

type subscription struct {
	watchers  map[*watcher]struct{}
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
	return &Notifier{c: c, log: log, subs: map[string]*subscription{}}
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
		if n.ps != nil {
			if err := n.ps.Subscribe(ctx, channel); err != nil {
				// The receive loop sees the broken connection and
				// re-subscribes everything on the next one.
				n.log.Debug("locker: redis subscribe failed", "channel", channel, "err", err)
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
			n.log.Debug("locker: redis unsubscribe failed", "channel", channel, "err", err)
		}
	}
}

// loop owns the subscriber connection: it connects, subscribes what is
// watched, dispatches messages, and reconnects after errors.
func (n *Notifier) loop(ctx context.Context) {
	defer close(n.loopDone)
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ps, err := n.c.Subscribe(ctx)
		if err != nil {
			n.log.Warn("locker: redis release notices unavailable; waiters fall back to the holder's TTL", "err", err)
			n.wakeAll()
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			ps.Close()
			return
		}
		n.ps = ps
		var chans []string
		for ch := range n.subs {
			chans = append(chans, ch)
		}
		if len(chans) > 0 {
			// Under n.mu, like every other subscribe: a connection takes
			// one writer at a time. A failure shows in receive.
			_ = ps.Subscribe(ctx, chans...)
		}
		n.mu.Unlock()
		n.receive(ctx, ps)
		n.mu.Lock()
		n.ps = nil
		// Every subscription must be confirmed again on the next connection.
		for _, s := range n.subs {
			if s.confirmed {
				s.confirmed = false
				s.resubscribed = true
				s.ready = make(chan struct{})
			}
		}
		n.mu.Unlock()
		ps.Close()
	}
}

func (n *Notifier) receive(ctx context.Context, ps PubSub) {
	for {
		ch, confirmed, err := ps.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				n.log.Debug("locker: redis subscriber connection lost", "err", err)
			}
			return
		}
		n.mu.Lock()
		s := n.subs[ch]
		if s != nil {
			wake := !confirmed
			if confirmed && !s.confirmed {
				s.confirmed = true
				close(s.ready)
				// After a reconnect a release may have been missed while
				// unsubscribed: let the waiters look at their key again.
				wake = s.resubscribed
				s.resubscribed = false
			}
			if wake {
				for w := range s.watchers {
					w.wake()
				}
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
