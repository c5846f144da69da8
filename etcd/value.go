package etcd

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker/backend"
)

// A hold's value (Request.Value) is the value of its queue entry: the
// acquisition puts the entry with it, SetValue puts it again, and Inspect
// reads it. Nothing else reads values: the queue's reads stay keys-only,
// and the claims are in the names (see claim.go).

var _ backend.ValueSetter = (*held)(nil)

// SetValue implements backend.ValueSetter: one transaction puts the value
// on our entry if its create revision is still ours, keeping the lease it
// is on (WithIgnoreLease: a SetValue never moves the entry, whatever move
// is in flight), and reads what the entry was. A failed comparison is
// ErrNotHeld, and nothing is written: an entry under our name with
// another create revision is someone else's. The put changes neither the
// create revision (the fence, the place in the queue) nor the lease, so
// the watch of held entries takes it for ours, as it takes a move.
//
// The entry read beside the put is judged as the watch would judge it:
// one of ours on a lease the lock is not on (put there by someone else)
// is lost, deleted as the watch would delete it, and SetValue returns
// ErrNotHeld, though that entry took the value for the moment before its
// delete.
func (h *held) SetValue(ctx context.Context, value []byte) error {
	if h.isDone() {
		return backend.ErrNotHeld
	}
	was := clientv3.OpGet(h.key, clientv3.WithKeysOnly())
	resp, err := h.d.cli.Txn(ctx).If(h.own()).
		Then(was, clientv3.OpPut(h.key, string(value), clientv3.WithIgnoreLease())).
		Else(was).
		Commit()
	if err != nil {
		// The put may have been applied: the caller may set it again.
		return wrap(ctx, err)
	}
	var kv *mvccpb.KeyValue
	if found := kvs(resp, 0); len(found) > 0 {
		kv = found[0]
	}
	switch h.judge(kv, resp.Header.Revision) {
	case entryDeleted:
		h.gone()
		return backend.ErrNotHeld
	case entryOverwritten:
		// Someone else's entry under our name: the name stays reserved.
		h.drop(h.finish())
		return backend.ErrNotHeld
	case entryElsewhere:
		h.lostElsewhere(errEntryMoved, kv.Lease)
		return backend.ErrNotHeld
	}
	return nil
}

// valueOf returns the value of entry kv, nil when it has none.
func valueOf(kv *mvccpb.KeyValue) []byte {
	if len(kv.Value) == 0 {
		return nil
	}
	return kv.Value
}
