package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/backend"
)

var (
	_ backend.Observer    = (*driver)(nil)
	_ backend.ValueSetter = (*held)(nil)
)

// Observe implements backend.Observer with watches: a child watch on the
// key node, which fires when a hold is granted, released, expires with
// its session or is deleted by force, or a waiter joins or leaves (every
// one of them is a child created or deleted); and a data watch on each
// holder's node, which fires when the holder replaces its value
// (SetValue) or moves the lock to another session. While the key node
// does not exist, an exists watch waits for its creation in its place.
//
// A watch fires once. Each time one does, the observer sets it again
// (listing the queue again after a child watch, and watching the
// holders' nodes it finds), and only then sends its notice: an Inspect
// made after the notice sees the change, and every change after the
// watches were set again fires one of them. The first watches are set
// before Observe returns.
//
// Watches outlive a dropped connection: the connection sets them again on
// the next one, and the server fires at once those whose node changed
// meanwhile. A reconnect sends a notice all the same. A session that
// expires ends the watches; the observer sets them again in the new
// session and sends a notice. The watches live in one session of the
// Locker's (any that is open; one of inspectTTL if none is), which the
// observer keeps open until stopped.
//
// stop ends the observer's goroutine and takes its watches out of the
// connection's (see zkclient's Unwatch). On a Locker made with New, over
// go-zookeeper's connection, the watches stay until they fire, a reconnect
// sends no notice (go-zookeeper sets the watches again by itself), and
// each request waits for its reply on a goroutine of its own.
//
// ctx bounds the setting of the first watches only; the observer runs
// until stop, or until the Locker is closed.
func (d *driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s, err := d.inspectSession(ctx)
	if err != nil {
		return nil, nil, err
	}
	o := &observer{
		s:      s,
		parent: d.base + "/" + encodeKey(key),
		events: make(chan struct{}, 1),
		again:  make(chan struct{}, 1),
		data:   map[string]<-chan gozk.Event{},
		done:   make(chan struct{}),
	}
	s.observe(o.again)
	if err := o.arm(ctx); err != nil {
		o.forget()
		return nil, nil, fmt.Errorf("zookeeper: watch %s: %w", o.parent, err)
	}
	if !d.goBackground() {
		o.forget()
		return nil, nil, backend.ErrClosed
	}
	o.ctx, o.cancel = context.WithCancel(d.ctx)
	go o.run()
	var once sync.Once
	return o.events, func() {
		once.Do(func() {
			o.cancel()
			<-o.done
		})
	}, nil
}

// observer is one Observe call's watches on a key's queue, and the
// goroutine that sets them again after each fires.
type observer struct {
	s      *session // a reference is the observer's, until forget
	parent string   // the key node
	events chan struct{}
	again  chan struct{} // the session's reconnects (session.observe)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	// The watches set, each until it fires: on the key node (a child
	// watch, or while the node is missing an exists watch), and on the
	// holders' nodes, by path. holders are the holders the latest listing
	// found.
	key     <-chan gozk.Event
	holders []string
	data    map[string]<-chan gozk.Event
}

// arm sets again the watches that fired: the key node's (listing the
// queue, which tells the holders), then those on the holders' nodes that
// have none, all holders' after a listing. It stops at the first error;
// the watches set by then stay, and the next call sets the rest.
func (o *observer) arm(ctx context.Context) error {
	for {
		ep := o.s.epoch()
		if o.key == nil {
			listed, err := o.list(ctx, ep)
			if err != nil {
				return err
			}
			if !listed {
				continue // the key node came and went between two reads
			}
		}
		var paths []string
		for _, p := range o.holders {
			if o.data[p] == nil {
				paths = append(paths, p)
			}
		}
		got, err := o.s.getAll(ctx, ep, paths, true)
		if err != nil {
			return err
		}
		for i, g := range got {
			if g.Err == nil {
				o.data[paths[i]] = g.Event
			}
			// A holder's node that is gone fires the child watch, set
			// before, by its deletion.
		}
		return nil
	}
}

