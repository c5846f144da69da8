package etcd

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

var _ backend.Observer = (*driver)(nil)

// Observe implements backend.Observer: one watch on the key's queue
// prefix, puts and deletes, sends a notice for every watch response that
// carries events. Every change of the key's holders is a put or a delete
// of an entry there: a grant (a put, or the delete of the entry ahead),
// a release, an expiry (the lease's revoke deletes the entry), a force
// release, a SetValue (a put). So are changes that leave the holders as
// they were (a waiter joining or leaving, a Refresh moving an entry to
// another lease): those send notices too, and the observer finds nothing
// new.
//
// The watch is created before Observe returns (it waits for the server's
// created response), at the revision the server had then, so a
// linearizable read made after Observe returns (Inspect) misses no later
// change. The client resumes a watch whose connection broke from the
// revision it had reached, and nothing is missed; a watch that ends (the
// member lost its leader: the watch requires one, so that a member cut
// off from the cluster does not leave it silent; the revisions it would
// resume from were compacted; the server cancelled it) is created again
// at the current revision, after a pause that grows from 50 ms to 2 s
// while it fails, and sends a notice once it is in place. The watch ends
// with stop, which waits for its goroutine, with ctx, or with Close; ctx
// also bounds the wait for the first watch's creation.
func (d *driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if !d.track() {
		return nil, nil, errClosed
	}
	o := &observer{d: d, prefix: d.queuePrefix(key), events: make(chan struct{}, 1), done: make(chan struct{})}
	o.ctx, o.cancel = context.WithCancel(d.ctx)
	w, err := o.watch(ctx)
	if err != nil {
		o.cancel()
		d.wg.Done()
		return nil, nil, err
	}
	unhook := context.AfterFunc(ctx, o.cancel)
	go o.loop(w)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			unhook()
			o.cancel()
			<-o.done
		})
	}
	return o.events, stop, nil
}

// observer is one Observe call's watch.
type observer struct {
	d      *driver
	prefix string // the key's queue prefix
	events chan struct{}
	ctx    context.Context // ended by stop or Close: ends the watch
	cancel context.CancelFunc
	done   chan struct{} // closed when loop returns
}

var errWatchEnded = errors.New("the watch closed")

// keyWatch is one watch of an observer, and what ends it.
type keyWatch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// watch creates a watch and waits, as long as ctx lets it, for the server
// to say that it is in place.
func (o *observer) watch(ctx context.Context) (keyWatch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(o.ctx))
	w := keyWatch{ch: o.d.cli.Watch(wctx, o.prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()), cancel: cancel}
	var err error
	select {
	case wr, ok := <-w.ch:
		switch {
		case !ok:
			err = wrap(ctx, errWatchEnded)
		case wr.Err() != nil:
			err = wrap(ctx, wr.Err())
		case !wr.Created:
			err = errors.New("etcd: the watch answered before it was created")
		}
	case <-ctx.Done():
		err = ctx.Err()
	case <-o.ctx.Done():
		err = errClosed
	}
	if err != nil {
		w.end()
		return keyWatch{}, err
	}
	return w, nil
}

// end cancels the watch and waits until the client has closed its channel.
func (w keyWatch) end() {
	w.cancel()
	for range w.ch {
	}
}

// loop follows the watch, and creates it again each time it ends, until
// stop, the end of Observe's context, or Close.
func (o *observer) loop(w keyWatch) {
	defer o.d.wg.Done()
	defer close(o.done)
	for {
		err := o.follow(w.ch)
		w.end()
		if o.ctx.Err() != nil {
			return
		}
		o.d.log.Warn("locker/etcd: the watch of a key's holders ended, creating it again", "queue", o.prefix, "err", err)
		var ok bool
		if w, ok = o.rewatch(); !ok {
			return
		}
		o.notify() // changes may have been missed meanwhile
	}
}

// follow sends a notice for each response of the watch that carries
// events, until the watch ends.
func (o *observer) follow(wch clientv3.WatchChan) error {
	for wr := range wch {
		if len(wr.Events) > 0 {
			o.notify()
		}
		if err := wr.Err(); err != nil {
			return err
		}
	}
	return errWatchEnded
}

// rewatch creates the watch again, pausing before each try; false once
// the observer is stopped.
func (o *observer) rewatch() (keyWatch, bool) {
	backoff := minResync
	for {
		t := time.NewTimer(backoff)
		select {
		case <-o.ctx.Done():
			t.Stop()
			return keyWatch{}, false
		case <-t.C:
		}
		w, err := o.watch(o.ctx)
		if err == nil {
			return w, true
		}
		if o.ctx.Err() != nil {
			return keyWatch{}, false
		}
		o.d.log.Warn("locker/etcd: creating the watch of a key's holders failed, retrying", "queue", o.prefix, "err", err)
		backoff = min(2*backoff, maxResync)
	}
}

// notify sends a notice unless one is pending already.
func (o *observer) notify() {
	select {
	case o.events <- struct{}{}:
	default:
	}
}
