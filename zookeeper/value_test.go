package zookeeper_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// valueLockers returns a Locker opened by URL and one made with New over
// a go-zookeeper connection, both under base, by name, with the New one's
// TTL.
func valueLockers(t *testing.T, raw, base string) (map[string]locker.Locker, time.Duration) {
	t.Helper()
	hosts := testenv.Hosts(t, raw)
	timeout := readRange(t, hosts[0]).clamp(3 * time.Second)
	n, err := zookeeper.New(dial(t, hosts, timeout), &zookeeper.Options{SessionTimeout: timeout, Path: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return map[string]locker.Locker{"URL": open(t, raw+base), "New": n}, timeout
}

// inspectKey returns what Inspect finds of key.
func inspectKey(t *testing.T, l locker.Locker, key string) locker.Holder {
	t.Helper()
	h, err := locker.Inspect(context.Background(), l, key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestValues: a hold's value is its node's data after the marker, as
// Inspect reports it (with the holder's fence, its Lock.Fence); SetValue
// replaces it in place (same node, same fence), an empty value leaves the
// marker alone, the longest value the backend claims round-trips, and a
// move to another TTL's session keeps both value and fence. Over a
// Locker opened by URL and one made with New.
func TestValues(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("values")
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ls, newTTL := valueLockers(t, raw, base)
	for name, l := range ls {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			key := "v-" + name
			max := l.Capabilities().MaxValueLen
			if max != 64<<10 {
				t.Fatalf("MaxValueLen = %d, want 64 KiB", max)
			}
			lk, err := l.Acquire(ctx, key, locker.WithValue([]byte("host-a:8080")))
			if err != nil {
				t.Fatal(err)
			}
			defer lk.Release(ctx)
			fence, _ := lk.Fence()
			h := inspectKey(t, l, key)
			node := h.Detail["node"]
			data, st, err := c.Get(node)
			if err != nil {
				t.Fatal(err)
			}
			if string(h.Value) != "host-a:8080" || string(h.Holds[0].Value) != "host-a:8080" || h.Fence != fence || !h.Fenced ||
				string(data) != zookeeper.NodeData+"\nhost-a:8080" {
				t.Fatalf("Inspect = value %q (hold %q), fence %d %v; node data %q; want the value, fence %d, data marker, newline, value",
					h.Value, h.Holds[0].Value, h.Fence, h.Fenced, data, fence)
			}

			if err := lk.SetValue(ctx, []byte("host-b")); err != nil {
				t.Fatal(err)
			}
			h = inspectKey(t, l, key)
			_, st2, _ := c.Get(node)
			if string(h.Value) != "host-b" || h.Fence != fence || h.Detail["node"] != node || st2.Czxid != st.Czxid {
				t.Fatalf("after SetValue: value %q, fence %d, node %s (czxid %d); want host-b in the same node %s, fence %d",
					h.Value, h.Fence, h.Detail["node"], st2.Czxid, node, fence)
			}
			if err := lk.SetValue(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if h, data := inspectKey(t, l, key), nodeData(t, c, node); h.Value != nil || data != zookeeper.NodeData {
				t.Fatalf("after SetValue(nil): value %q, node data %q; want none, the marker alone", h.Value, data)
			}
			big := bytes.Repeat([]byte("0123456789abcdef"), max/16)
			if err := lk.SetValue(ctx, big); err != nil {
				t.Fatalf("SetValue of %d bytes: %v", len(big), err)
			}
			if err := lk.SetValue(ctx, append(big, 'x')); !errors.Is(err, locker.ErrInvalidValue) {
				t.Fatalf("SetValue of %d bytes: %v, want ErrInvalidValue", len(big)+1, err)
			}
			if h := inspectKey(t, l, key); !bytes.Equal(h.Value, big) {
				t.Fatalf("Inspect after SetValue of %d bytes: %d bytes", len(big), len(h.Value))
			}

			if name == "New" {
				if err := lk.Refresh(ctx, 2*newTTL); !errors.Is(err, locker.ErrInvalidTTL) {
					t.Fatalf("Refresh to another TTL on a Locker of one session: %v, want ErrInvalidTTL", err)
				}
				return
			}
			// A move makes the node again: its czxid is the move's, and
			// the fence is in its data, with the value.
			if err := lk.Refresh(ctx, 7*time.Second); err != nil {
				t.Fatal(err)
			}
			h = inspectKey(t, l, key)
			_, st3, err := c.Get(node)
			if err != nil {
				t.Fatal(err)
			}
			if st3.Czxid == st.Czxid || h.Fence != fence || !h.Fenced || !bytes.Equal(h.Value, big) {
				t.Fatalf("after a move: node czxid %d (was %d), Inspect fence %d %v, %d bytes of value; want the lock's fence %d and the value",
					st3.Czxid, st.Czxid, h.Fence, h.Fenced, len(h.Value), fence)
			}
			if err := lk.SetValue(ctx, []byte("moved")); err != nil {
				t.Fatal(err)
			}
			if h := inspectKey(t, l, key); string(h.Value) != "moved" || h.Fence != fence {
				t.Fatalf("SetValue after a move: value %q, fence %d; want moved, %d", h.Value, h.Fence, fence)
			}
		})
	}
}

func nodeData(t *testing.T, c *zk.Conn, path string) string {
	t.Helper()
	data, _, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestValuesShared: each shared holder's value is its own, reported in
// grant order, each with its own fence; waiters are listed without one
// (Inspect reads the holders' nodes only).
func TestValuesShared(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("values-shared")
	ls := lockers(t, raw+base, 3)
	ctx := context.Background()
	r1 := take(t, ls[0], "rw", locker.Shared(), locker.WithValue([]byte("r1")))
	r2 := take(t, ls[1], "rw", locker.Shared(), locker.WithValue([]byte("r2")))
	go func() {
		if lk, err := ls[2].Acquire(ctx, "rw", locker.WithValue([]byte("w"))); err == nil {
			lk.Release(ctx)
		}
	}()
	h := waitQueue(t, ls[0], "rw", 1)
	f1, _ := r1.Fence()
	f2, _ := r2.Fence()
	if len(h.Holds) != 2 || string(h.Holds[0].Value) != "r1" || string(h.Holds[1].Value) != "r2" ||
		h.Holds[0].Fence != f1 || h.Holds[1].Fence != f2 || string(h.Value) != "r1" {
		t.Fatalf("Holds = %+v; want r1 (fence %d) then r2 (fence %d)", h.Holds, f1, f2)
	}
	if len(h.Queue) != 1 || h.Queue[0].Value != nil {
		t.Fatalf("Queue = %+v; want the writer, without a value", h.Queue)
	}
	if err := r2.SetValue(ctx, []byte("r2b")); err != nil {
		t.Fatal(err)
	}
	if h := inspectKey(t, ls[0], "rw"); string(h.Holds[0].Value) != "r1" || string(h.Holds[1].Value) != "r2b" {
		t.Fatalf("after the second reader's SetValue: %q, %q; want r1, r2b", h.Holds[0].Value, h.Holds[1].Value)
	}
	release(t, r1)
	release(t, r2)
}

// TestSetValueNotHeld: SetValue of a lock that is no longer ours fails
// with ErrNotHeld and leaves the key's new holder, and its value, alone:
// after a release, after its node was deleted by force (the driver's
// write finds no node), and after its session expired.
func TestSetValueNotHeld(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("values-notheld")
	ctx := context.Background()
	l, next := open(t, raw+base), open(t, raw+base)

	t.Run("released", func(t *testing.T) {
		lk, err := l.Acquire(ctx, "released", locker.WithValue([]byte("old")))
		if err != nil {
			t.Fatal(err)
		}
		release(t, lk)
		if err := lk.SetValue(ctx, []byte("late")); !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("SetValue after Release: %v, want ErrNotHeld", err)
		}
	})

	// takenOver checks that lk, which lost key to holder (value "new"),
	// cannot set its value.
	takenOver := func(t *testing.T, lk locker.Lock, holder locker.Lock, key string) {
		t.Helper()
		err := lk.SetValue(ctx, []byte("late"))
		if !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("SetValue of a lock taken over: %v, want ErrNotHeld", err)
		}
		if !testenv.Closed(lk.Lost()) {
			t.Error("Lost still open after SetValue found the lock gone")
		}
		h := inspectKey(t, next, key)
		if f, _ := holder.Fence(); string(h.Value) != "new" || h.Fence != f {
			t.Fatalf("the new holder after the old one's SetValue: value %q, fence %d; want new, %d", h.Value, h.Fence, f)
		}
	}

	t.Run("forced", func(t *testing.T) {
		// Without refreshes, nothing tells the holder before SetValue.
		lk, err := l.Acquire(ctx, "forced", locker.WithValue([]byte("old")), locker.WithTTL(10*time.Second), locker.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		if released, err := locker.ForceRelease(ctx, next, "forced"); err != nil || !released {
			t.Fatalf("ForceRelease = %v, %v", released, err)
		}
		holder, err := next.Acquire(ctx, "forced", locker.WithValue([]byte("new")))
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		takenOver(t, lk, holder, "forced")
	})

	t.Run("expired", func(t *testing.T) {
		p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
		cut := open(t, "zookeeper://"+p.Addr()+base)
		lk, err := cut.Acquire(ctx, "expired", locker.WithValue([]byte("old")), locker.WithTTL(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		p.Cut()
		holder, err := next.Acquire(ctx, "expired", locker.WithValue([]byte("new"))) // once the session expired
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Release(ctx)
		p.Restore()
		takenOver(t, lk, holder, "expired")
	})
}

// TestElection: an election on a zookeeper Locker. The leader's value and
// term (its lock's fence) are what Leader reports; Observe sees the
// leader, its new value (Proclaim), and the next leader after Resign,
// with a higher term. Over a Locker opened by URL and one made with New.
func TestElection(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("election")
	ls, _ := valueLockers(t, raw, base)
	for name, l := range ls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			other := open(t, raw+base)
			e1 := locker.NewElection(l, "leader-"+name)
			e2 := locker.NewElection(other, "leader-"+name)
			if _, err := e1.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
				t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
			}
			seen := e1.Observe(ctx) // through l: on New, over go-zookeeper's connection
			// awaitLeader reads the observed leaders until want's value
			// and term come, each one's term no lower than the last.
			var last uint64
			awaitLeader := func(what string, value string, term uint64) {
				t.Helper()
				for {
					select {
					case ldr, ok := <-seen:
						if !ok {
							t.Fatalf("%s: Observe ended", what)
						}
						if ldr.Term < last {
							t.Fatalf("%s: observed term %d after %d", what, ldr.Term, last)
						}
						last = ldr.Term
						if string(ldr.Value) == value && ldr.Term == term && ldr.Termed {
							return
						}
					case <-ctx.Done():
						t.Fatalf("%s: not observed", what)
					}
				}
			}

			lk1, err := e1.Campaign(ctx, []byte("one"))
			if err != nil {
				t.Fatal(err)
			}
			term1, ok := lk1.Fence()
			if !ok {
				t.Fatal("the leader's lock has no fence")
			}
			if ldr, err := e2.Leader(ctx); err != nil || string(ldr.Value) != "one" || ldr.Term != term1 || !ldr.Termed {
				t.Fatalf("Leader = %+v, %v; want value one, term %d", ldr, err, term1)
			}
			awaitLeader("the first leader", "one", term1)

			campaign2 := make(chan locker.Lock, 1)
			go func() {
				lk, err := e2.Campaign(ctx, []byte("two"))
				if err != nil {
					t.Error(err)
				}
				campaign2 <- lk
			}()
			if err := e1.Proclaim(ctx, []byte("uno")); err != nil {
				t.Fatal(err)
			}
			awaitLeader("the proclaimed value", "uno", term1)
			if ldr, err := e1.Leader(ctx); err != nil || string(ldr.Value) != "uno" || ldr.Term != term1 {
				t.Fatalf("Leader after Proclaim = %+v, %v; want uno, term %d", ldr, err, term1)
			}

			if err := e1.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			lk2 := <-campaign2
			if lk2 == nil {
				return
			}
			term2, _ := lk2.Fence()
			if term2 <= term1 {
				t.Fatalf("the next leader's term %d, not above %d", term2, term1)
			}
			awaitLeader("the next leader", "two", term2)
			if ldr, err := e1.Leader(ctx); err != nil || string(ldr.Value) != "two" || ldr.Term != term2 {
				t.Fatalf("Leader after Resign = %+v, %v; want two, term %d", ldr, err, term2)
			}
			if err := e2.Resign(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := e1.Leader(ctx); !errors.Is(err, locker.ErrNoLeader) {
				t.Fatalf("Leader after the last Resign: %v, want ErrNoLeader", err)
			}
		})
	}
}

// TestValueHandover: a holder's value does not cost the waiter behind it
// its handover (the node's data still says that its moves are announced);
// a new value wakes that waiter, which lists the queue once, watches the
// holder again and goes on waiting.
func TestValueHandover(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("values-handover")
	a, b := open(t, raw+base), open(t, raw+base)
	ctx := context.Background()
	w := watchWaits(t)
	held, err := a.Acquire(ctx, "k", locker.WithValue([]byte("v1")))
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(b, "k")
	self, pred := w.nextWatch(t)
	_, listings, _ := w.counts(self)
	if err := held.SetValue(ctx, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if _, again := w.nextWatch(t); again != pred {
		t.Fatalf("after the holder's SetValue the waiter watches %s, want the holder's node %s again", again, pred)
	}
	if _, after, _ := w.counts(self); after != listings+1 {
		t.Errorf("the waiter listed the queue %d times after the holder's SetValue, want once", after-listings)
	}
	select {
	case r := <-got:
		t.Fatalf("the waiter took the lock when the holder's value changed: %v", r.err)
	default:
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, got, "the waiter")
	if _, _, handed := w.counts(self); !handed {
		t.Error("the waiter behind a holder with a value was not handed the lock")
	}
}
