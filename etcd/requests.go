package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Forms of putEntry.
const (
	// putIfFree: only if the queue is empty.
	putIfFree = iota
	// putIfFreeElseFirst: only if the queue is empty; otherwise read its
	// first entry's key and create revision.
	putIfFreeElseFirst
	// putAlways: join the queue, whatever is in it.
	putAlways
)

// putEntry puts queue entry key, on lease, into the queue whose prefix is
// qp, in one transaction of the given form. The put hook sees it just before
// it is sent.
func (d *driver) putEntry(ctx context.Context, form int, qp, key string, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	if h := testHooks.Load(); h != nil && h.put != nil {
		h.put(key)
	}
	t := d.cli.Txn(ctx)
	if form != putAlways {
		t = t.If(clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix())
	}
	t = t.Then(clientv3.OpPut(key, "", clientv3.WithLease(lease)))
	if form == putIfFreeElseFirst {
		t = t.Else(clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	}
	return t.Commit()
}

// deleteEntry deletes key if its create revision is rev: the entry we put,
// never a later one under the same name.
func (d *driver) deleteEntry(ctx context.Context, key string, rev int64) (*clientv3.TxnResponse, error) {
	return d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
}