// list sets the child watch on the key node and takes the holders from
// the listing; or, with the key node missing, an exists watch on it, and
// no holders. false: it found the key node neither by listing nor by
// looking for it, and is to be called again.
func (o *observer) list(ctx context.Context, ep *epoch) (bool, error) {
	children, watch, err := o.s.childrenW(ctx, ep, o.parent)
	if err == nil {
		o.key = watch
		q := inQueueOrder(children)
		holders := make([]string, admitted(q))
		for i, n := range q[:len(holders)] {
			holders[i] = o.parent + "/" + n.name
		}
		o.setHolders(holders)
		return true, nil
	}
	if !errors.Is(err, gozk.ErrNoNode) {
		return false, err
	}
	exists, watch, err := o.s.existsW(ctx, ep, o.parent)
	if err != nil {
		return false, err
	}
	if exists {
		// Made since the listing: list it. The watch the read set is a
		// data watch on it, which tells nothing of the queue.
		o.s.unwatch(o.parent, watch)
		return false, nil
	}
	o.key = watch
	o.setHolders(nil)
	return true, nil
}

// setHolders makes holders the nodes whose data is watched, taking out
// the watches on nodes that hold no more.
func (o *observer) setHolders(holders []string) {
	for p, w := range o.data {
		if !slices.Contains(holders, p) {
			o.s.unwatch(p, w)
			delete(o.data, p)
		}
	}
	o.holders = holders
}

// run waits for a watch to fire or a reconnect, sets the watches again
// and sends a notice, until stopped.
func (o *observer) run() {
	defer o.s.d.wg.Done()
	defer close(o.done)
	defer o.forget()
	for {
		evs, reconnected, ok := o.wait()
		if !ok || !o.rearm() {
			return
		}
		if hk := testHooks.Load(); hk != nil && hk.observed != nil {
			hk.observed(o.parent, evs, reconnected, slices.Clone(o.holders))
		}
		select {
		case o.events <- struct{}{}:
		default: // a notice is pending already
		}
	}
}

// wait waits until a watch fires or the connection reconnects, and takes
// out of the observer's watches every one that fired by then. It returns
// the events of those, and whether a reconnect woke it; ok is false when
// the observer is stopped.
func (o *observer) wait() (evs []gozk.Event, reconnected, ok bool) {
	const stopped, again, watches = 0, 1, 2
	cases := []reflect.SelectCase{
		stopped: {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(o.ctx.Done())},
		again:   {Dir: reflect.SelectRecv, Chan: reflect.ValueOf(o.again)},
	}
	var paths []string // of the watches from cases[watches] on; "" for the key node's
	if o.key != nil {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(o.key)})
		paths = append(paths, "")
	}
	for p, w := range o.data {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		paths = append(paths, p)
	}
	chosen, v, _ := reflect.Select(cases)
	switch {
	case chosen == stopped:
		return nil, false, false
	case chosen == again:
		reconnected = true
	case paths[chosen-watches] == "":
		o.key = nil
		evs = append(evs, v.Interface().(gozk.Event))
	default:
		delete(o.data, paths[chosen-watches])
		evs = append(evs, v.Interface().(gozk.Event))
	}
	// Whatever else fired meanwhile is set again in the same round.
	if ev, ok := firedEvent(o.key); ok {
		o.key = nil
		evs = append(evs, ev)
	}
	for p, w := range o.data {
		if ev, ok := firedEvent(w); ok {
			delete(o.data, p)
			evs = append(evs, ev)
		}
	}
	return evs, reconnected, true
}

// firedEvent returns the event of the watch ch, if it has fired (a nil
// ch has not).
func firedEvent(ch <-chan gozk.Event) (gozk.Event, bool) {
	select {
	case ev := <-ch:
		return ev, true
	default:
		return gozk.Event{}, false
	}
}

// Pauses between tries to set the watches again, while the connection
// is down or the server refuses.
const (
	rearmFirst = 50 * time.Millisecond
	rearmMax   = time.Second
)

// rearm sets the watches again, trying until it succeeds or the observer
// is stopped (false).
func (o *observer) rearm() bool {
	pause := rearmFirst
	for {
		err := o.arm(o.ctx)
		if err == nil {
			return true
		}
		if o.ctx.Err() != nil {
			return false
		}
		o.s.d.log.Debug("locker/zookeeper: setting an observer's watches again", "key node", o.parent, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-o.ctx.Done():
			t.Stop()
			return false
		}
		pause = min(2*pause, rearmMax)
	}
}

// forget takes the observer's watches out of the connection's and lets
// the session go.
func (o *observer) forget() {
	o.s.unobserve(o.again)
	if o.key != nil {
		o.s.unwatch(o.parent, o.key)
	}
	for p, w := range o.data {
		o.s.unwatch(p, w)
	}
	o.s.unref()
}
