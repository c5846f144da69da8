package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

// The batched refresh the watchdog uses, on the driver itself: which
// requests go out, and what each lock is told.

// txnLog records the transactions a client sends; with only set, those
// sent with a context from marked alone.
type txnLog struct {
	only    bool
	mu      sync.Mutex
	reads   [][]string // the keys read by each transaction of reads alone
	writes  int        // other transactions
	refused int        // transactions the server refused as too large
}

func (r *txnLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	txn, ok := req.(*pb.TxnRequest)
	if !ok || (r.only && ctx.Value(markKey{}) == nil) {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rpctypes.Error(err) == rpctypes.ErrTooManyOps {
		r.refused++
		return err
	}
	var keys []string
	for _, op := range txn.Success {
		if rr := op.GetRequestRange(); rr != nil && len(txn.Compare) == 0 && len(txn.Failure) == 0 {
			keys = append(keys, string(rr.Key))
		} else {
			r.writes++
			return err
		}
	}
	r.reads = append(r.reads, keys)
	return err
}

type markKey struct{}

// marked returns a context whose requests a txnLog with only set records.
func marked() context.Context { return context.WithValue(context.Background(), markKey{}, true) }

// take returns what was recorded since the last take.
func (r *txnLog) take() (reads [][]string, writes, refused int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reads, writes, refused = r.reads, r.writes, r.refused
	r.reads, r.writes, r.refused = nil, 0, 0
	return reads, writes, refused
}

// batchDriver opens a driver on a client whose transactions log records,
// in a namespace of its own, which is emptied when the test ends.
func batchDriver(t *testing.T, hosts []string, log *txnLog) (d backend.Driver, ns string) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: hosts, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(log.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ns = uniqueKey("batch")
	t.Cleanup(func() {
		c.Delete(context.Background(), ns+"/", clientv3.WithPrefix())
		c.Close()
	})
	d = etcd.NewDriver(c, ns)
	t.Cleanup(func() { d.Close() })
	return d, ns
}

// takeMany acquires keys prefix0..prefix(n-1) with ttl on 16 goroutines,
// and releases them when the test ends.
func takeMany(t *testing.T, d backend.Driver, prefix string, n int, ttl time.Duration, onLost func(error)) []backend.Held {
	t.Helper()
	hs := make([]backend.Held, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				acq, err := d.TryAcquire(context.Background(), backend.Request{Key: fmt.Sprint(prefix, i), Token: "t", TTL: ttl, OnLost: onLost})
				hs[i], errs[i] = acq.Held, err
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, h := range hs {
			if h != nil {
				h.Release(context.Background())
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return hs
}

// entries returns the queue entries in namespace ns, by lock name among
// names.
func entries(t *testing.T, raw *clientv3.Client, ns string, names []string) map[string]*mvccpb.KeyValue {
	t.Helper()
	g, err := raw.Get(context.Background(), ns+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	byQueue := map[string]*mvccpb.KeyValue{}
	for _, kv := range g.Kvs {
		k := string(kv.Key)
		for i := len(k) - 1; i >= 0; i-- {
			if k[i] == '/' {
				byQueue[k[:i+1]] = kv
				break
			}
		}
	}
	out := map[string]*mvccpb.KeyValue{}
	for _, name := range names {
		if kv := byQueue[etcd.QueuePrefix(ns, name)]; kv != nil {
			out[name] = kv
		}
	}
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// batchLocks are the locks of TestRefreshBatch, as the server had them
// before it tampered with some.
type batchLocks struct {
	kept   []backend.Held // n locks "a/i" with the TTL ttl
	mover  backend.Held   // "mover/0", with ttl, to be refreshed to another TTL
	dead   []backend.Held // five "b/i" on a lease of their own, revoked
	names  []string       // the names of kept
	before map[string]*mvccpb.KeyValue
}

const (
	batchN   = 300 // kept locks: three transactions, of 128, 128 and 44 reads
	batchTTL = 10 * time.Second
	// Of the kept: one whose entry is deleted, one whose entry is put
	// again on no lease.
	batchDeleted, batchMoved = 200, 7
)

// takeBatchLocks acquires the locks of TestRefreshBatch, then deletes
// one entry, puts another on no lease, and revokes the lease of the dead
// ones, waiting until the driver has found them lost: the two kept ones
// through its watch, the dead ones at their lease's next keepalive.
func takeBatchLocks(t *testing.T, d backend.Driver, raw *clientv3.Client, ns string) batchLocks {
	t.Helper()
	ctx := context.Background()
	lost := make(chan error, 7)
	b := batchLocks{
		kept:  takeMany(t, d, "a/", batchN, batchTTL, func(err error) { lost <- err }),
		mover: takeMany(t, d, "mover/", 1, batchTTL, nil)[0],
		dead:  takeMany(t, d, "b/", 5, 20*time.Second, func(err error) { lost <- err }),
		names: names("a/", batchN),
	}
	all := append(append(slices.Clone(b.names), "mover/0"), names("b/", 5)...)
	if b.before = entries(t, raw, ns, all); len(b.before) != len(all) {
		t.Fatalf("%d queue entries for %d locks", len(b.before), len(all))
	}
	if _, err := raw.Delete(ctx, string(b.before[b.names[batchDeleted]].Key)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, string(b.before[b.names[batchMoved]].Key), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Revoke(ctx, clientv3.LeaseID(b.before["b/0"].Lease)); err != nil {
		t.Fatal(err)
	}
	for range len(b.dead) + 2 {
		select {
		case err := <-lost:
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Fatalf("a lock lost with %v, want ErrNotHeld", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the locks on a revoked lease, or whose entries were changed, were not reported lost within 30s")
		}
	}
	return b
}

// TestRefreshBatch: locks whose refresh keeps their lease cost no
// request; a lock whose entry was deleted behind its holder's back, or put
// on another lease, was reported lost by the watch and is told
// ErrNotHeld, the others stay held on their leases; a lock whose refresh
// changes its TTL moves to another lease on its own, as Refresh does; a
// lock whose lease is gone is told ErrNotHeld without a request.
func TestRefreshBatch(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))
	raw := rawClient(t, hosts...)
	log := txnLog{only: true} // the batch's requests, not the watcher's
	d, ns := batchDriver(t, hosts, &log)
	b := takeBatchLocks(t, d, raw, ns)

	// The mover and the dead among the kept, so that outcomes must find
	// their places: kept[i] is at i below 100, at i+3 from there.
	helds := slices.Concat(b.kept[:100], b.dead[:2], []backend.Held{b.mover}, b.kept[100:], b.dead[2:])
	ttls := slices.Repeat([]time.Duration{batchTTL}, len(helds))
	const moverAt = 102
	ttls[moverAt] = 30 * time.Second
	log.take()
	errs := d.(backend.BatchRefresher).RefreshBatch(marked(), helds, ttls)
	reads, writes, _ := log.take()

	for i := range batchN {
		at := i
		if i >= 100 {
			at += 3
		}
		checkOutcome(t, fmt.Sprint("lock ", i), errs[at], i == batchDeleted || i == batchMoved)
	}
	checkOutcome(t, "lock refreshed to another TTL", errs[moverAt], false)
	for _, i := range []int{100, 101, len(helds) - 3, len(helds) - 2, len(helds) - 1} {
		checkOutcome(t, fmt.Sprint("lock on a revoked lease, at ", i), errs[i], true)
	}
	if len(reads) > 0 {
		t.Errorf("%d transactions of reads; want none: the watch tells of changed entries", len(reads))
	}
	if writes != 1 {
		t.Errorf("%d transactions other than reads, want 1: the put that moves a lock to another TTL's lease", writes)
	}
	// The moved entry, still ours but on no lease of ours, is deleted by
	// the watcher that reported it, after the report.
	movedKey := string(b.before[b.names[batchMoved]].Key)
	testenv.WaitFor(t, 10*time.Second, "the entry put on no lease deleted", func() bool {
		resp, err := raw.Get(context.Background(), movedKey, clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	checkEntries(t, raw, ns, b.before, b.names, batchDeleted, batchMoved)

}

// checkOutcome checks a lock's outcome in a batch: nil, or, if notHeld,
// ErrNotHeld itself, as Refresh returns it.
func checkOutcome(t *testing.T, what string, err error, notHeld bool) {
	t.Helper()
	switch {
	case notHeld && err != backend.ErrNotHeld:
		t.Errorf("%s: %v, want ErrNotHeld as Refresh gives it", what, err)
	case !notHeld && err != nil:
		t.Errorf("%s: %v, want held", what, err)
	}
}

// checkEntries checks what a batch left on the server: the entries of the
// locks still held unchanged, on their leases, the mover's on a 30 s lease
// with its create revision, the lost ones' gone or left alone.
func checkEntries(t *testing.T, raw *clientv3.Client, ns string, before map[string]*mvccpb.KeyValue, aNames []string, deleted, moved int) {
	t.Helper()
	after := entries(t, raw, ns, append(slices.Clone(aNames), "mover/0", "b/0"))
	for i, name := range aNames {
		a, b := after[name], before[name]
		switch {
		case i == deleted:
			if a != nil {
				t.Errorf("the deleted entry of %s is back", name)
			}
		case i == moved:
			// Still ours (our create revision) but on no lease of ours:
			// nothing would end it, so the Locker deletes it.
			if a != nil {
				t.Errorf("entry of %s, put on no lease by someone else: %v; want it deleted by the Locker that lost it", name, a)
			}
		case a == nil || a.CreateRevision != b.CreateRevision || a.Lease != b.Lease:
			t.Errorf("entry of %s after the batch: %v; want create revision %d on lease %x, as before", name, a, b.CreateRevision, b.Lease)
		}
	}
	m := after["mover/0"]
	if m == nil || m.CreateRevision != before["mover/0"].CreateRevision || m.Lease == before["mover/0"].Lease {
		t.Fatalf("entry of the lock refreshed to another TTL: %v; want its create revision %d on another lease", m, before["mover/0"].CreateRevision)
	}
	if r, err := raw.TimeToLive(context.Background(), clientv3.LeaseID(m.Lease)); err != nil || r.GrantedTTL != 30 {
		t.Errorf("the moved entry's lease: %v, %v; want a 30s lease", r, err)
	}
	if after["b/0"] != nil {
		t.Error("an entry outlived its revoked lease")
	}
}

// TestLookTxnLimit: a server that takes fewer operations per transaction
// than etcd's default (--max-txn-ops) refuses the watcher's first look at
// every held entry in transactions of 128 reads; they are split, and later
// looks are sent in transactions it takes.
func TestLookTxnLimit(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	const n = 40
	g := newGapServer(t, "", "--max-txn-ops", "16")
	var log txnLog
	d, ns := batchDriver(t, []string{g.proxy.Addr()}, &log)
	g.ns = ns
	takeMany(t, d, "limit/", n, 10*time.Second, nil)
	// The looks at locks as they were taken may have been refused already.
	g.watching(t, "taken")
	_, _, refusedBefore := log.take()
	for round := range 2 {
		g.gap(t, func() {})
		reads, writes, refused := log.take()
		if round == 0 {
			refused += refusedBefore
		}
		var read int
		for _, r := range reads {
			if len(r) > 16 {
				t.Errorf("round %d: a transaction of %d reads went through a server that takes 16", round, len(r))
			}
			read += len(r)
		}
		if read != n || writes != 0 {
			t.Errorf("round %d: %d entries read, %d other transactions; want %d, none", round, read, writes, n)
		}
		if want := round == 0; (refused > 0) != want {
			t.Errorf("round %d: %d transactions refused as too large; want some only in the first round", round, refused)
		}
	}
}
