package redlock

import (
	"context"
	"fmt"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var (
	_ backend.ValueSetter = (*held)(nil)
	_ backend.Observer    = (*driver)(nil)
)

// SetValue implements backend.ValueSetter: on every node at once, the
// script that replaces the value only where the node still holds our
// token (redisconn.SetValue), and publishes a change notice. It succeeds
// when as many nodes as hold the lock (its quorum) replaced it, and
// returns ErrNotHeld when too many said the hold is not theirs for a
// quorum to be left. Otherwise the value is set where it was, and the
// error names the nodes that failed. Each call sends the next version of
// the value, and a node keeps the latest version it was sent, so that the
// nodes agree again after calls that overlapped or failed part way, and
// Inspect reports the latest version among the holder's nodes.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	d := h.d
	u := redisconn.ValueUpdate{Key: lockKey(h.key), Token: h.token, Value: value, Version: h.versions.Add(1) + 1, Channel: changedOf(h.key)}
	set, errs := onQuorum(ctx, d, h.quorum, func(ctx context.Context, i int) (bool, error) {
		return redisconn.SetValue(ctx, d.nodes[i].c, u)
	})
	done, notOurs := 0, 0
	for i, ok := range set {
		switch {
		case errs[i] != nil:
		case ok:
			done++
		default:
			notOurs++
		}
	}
	switch {
	case done >= h.quorum:
		return nil
	case d.gone(notOurs, h.quorum):
		return fmt.Errorf("%w: %d of %d nodes no longer hold it", backend.ErrNotHeld, notOurs, len(d.nodes))
	}
	return fmt.Errorf("redlock: setting the value reached %d of %d nodes, %d needed (%s)", done, len(d.nodes), h.quorum, d.nodeErrors(outcomes(errs)))
}

// Observe implements backend.Observer: it subscribes to the key's release
// channel (releases, releases by force) and its change channel (grants
// made by a script, new values) on every node at once, and returns once a
// majority of nodes confirmed both. Every change of a holder is made on a
// majority of nodes at least, each of which publishes it, so one of the
// nodes watched hears it. The nodes that confirm later are watched too;
// one that cannot be reached is not (a majority still hears every change),
// and a node whose subscriber connection broke sends a notice once it is
// back. A mutex's hold taken by SET NX PX without a value publishes
// nothing, nor does an expiry (see Values and observers in the package
// doc).
func (d *driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	w := d.watch(ctx, channelOf(key), changedOf(key))
	if err := w.await(ctx); err != nil {
		w.stop()
		return nil, nil, err
	}
	return w.events, w.stop, nil
}
