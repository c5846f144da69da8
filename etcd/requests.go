package etcd

import (
	"context"
	"reflect"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// The transactions every lock sends (the put of a queue entry, the
// compare-and-delete of an entry) are built as protobuf and sent on the
// client's connection directly when the client's KV is clientv3's own.
// clientv3's Txn builder costs about a dozen allocations per request more;
// measured on loopback, that was 1.5% of an uncontended Acquire+Release,
// where each allocation comes after a millisecond of waiting and finds
// cold caches. The requests are the ones the builder makes
// (TestRequestsMatchBuilder), sent with the call option clientv3 adds to
// every request, so that the server sees no difference.
//
// A client whose KV was replaced (namespace.NewKV, a wrapper) is used
// through its KV, so that the keys go where its KV puts them and its
// watches look.

// directKV returns the client's KV service on its connection, or nil if
// requests must go through cli.KV.
func directKV(cli *clientv3.Client) pb.KVClient {
	conn := cli.ActiveConnection()
	if conn == nil || reflect.TypeOf(cli.KV) != reflect.TypeOf(clientv3.NewKV(cli)) {
		return nil
	}
	return pb.NewKVClient(conn)
}

// callOpts are clientv3's for requests on its KV that matter here: wait
// for a connection rather than fail at once while one is being made.
var callOpts = []grpc.CallOption{grpc.WaitForReady(true)}

// send commits r on the direct connection, with errors as clientv3's
// Commit returns them.
func (d *driver) send(ctx context.Context, r *pb.TxnRequest) (*clientv3.TxnResponse, error) {
	resp, err := d.kv.Txn(ctx, r, callOpts...)
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return (*clientv3.TxnResponse)(resp), nil
}

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
// qp, in one transaction of the given form. The hook sees it ("put") just
// before it is sent.
func (d *driver) putEntry(ctx context.Context, form int, qp, key string, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
	hook("put", key, "")
	if d.kv == nil {
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
	return d.send(ctx, newPutTxn(form, qp, key, lease))
}

// txnBlock is a transaction with at most one compare, on create
// revisions, and one operation in its success branch, with everything
// they point to, so that a request takes one allocation instead of ten.
// It must not move once built.
type txnBlock struct {
	req  pb.TxnRequest
	cmps [1]*pb.Compare
	cmp  pb.Compare
	rev  pb.Compare_CreateRevision
	then [1]*pb.RequestOp
	op   pb.RequestOp
}

// ifCreated makes the transaction apply only if the keys from key up to
// end (key alone if end is nil) have create revision rev.
func (t *txnBlock) ifCreated(key, end []byte, rev int64) {
	t.rev.CreateRevision = rev
	t.cmp = pb.Compare{Result: pb.Compare_EQUAL, Target: pb.Compare_CREATE, Key: key, RangeEnd: end, TargetUnion: &t.rev}
	t.cmps[0] = &t.cmp
	t.req.Compare = t.cmps[:]
}

// thenOp makes t.op, whose Request the caller has set, the success branch.
func (t *txnBlock) thenOp() *pb.TxnRequest {
	t.then[0] = &t.op
	t.req.Success = t.then[:]
	return &t.req
}

// putTxn is a putEntry transaction in one block.
type putTxn struct {
	txnBlock
	opPut  pb.RequestOp_RequestPut
	put    pb.PutRequest
	orElse [1]*pb.RequestOp
	get    pb.RequestOp
	opGet  pb.RequestOp_RequestRange
	rng    pb.RangeRequest
}

func newPutTxn(form int, qp, key string, lease clientv3.LeaseID) *pb.TxnRequest {
	t := new(putTxn)
	// key, then the queue's range end; the queue prefix is the start of
	// key.
	b := make([]byte, len(key)+len(qp))
	copy(b, key)
	k, prefix, end := b[:len(key):len(key)], b[:len(qp):len(qp)], prefixEnd(b[len(key):], qp)
	t.put = pb.PutRequest{Key: k, Lease: int64(lease)}
	t.opPut.RequestPut = &t.put
	t.op.Request = &t.opPut
	req := t.thenOp()
	if form == putAlways {
		return req
	}
	t.ifCreated(prefix, end, 0) // the queue is empty
	if form == putIfFreeElseFirst {
		t.rng = pb.RangeRequest{
			Key: prefix, RangeEnd: end, Limit: 1,
			SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, KeysOnly: true,
		}
		t.opGet.RequestRange = &t.rng
		t.get.Request = &t.opGet
		t.orElse[0] = &t.get
		req.Failure = t.orElse[:]
	}
	return req
}

// prefixEnd writes into dst, as long as prefix, the end of the range of
// keys that start with prefix (clientv3.GetPrefixRangeEnd), and returns it.
func prefixEnd(dst []byte, prefix string) []byte {
	copy(dst, prefix)
	for i := len(dst) - 1; i >= 0; i-- {
		if dst[i] < 0xff {
			dst[i]++
			return dst[: i+1 : i+1]
		}
	}
	// All 0xff: every key from prefix on.
	return []byte{0}
}

// deleteEntry deletes key if its create revision is rev: the entry we put,
// never a later one under the same name.
func (d *driver) deleteEntry(ctx context.Context, key string, rev int64) (*clientv3.TxnResponse, error) {
	if d.kv == nil {
		return d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	}
	t := new(deleteTxn)
	return d.send(ctx, t.init([]byte(key), rev))
}

// deleteTxn is a deleteEntry transaction in one block. A held lock
// carries its own, made with it.
type deleteTxn struct {
	txnBlock
	opDel pb.RequestOp_RequestDeleteRange
	del   pb.DeleteRangeRequest
}

// init fills t in for key and rev and returns the request.
func (t *deleteTxn) init(key []byte, rev int64) *pb.TxnRequest {
	t.ifCreated(key, nil, rev)
	t.del.Key = key
	t.opDel.RequestDeleteRange = &t.del
	t.op.Request = &t.opDel
	return t.thenOp()
}
