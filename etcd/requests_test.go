package etcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/namespace"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/locker/internal/testenv"
)

// TestRequestsMatchBuilder: the transactions the driver builds as protobuf
// are, byte for byte, the ones clientv3's Txn builder makes for a client
// whose KV is replaced, and fail the same way when the context has ended.
func TestRequestsMatchBuilder(t *testing.T) {
	var (
		mu   sync.Mutex
		sent [][]byte
	)
	capture := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*pb.TxnRequest); ok {
			b, err := r.Marshal()
			if err != nil {
				return err
			}
			mu.Lock()
			sent = append(sent, b)
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL)),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(capture)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	g, err := c.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Revoke(ctx, g.ID)

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	direct := newDriver(c, false, "test", time.Second, log)
	defer direct.Close()
	if direct.kv == nil {
		t.Fatal("a client with clientv3's own KV is not sent to directly")
	}
	built := newDriver(c, false, "test", time.Second, log)
	defer built.Close()
	built.kv = nil

	ns := clientv3.NewCtxClient(ctx)
	ns.KV = namespace.NewKV(c.KV, "ns/")
	if directKV(ns) != nil {
		t.Error("a client without a connection is sent to directly")
	}
	wrapped := *c
	wrapped.KV = namespace.NewKV(c.KV, "ns/")
	if directKV(&wrapped) != nil {
		t.Error("a client whose KV is namespaced is sent to directly: its keys would miss the namespace")
	}

	qp := fmt.Sprintf("test/requests/%d/", time.Now().UnixNano())
	key := qp + "entry"
	// Each case sends one transaction; rev is a create revision from an
	// earlier case (the requests are compared, not their outcome).
	var rev int64
	cases := []struct {
		name string
		send func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error)
	}{
		{"put if free", func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error) {
			return d.putEntry(ctx, putIfFree, qp, key, g.ID)
		}},
		{"put if free, else first", func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error) {
			return d.putEntry(ctx, putIfFreeElseFirst, qp, key, g.ID)
		}},
		{"put", func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error) {
			return d.putEntry(ctx, putAlways, qp, key, g.ID)
		}},
		{"delete if ours", func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error) {
			return d.deleteEntry(ctx, key, rev)
		}},
		{"release", func(d *driver, ctx context.Context) (*clientv3.TxnResponse, error) {
			return d.newHeld(key, rev, nil, nil).deleteEntry(ctx)
		}},
	}
	for _, tc := range cases {
		var got [2][]byte
		for i, d := range []*driver{direct, built} {
			mu.Lock()
			sent = nil
			mu.Unlock()
			resp, err := tc.send(d, ctx)
			if err != nil {
				t.Fatalf("%s (direct=%v): %v", tc.name, d.kv != nil, err)
			}
			if rev == 0 && resp.Succeeded {
				rev = resp.Header.Revision
			}
			mu.Lock()
			if len(sent) != 1 {
				t.Fatalf("%s (direct=%v): %d transactions sent, want 1", tc.name, d.kv != nil, len(sent))
			}
			got[i] = sent[0]
			mu.Unlock()

			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := tc.send(d, cctx); !errors.Is(err, context.Canceled) {
				t.Errorf("%s (direct=%v) with an ended context: %v, want context.Canceled", tc.name, d.kv != nil, err)
			}
		}
		if string(got[0]) != string(got[1]) {
			var a, b pb.TxnRequest
			a.Unmarshal(got[0])
			b.Unmarshal(got[1])
			t.Errorf("%s: direct request\n\t%v\ndiffers from clientv3's\n\t%v", tc.name, &a, &b)
		}
	}
	if rev == 0 {
		t.Error("no put succeeded: the delete case compared against nothing")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, p := range []string{"locker/a/", "a", "a\xff", "a\xff\xff", "\xff", ""} {
		got := prefixEnd(make([]byte, len(p)), p)
		if want := clientv3.GetPrefixRangeEnd(p); string(got) != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", p, got, want)
		}
	}
}
