package redis

import (
	"context"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var (
	_ backend.ValueSetter = (*held)(nil)
	_ backend.Observer    = (*driver)(nil)
)

// SetValue implements backend.ValueSetter with one script call
// (redisconn.SetValue) that checks the token and replaces the value
// together, and publishes a change notice, even for an empty value on a
// lock that had none: package locker's Election announces a new term so.
// A mutex's hold taken without a value moves into the key's hash of
// holders when it gets one, with its TTL and its fence (see Values and
// observers in the package doc). Each call sends the next version of the
// value, so that of two calls at once the later one's value stays.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	ok, err := redisconn.SetValue(ctx, h.d.c, redisconn.ValueUpdate{Key: h.lkey, Token: h.token, Value: value,
		Version: h.versions.Add(1) + 1, FenceKey: fenceKey(h.key), Channel: changedOf(h.lkey)})
	if err == nil && !ok {
		err = backend.ErrNotHeld
	}
	return err
}

// Observe implements backend.Observer: it subscribes, on the Locker's
// subscriber connection, to the key's release channel (releases, releases
// by force) and to its change channel (grants made by a script, new
// values), and returns once the server has confirmed both. A mutex's hold
// taken by SET NX PX without a value publishes nothing; nor does an
// expiry (see Values and observers in the package doc).
func (d *driver) Observe(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	lkey := lockKey(key)
	events := make(chan struct{}, 1)
	stop, err := d.notify.WatchEach(ctx, events, channelOf(lkey), changedOf(lkey))
	if err != nil {
		return nil, nil, err
	}
	return events, stop, nil
}
