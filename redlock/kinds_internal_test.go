package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

// TestQuorumOf: exclusive and shared holds need a majority; a semaphore of
// k permits on n nodes needs more than k * n / (k + 1) nodes, the majority
// for k = 1, so that k + 1 holders never fit on the nodes' k permits each.
func TestQuorumOf(t *testing.T) {
	for _, tc := range []struct {
		kind     backend.Kind
		limit, n int
		want     int
	}{
		{backend.Exclusive, 0, 5, 3},
		{backend.Shared, 0, 5, 3},
		{backend.Exclusive, 0, 4, 3},
		{backend.Permit, 1, 5, 3},
		{backend.Permit, 2, 5, 4},
		{backend.Permit, 3, 5, 4},
		{backend.Permit, 4, 5, 5},
		{backend.Permit, 100, 5, 5},
		{backend.Permit, 2, 3, 3},
		{backend.Permit, 1, 3, 2},
		{backend.Permit, 2, 7, 5},
		{backend.Permit, 3, 7, 6},
		{backend.Permit, 5, 7, 6},
		{backend.Permit, 6, 7, 7},
		{backend.Permit, 5, 3, 3},
		{backend.Permit, backend.SharedCapacity, 7, 7},
	} {
		q := quorumOf(tc.kind, tc.limit, tc.n)
		if q != tc.want {
			t.Errorf("quorumOf(%v, %d, %d nodes) = %d, want %d", tc.kind, tc.limit, tc.n, q, tc.want)
		}
		// The rule itself: k + 1 holders on q nodes each exceed the k
		// permits of the n nodes, and q - 1 would not.
		if k := tc.limit; tc.kind == backend.Permit && k < 1000 {
			if (k+1)*q <= k*tc.n || (q > tc.n/2+1 && (k+1)*(q-1) > k*tc.n) {
				t.Errorf("quorumOf(permit %d, %d nodes) = %d is not the least q with (k+1)q > kn", k, tc.n, q)
			}
		}
	}
}

// TestMismatchNeedsMajority: a request is refused as a mismatch when a
// majority of nodes have holders of another family; a copy of another
// family on a minority of nodes (a leftover, or a node that missed a
// release) does not stop a quorum of the others, nor is it touched.
func TestMismatchNeedsMajority(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	plant := func(key string, nodes int) {
		for _, c := range cs[:nodes] {
			g, err := redisconn.Hold(ctx, redisconn.NewGoRedis(c, false), redisconn.HoldRequest{Key: lockKey(key), Token: "planted", TTL: time.Minute,
				Claim: backend.Claim{Kind: backend.Permit, Limit: 3, Weight: 1}})
			if err != nil || !g.Taken {
				t.Fatal(g, err)
			}
		}
	}
	plant("minority", 2)
	acq, err := d.TryAcquire(ctx, backend.Request{Key: "minority", Token: "s", TTL: time.Minute, Kind: backend.Shared})
	if err != nil {
		t.Fatalf("a shared hold with a permit copy on 2 of 5 nodes: %v, want it held on the other 3", err)
	}
	if err := acq.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, c := range cs[:2] {
		if n := c.HLen(ctx, lockKey("minority")).Val(); n != 2 {
			t.Errorf("node %d: the planted permit's hash has %d fields after the round, want its 2", i, n)
		}
	}

	plant("majority", 3)
	_, err = d.TryAcquire(ctx, backend.Request{Key: "majority", Token: "s", TTL: time.Minute, Kind: backend.Shared})
	var m *backend.Mismatch
	if want := (backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 3, Kind: backend.Shared}); !errors.As(err, &m) || *m != want {
		t.Fatalf("a shared hold with a permit on 3 of 5 nodes: %v, want the mismatch %+v", err, want)
	}
	for i, c := range cs[3:] {
		if n := c.Exists(ctx, lockKey("majority")).Val(); n != 0 {
			t.Errorf("node %d: the refused request left its hold", i+3)
		}
	}
}

