package etcd

import (
	"context"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector: the lock's queue entries ordered
// by create revision, in one linearizable read. The first is the holder:
// its create revision is the fence (the holder's Lock.Fence), and the
// remaining TTL of its lease, in whole seconds as etcd counts them, is
// the TTL (unknown if the lease ended between the two reads). The rest
// are waiters. Tokens are not stored on the server.
//
// Detail: "queue", the etcd key prefix of the lock's queue; for a held
// key, "entry" (the holder's etcd key), "lease" (its id in hex) and "lease
// granted" (the TTL the lease was granted with, that of the lock).
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	qp := d.queuePrefix(key)
	first, n, err := d.first(ctx, qp)
	if err != nil {
		return backend.Holder{}, err
	}
	h := backend.Holder{WaitersKnown: true, Detail: map[string]string{"queue": qp}}
	if first == nil {
		return h, nil
	}
	h.Held = true
	h.Fence, h.Fenced = uint64(first.CreateRevision), true
	h.Waiters = n - 1
	h.Detail["entry"] = string(first.Key)
	if first.Lease == 0 {
		h.Detail["lease"] = "none"
		return h, nil
	}
	h.Detail["lease"] = strconv.FormatInt(first.Lease, 16)
	resp, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(first.Lease))
	if err != nil {
		return backend.Holder{}, wrap(ctx, err)
	}
	if resp.TTL >= 0 { // -1: the lease is gone
		h.TTL, h.TTLKnown = time.Duration(resp.TTL)*time.Second, true
		h.Detail["lease granted"] = (time.Duration(resp.GrantedTTL) * time.Second).String()
	}
	return h, nil
}

// first returns the first entry of the queue with prefix qp (nil when it
// is empty) and how many entries the queue has.
func (d *driver) first(ctx context.Context, qp string) (*mvccpb.KeyValue, int, error) {
	resp, err := d.cli.Get(ctx, qp, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...)
	if err != nil {
		return nil, 0, wrap(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, nil
	}
	return resp.Kvs[0], int(resp.Count), nil
}

// ForceRelease implements backend.Inspector: it deletes the first entry of
// the lock's queue, the holder's, on the condition that its create
// revision is still the one read, so that it never deletes a waiter's
// entry that has become first meanwhile; should the holder have let go
// in between, nothing is deleted and ForceRelease reports false. The
// waiter behind the holder watches its entry and is woken as by a
// release. The holder learns of it as soon as its Locker's watch delivers
// the deletion (for a lock held under 100 ms, when that watch starts and
// reads the held entries), and its Lost closes.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	first, _, err := d.first(ctx, d.queuePrefix(key))
	if err != nil || first == nil {
		return false, err
	}
	resp, err := d.deleteEntry(ctx, string(first.Key), first.CreateRevision)
	if err != nil {
		return false, wrap(ctx, err)
	}
	return resp.Succeeded, nil
}
