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
// qp, in one transaction of the given form.
func (d *driver) putEntry(ctx context.Context, form int, qp, key string, lease clientv3.LeaseID) (*clientv3.TxnResponse, error) {
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
	r := &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{
		RequestPut: &pb.PutRequest{Key: []byte(key), Lease: int64(lease)},
	}}}}
	if form == putAlways {
		return d.send(ctx, r)
	}
	prefix, end := []byte(qp), []byte(clientv3.GetPrefixRangeEnd(qp))
	r.Compare = []*pb.Compare{{
		Result: pb.Compare_EQUAL, Target: pb.Compare_CREATE, Key: prefix, RangeEnd: end,
		TargetUnion: &pb.Compare_CreateRevision{},
	}}
	if form == putIfFreeElseFirst {
		r.Failure = []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
			Key: prefix, RangeEnd: end, Limit: 1,
			SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE, KeysOnly: true,
		}}}}
	}
	return d.send(ctx, r)
}

// deleteEntry deletes key if its create revision is rev: the entry we put,
// never a later one under the same name.
func (d *driver) deleteEntry(ctx context.Context, key string, rev int64) (*clientv3.TxnResponse, error) {
	if d.kv == nil {
		return d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
	}
	k := []byte(key)
	return d.send(ctx, &pb.TxnRequest{
		Compare: []*pb.Compare{{
			Result: pb.Compare_EQUAL, Target: pb.Compare_CREATE, Key: k,
			TargetUnion: &pb.Compare_CreateRevision{CreateRevision: rev},
		}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &pb.DeleteRangeRequest{Key: k},
		}}},
	})
}