// TestRefreshBatchKinds: a batch of exclusive, shared and permit holds
// judges each by its own quorum: a semaphore's permit of 2 (4 of 5 nodes)
// still on 4 nodes is extended, one left on 3 is lost, where a shared
// hold on 3 is still held.
func TestRefreshBatchKinds(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	reqs := []backend.Request{
		{Key: "x"},
		{Key: "s", Kind: backend.Shared},
		{Key: "s3", Kind: backend.Shared},
		{Key: "p4", Kind: backend.Permit, Limit: 2, Weight: 1},
		{Key: "p3", Kind: backend.Permit, Limit: 2, Weight: 1},
	}
	var locks []backend.Held
	var ttls []time.Duration
	for i, req := range reqs {
		req.Token, req.TTL = fmt.Sprint("t", i), 10*time.Second
		acq, err := d.TryAcquire(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", req.Key, err)
		}
		locks = append(locks, acq.Held)
		ttls = append(ttls, time.Minute)
	}
	// The holds lost on some nodes: s3 and p3 on two, p4 on one.
	for j, c := range cs {
		if j < 2 {
			c.Del(ctx, lockKey("s3"), lockKey("p3"))
		}
		if j == 4 {
			c.Del(ctx, lockKey("p4"))
		}
	}
	errs := d.RefreshBatch(ctx, locks, ttls)
	for i, err := range errs {
		switch key := reqs[i].Key; key {
		case "p3":
			if !errors.Is(err, backend.ErrNotHeld) {
				t.Errorf("%s, on 3 of 5 nodes, 4 needed: %v, want ErrNotHeld", key, err)
			}
		default:
			if err != nil {
				t.Errorf("%s: %v", key, err)
				continue
			}
			if ttl, err := locks[i].TTL(ctx); err != nil || ttl < 50*time.Second {
				t.Errorf("%s after a 1m refresh: TTL %v, %v", key, ttl, err)
			}
		}
	}
	if err := locks[3].Release(ctx); err != nil {
		t.Errorf("release of p4, held on 4 of 5 nodes: %v", err)
	}
	if err := locks[4].Release(ctx); !errors.Is(err, backend.ErrNotHeld) {
		t.Errorf("release of p3, held on 3 of 5 nodes (4 needed): %v, want ErrNotHeld", err)
	}
}

// TestPermitQuorumSplitVotes: a semaphore of 2 permits on 5 nodes, where
// rounds find the permits spread so that each round wins a plain
// majority (3 nodes) and no more: A while nodes 4 and 5 are full, B while
// nodes 1 and 2 are, C on the 4 nodes A and B leave room on. With a
// quorum of a majority all three would hold 2 permits; with the quorum
// above 2 * 5 / 3, 4 nodes, A and B are refused and C alone holds.
func TestPermitQuorumSplitVotes(t *testing.T) {
	d, cs := testDriver(t, defaults)
	ctx := context.Background()
	const key, limit = "split-permits", 2
	sem := backend.Claim{Kind: backend.Permit, Limit: limit, Weight: 1}
	// fill takes the permits of the nodes named, by index, left free by
	// the test's holders, with planted holds that it then removes.
	fill := func(nodes ...int) (unfill func()) {
		var planted []func()
		for _, i := range nodes {
			c := redisconn.NewGoRedis(cs[i], false)
			for j := 0; ; j++ {
				token := fmt.Sprintf("filler-%d-%d", i, j)
				g, err := redisconn.Hold(ctx, c, redisconn.HoldRequest{Key: lockKey(key), Token: token, TTL: time.Minute, Claim: sem})
				if err != nil {
					t.Fatal(err)
				}
				if !g.Taken {
					break
				}
				planted = append(planted, func() {
					if _, err := redisconn.EvalInt(ctx, c, redisconn.HoldReleaseScript, []string{lockKey(key)}, token, channelOf(key)); err != nil {
						t.Fatal(err)
					}
				})
			}
		}
		return func() {
			for _, f := range planted {
				f()
			}
		}
	}
	var holders []string
	try := func(name string) {
		_, err := d.TryAcquire(ctx, backend.Request{Key: key, Token: name, TTL: time.Minute, Kind: backend.Permit, Limit: limit, Weight: 1})
		switch {
		case err == nil:
			holders = append(holders, name)
		case !errors.Is(err, backend.ErrNotAcquired):
			t.Fatalf("%s: %v", name, err)
		}
	}
	unfill := fill(3, 4)
	try("A") // nodes 1, 2 and 3 (indexes 0 to 2) have room
	unfill()
	unfill = fill(0, 1)
	try("B") // nodes 3, 4 and 5 have room, node 3 beside A's copy
	unfill()
	try("C") // every node but node 3, which holds A and B's copies
	if len(holders) > limit {
		t.Fatalf("%d holders of a semaphore of %d permits on 5 nodes: %v; each won %d nodes or more, and a quorum must exceed 2 * 5 / 3",
			len(holders), limit, holders, d.quorum)
	}
}
