package bench

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// peerTestNames are the peer designs each backend must offer.
var peerTestNames = map[string][]string{
	"redis":     {"redsync", "redislock"},
	"redlock":   {"redsync"},
	"zookeeper": {"zk.Lock"},
	"etcd":      {"concurrency.Mutex"},
}

// peerTestDesigns are the peer designs of backend, checked for their
// names and fields.
func peerTestDesigns(t *testing.T, backend, env string) []Design {
	t.Helper()
	ds, err := PeerDesigns(backend, serverURL(t, env))
	if err != nil {
		t.Fatalf("PeerDesigns(%s): %v", backend, err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		if d.Backend != backend || d.Kind != KindPeer || !d.Waits || d.Open == nil {
			t.Errorf("PeerDesigns(%s): %+v, want Backend %s, Kind peer, Waits true, an Open", backend, d, backend)
		}
	}
	if want := peerTestNames[backend]; !slices.Equal(names, want) {
		t.Fatalf("PeerDesigns(%s) names = %v, want %v", backend, names, want)
	}
	return ds
}

// TestPeerExclusion, for every peer design: while one client holds a
// key, another's Lock waits (it neither succeeds nor fails fast) until
// its context ends, with an error that says so; a Lock that is waiting
// when the holder unlocks gets the key; Close ends everything the
// clients started.
func TestPeerExclusion(t *testing.T) {
	for _, b := range rawTestBackends {
		for _, d := range peerTestDesigns(t, b.backend, b.env) {
			t.Run(b.backend+"/"+d.Name, func(t *testing.T) {
				rawTestLeaks(t)
				peerTestExclusion(t, d)
			})
		}
	}
}

func peerTestExclusion(t *testing.T, d Design) {
	c1, c2 := rawTestOpen(t, d), rawTestOpen(t, d)
	key, ctx := rawTestKey(t), context.Background()
	u1 := rawMustLock(t, c1, key, 10*time.Second)

	const wait = 300 * time.Millisecond
	short, cancel := context.WithTimeout(ctx, wait)
	start := time.Now()
	_, err := c2.Lock(short, key, 10*time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a held key = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took < wait-10*time.Millisecond || took > wait+2*time.Second {
		t.Fatalf("Lock of a held key returned after %v, want it to wait the context's %v", took, wait)
	}

	// A waiter whose context has no deadline waits for as long as the
	// key is held, longer than its own TTL too (bsm/redislock gives up
	// after one TTL unless told otherwise).
	const waiterTTL = 300 * time.Millisecond
	got := make(chan error, 1)
	var u2 Unlock
	lctx, cancel := context.WithCancel(ctx)
	defer time.AfterFunc(10*time.Second, cancel).Stop()
	defer cancel()
	go func() {
		var err error
		u2, err = c2.Lock(lctx, key, waiterTTL)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second Lock returned while the key was held: %v", err)
	case <-time.After(waiterTTL + 200*time.Millisecond):
	}
	if err := u1(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiting Lock after the holder's Unlock: %v", err)
	}
	if err := u2(ctx); err != nil {
		t.Fatalf("Unlock of the waiter's lock: %v", err)
	}
	// And the key is free again: a Lock that must not wait gets it.
	now, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	u, err := c1.Lock(now, key, 10*time.Second)
	if err != nil {
		t.Fatalf("Lock after both Unlocks: %v", err)
	}
	if err := u(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// TestPeerCloseWhileWaiting: Close ends a client whose Lock calls were
// abandoned by their contexts (zk.Lock keeps waiting in a goroutine of
// its own), and leaves no goroutine behind.
func TestPeerCloseWhileWaiting(t *testing.T) {
	for _, b := range rawTestBackends {
		for _, d := range peerTestDesigns(t, b.backend, b.env) {
			t.Run(b.backend+"/"+d.Name, func(t *testing.T) {
				rawTestLeaks(t)
				c1 := rawTestOpen(t, d)
				key := rawTestKey(t)
				rawMustLock(t, c1, key, 10*time.Second)
				c2, err := d.Open(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				if _, err := c2.Lock(short, key, 10*time.Second); err == nil {
					t.Fatal("Lock of a held key succeeded")
				}
				rawTestClose(t, d, c2)
			})
		}
	}
}
