package etcd

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector: the lock's queue entries ordered
// by create revision, in one linearizable read, judged by backend.Admit
// from the claims their names carry, as the waiters judge themselves. The
// entries it admits are the holders (Holder.Holds), always the first ones,
// in queue order, which is the order they were granted in; the rest are
// the waiters (Holder.Queue), in queue order, including one that
// disagrees with the key and is about to remove itself. A holder's create
// revision is its fence (its Lock.Fence), and the remaining TTL of its
// lease, in whole seconds as etcd counts them, is its TTL (unknown if the
// lease ended between the reads). Each holder's value is its entry's
// (Hold.Value; Holder.Value is the first holder's); the waiters' values
// are not read. Tokens are not stored on the server.
//
// Detail: "queue", the etcd key prefix of the lock's queue; for a held
// key, the first holder's "entry" (its etcd key), "lease" (its id in hex)
// and "lease granted" (the TTL the lease was granted with, that of the
// lock). Each Hold's Detail has its own "entry" and "lease", and a
// holder's "lease granted".
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	qp := d.queuePrefix(key)
	kvs, holders, cs, err := d.queueWithValues(ctx, qp)
	if err != nil {
		return backend.Holder{}, err
	}
	h := backend.Holder{WaitersKnown: true, Detail: map[string]string{"queue": qp}}
	ttls := map[int64]*clientv3.LeaseTimeToLiveResponse{} // by lease: holders may share one
	for i, kv := range kvs {
		hd := backend.Hold{Kind: cs[i].Kind, Limit: cs[i].Limit, Weight: cs[i].Weight,
			Detail: map[string]string{"entry": string(kv.Key), "lease": "none"}}
		if kv.Lease != 0 {
			hd.Detail["lease"] = strconv.FormatInt(kv.Lease, 16)
		}
		if i >= holders {
			h.Queue = append(h.Queue, hd)
			continue
		}
		hd.Fence, hd.Fenced = uint64(kv.CreateRevision), true
		hd.Value = valueOf(kv)
		if kv.Lease != 0 {
			ttl, ok := ttls[kv.Lease]
			if !ok {
				if ttl, err = d.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err != nil {
					return backend.Holder{}, wrap(ctx, err)
				}
				ttls[kv.Lease] = ttl
			}
			if ttl.TTL >= 0 { // -1: the lease is gone
				hd.TTL, hd.TTLKnown = time.Duration(ttl.TTL)*time.Second, true
				hd.Detail["lease granted"] = (time.Duration(ttl.GrantedTTL) * time.Second).String()
			}
		}
		h.Holds = append(h.Holds, hd)
	}
	h.Waiters = len(h.Queue)
	if len(h.Holds) > 0 {
		first := h.Holds[0]
		h.Held = true
		h.Fence, h.Fenced = first.Fence, true
		h.Value = first.Value
		h.TTL, h.TTLKnown = first.TTL, first.TTLKnown
		maps.Copy(h.Detail, first.Detail)
	}
	return h, nil
}

// queue returns the entries of the queue with prefix qp, oldest first.
func (d *driver) queue(ctx context.Context, qp string) ([]*mvccpb.KeyValue, error) {
	resp, err := d.cli.Get(ctx, qp, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithKeysOnly())
	if err != nil {
		return nil, wrap(ctx, err)
	}
	return resp.Kvs, nil
}

// queueWithValues returns the entries of the queue with prefix qp, oldest
// first, as of one revision, how many of them hold the lock (admitted)
// and their claims; the holders' entries carry their values, the others
// are keys only. The waiters' values are not read, so that a reader of a
// busy key (an Election's Observe, after every change) does not fetch the
// value of every candidate queued.
//
// One transaction reads the queue's keys and the first entry with its
// value: that is all for a key held by one holder, an exclusive one
// always. Several holders (shared, permits) have their values read by a
// second request at the first one's revision, repeated from the start
// should that revision have been compacted in between.
func (d *driver) queueWithValues(ctx context.Context, qp string) (q []*mvccpb.KeyValue, holders int, cs []backend.Claim, err error) {
	for tries := 1; ; tries++ {
		resp, err := d.cli.Txn(ctx).Then(readQueue(qp), clientv3.OpGet(qp, clientv3.WithFirstCreate()...)).Commit()
		if err != nil {
			return nil, 0, nil, wrap(ctx, err)
		}
		q = kvs(resp, 0)
		holders, cs = admitted(qp, q)
		if holders <= 1 {
			withValues(q, kvs(resp, 1))
			return q, holders, cs, nil
		}
		g, err := d.cli.Get(ctx, qp, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
			clientv3.WithLimit(int64(holders)), clientv3.WithRev(resp.Header.Revision))
		if errors.Is(err, rpctypes.ErrCompacted) && tries < 3 {
			continue
		}
		if err != nil {
			return nil, 0, nil, wrap(ctx, err)
		}
		withValues(q, g.Kvs)
		return q, holders, cs, nil
	}
}

// withValues replaces the first entries of q, read keys only, by the same
// entries read with their values, vs, oldest first.
func withValues(q, vs []*mvccpb.KeyValue) {
	for i, v := range vs {
		if i < len(q) && string(q[i].Key) == string(v.Key) && q[i].CreateRevision == v.CreateRevision {
			q[i] = v
		}
	}
}

// ForceRelease implements backend.Inspector: it deletes the entries of
// the lock's holders, as Inspect finds them, each on the condition that
// its create revision is still the one read, so that it never deletes a
// waiter's entry, not even one granted meanwhile under a reused name;
// should every holder have let go in between, nothing is deleted and
// ForceRelease reports false. The waiters watching those entries are
// woken as by a release. Each holder learns of it as soon as its Locker's
// watch delivers the deletion (for a lock held under 100 ms, when that
// watch starts and reads the held entries), and its Lost closes.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	qp := d.queuePrefix(key)
	kvs, err := d.queue(ctx, qp)
	if err != nil {
		return false, err
	}
	holders, _ := admitted(qp, kvs)
	released := false
	for _, kv := range kvs[:holders] {
		resp, err := d.deleteEntry(ctx, string(kv.Key), kv.CreateRevision)
		if err != nil {
			return released, wrap(ctx, err)
		}
		released = released || resp.Succeeded
	}
	return released, nil
}
