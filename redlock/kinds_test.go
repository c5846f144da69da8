package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// TestPermitQuorum: with 5 nodes and a semaphore of 2 permits, three
// clients that each reach a different subset of the nodes can never all
// hold a permit. Each client has proxies of its own in front of the nodes,
// and the test cuts the ones it cannot reach.
//
// First each client reaches 3 nodes, a majority, chosen so that no node
// is reached by more than two: each node alone admits every client that
// reaches it, so a majority quorum would admit all three. None is
// admitted, as 4 nodes are needed. Then each reaches 4 nodes: two are
// admitted, and the third finds two nodes full and is refused; once one
// of the two leaves, it gets in.
func TestPermitQuorum(t *testing.T) {
	srv, _ := nodes(t, 5)
	ctx := context.Background()
	type client struct {
		l       locker.Locker
		proxies []*conformance.Proxy
	}
	clients := make([]client, 3)
	for i := range clients {
		var addrs []string
		for _, s := range srv {
			p := testenv.Proxy(t, s.Addr())
			clients[i].proxies = append(clients[i].proxies, p)
			addrs = append(addrs, p.Addr())
		}
		clients[i].l = newLocker(t, addrs, time.Minute)
	}
	reach := func(subsets [3][]int) {
		for i, c := range clients {
			for j, p := range c.proxies {
				if slices.Contains(subsets[i], j) {
					p.Restore()
				} else {
					p.Cut()
				}
			}
		}
	}
	var direct []redisconn.Conn
	for _, s := range srv {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
		t.Cleanup(func() { c.Close() })
		direct = append(direct, redisconn.NewGoRedis(c, false))
	}
	const key = "sem"
	serverKey := "redlock:{k:" + key + "}"
	holders := func(node int) int {
		st, err := redisconn.InspectKey(ctx, direct[node], serverKey, "")
		if err != nil {
			t.Fatal(err)
		}
		return len(st.Holds)
	}
	sem := locker.Limit(2)

	// A majority each.
	majorities := [3][]int{{0, 1, 2}, {2, 3, 4}, {0, 1, 3}}
	reach(majorities)
	for i, subset := range majorities {
		for _, j := range subset {
			g, err := redisconn.Hold(ctx, direct[j], redisconn.HoldRequest{Key: serverKey, Token: fmt.Sprint("probe", i), TTL: time.Minute,
				Claim: backend.Claim{Kind: backend.Permit, Limit: 2, Weight: 1}})
			if err != nil || !g.Taken {
				t.Fatalf("node %d alone refused client %d's permit: %+v, %v; every node has room for those that reach it", j, i, g, err)
			}
		}
	}
	for _, c := range direct {
		if _, err := c.Eval(ctx, redisconn.NewScript("del", "return redis.call('DEL', KEYS[1])", 1), []string{serverKey}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range clients {
		lk, err := c.l.TryAcquire(ctx, key, sem)
		if err == nil {
			lk.Release(ctx)
			t.Fatalf("client %d, reaching nodes %v, got a permit of 2 on 3 of 5 nodes", i, majorities[i])
		}
		if !strings.Contains(err.Error(), "only 3 of 5 nodes answered, 4 needed for a semaphore of 2 permits") {
			t.Errorf("client %d on 3 of 5 nodes: %v, want an error saying 4 are needed", i, err)
		}
	}
	for j := range direct {
		if n := holders(j); n != 0 {
			t.Errorf("node %d after the refused rounds: %d holders, want none", j, n)
		}
	}

	// Four nodes each.
	fours := [3][]int{{0, 1, 2, 3}, {0, 1, 2, 4}, {0, 1, 3, 4}}
	reach(fours)
	var held []locker.Lock
	for i, c := range clients[:2] {
		lk, err := c.l.TryAcquire(ctx, key, sem, locker.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("client %d on nodes %v: %v", i, fours[i], err)
		}
		held = append(held, lk)
	}
	if lk, err := clients[2].l.TryAcquire(ctx, key, sem); err == nil {
		lk.Release(ctx)
		t.Fatalf("client 2 on nodes %v got a third permit of 2", fours[2])
	} else if !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("client 2, a third permit of 2: %v, want ErrNotAcquired", err)
	}
	for j := range direct {
		if n := holders(j); n > 2 {
			t.Errorf("node %d holds %d permits of 2", j, n)
		}
	}
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err := clients[2].l.TryAcquire(ctx, key, sem)
	if err != nil {
		t.Fatalf("client 2 once client 0 left: %v", err)
	}
	lk.Release(ctx)
	held[1].Release(ctx)
}

// TestKinds runs shared and permit holds through both client libraries on
// the shared five nodes: readers together and a writer alone, woken by the
// last reader's release; a semaphore's weights; a mismatch refused at
// once; the release of an expired shared hold leaves the other's.
func TestKinds(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	for _, client := range []string{"goredis", "redigo"} {
		t.Run(client, func(t *testing.T) {
			url := raw + "?client=" + client
			ctx := context.Background()
			key := fmt.Sprintf("kinds/%s/%d", client, time.Now().UnixNano())
			r1l, r2l, wl := mustOpen(t, url), mustOpen(t, url), mustOpen(t, url)
			ttl := locker.WithTTL(time.Minute)

			r1, err := r1l.TryAcquire(ctx, key, locker.Shared(), ttl)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := r2l.TryAcquire(ctx, key, locker.Shared(), ttl)
			if err != nil {
				t.Fatalf("a second reader: %v", err)
			}
			if _, err := wl.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
				t.Fatalf("a writer while two readers hold: %v, want ErrNotAcquired", err)
			}
			h, err := locker.Inspect(ctx, wl, key)
			if err != nil || len(h.Holds) != 2 || h.Holds[0].Kind != backend.Shared || h.Holds[1].Kind != backend.Shared {
				t.Fatalf("Inspect: %+v, %v; want two shared holders", h.Holds, err)
			}
			done := make(chan error, 1)
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			go func() {
				w, err := wl.Acquire(wctx, key, ttl)
				if err == nil {
					_, err = r1l.TryAcquire(ctx, key, locker.Shared())
					if !errors.Is(err, locker.ErrNotAcquired) {
						err = fmt.Errorf("a reader while the writer holds: %v, want ErrNotAcquired", err)
					} else {
						err = w.Release(ctx)
					}
				}
				done <- err
			}()
			if err := r1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r2.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("the writer once the readers left (their TTL a minute away): %v", err)
			}

			sem := locker.Limit(3)
			a, err := r1l.TryAcquire(ctx, key+"/sem", sem, locker.Weight(2), ttl)
			if err != nil {
				t.Fatal(err)
			}
			b, err := r2l.TryAcquire(ctx, key+"/sem", sem, ttl)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wl.TryAcquire(ctx, key+"/sem", sem); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("a fourth permit of 3: %v, want ErrNotAcquired", err)
			}
			var m *backend.Mismatch
			if _, err := wl.Acquire(ctx, key+"/sem", locker.Shared()); !errors.As(err, &m) || m.HeldLimit != 3 {
				t.Errorf("Acquire of a shared hold on a semaphore of 3: %v, want a mismatch naming the limit", err)
			}
			a.Release(ctx)
			b.Release(ctx)

			// The release of an expired shared hold.
			short, err := r1l.TryAcquire(ctx, key+"/exp", locker.Shared(), locker.WithTTL(100*time.Millisecond), locker.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			long, err := r2l.TryAcquire(ctx, key+"/exp", locker.Shared(), ttl)
			if err != nil {
				t.Fatal(err)
			}
			testenv.WaitFor(t, 30*time.Second, "the short hold to expire on the nodes", func() bool {
				h, err := locker.Inspect(ctx, wl, key+"/exp")
				return err == nil && len(h.Holds) == 1
			})
			if err := short.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
				t.Errorf("Release of an expired shared hold: %v, want ErrNotHeld", err)
			}
			if ttl, err := long.TTL(ctx); err != nil || ttl < 50*time.Second {
				t.Errorf("the other holder's TTL: %v, %v; want about a minute", ttl, err)
			}
			if err := long.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}
