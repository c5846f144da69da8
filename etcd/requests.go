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
	// putIfFreeElseQueue: only if the queue is empty; otherwise read the
	// whole queue (readQueue).
	putIfFreeElseQueue
	// putIfNoneSince: only if no entry of the queue was created after
	// revision since (so the queue is as read then, or shorter); otherwise
	// read the whole queue.
	putIfNoneSince
	// putAlways: join the queue, whatever is in it.
	putAlways
	// putAndRead: join the queue, and read the whole queue, our entry
	// included, in the same transaction.
	putAndRead
)

// putEntry puts a's queue entry, on its lease and with its value, into
// its lock's queue, in one transaction of the given form (since is
// putIfNoneSince's). The put hook sees it just before it is sent.
func (a *attempt) putEntry(ctx context.Context, form int, since int64) (*clientv3.TxnResponse, error) {
	qp, key := a.qp, a.key
	if h := testHooks.Load(); h != nil && h.Put != nil {
		h.Put(key)
	}
	t := a.d.cli.Txn(ctx)
	switch form {
	case putIfFree, putIfFreeElseFirst, putIfFreeElseQueue:
		t = t.If(clientv3.Compare(clientv3.CreateRevision(qp), "=", 0).WithPrefix())
	case putIfNoneSince:
		// A comparison over a range holds when it holds for every key in
		// it (and for none, when the range is empty).
		t = t.If(clientv3.Compare(clientv3.CreateRevision(qp), "<", since+1).WithPrefix())
	}
	put := clientv3.OpPut(key, a.value, clientv3.WithLease(a.l.id))
	if form == putAndRead {
		return t.Then(put, readQueue(qp)).Commit()
	}
	t = t.Then(put)
	switch form {
	case putIfFreeElseFirst:
		t = t.Else(clientv3.OpGet(qp, append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	case putIfFreeElseQueue, putIfNoneSince:
		t = t.Else(readQueue(qp))
	}
	return t.Commit()
}

// readQueue reads the keys of the queue whose prefix is qp, oldest first.
func readQueue(qp string, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpGet(qp, append([]clientv3.OpOption{clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithKeysOnly()}, opts...)...)
}

// deleteEntry deletes key if its create revision is rev: the entry we put,
// never a later one under the same name.
func (d *driver) deleteEntry(ctx context.Context, key string, rev int64) (*clientv3.TxnResponse, error) {
	return d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
}
