package zookeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// A round of an observer: the events it set its watches again after
// (or a reconnect), reported once its notice was sent.
type round struct {
	evs         []gozk.Event
	reconnected bool
	holders     []string // the nodes whose data it watches now
}

// has reports whether the round saw an event of type typ on path.
func (r round) has(typ gozk.EventType, path string) bool {
	return slices.ContainsFunc(r.evs, func(ev gozk.Event) bool { return ev.Type == typ && ev.Path == path })
}

// observing is one Observe call under test: its notices, and the rounds
// of its observer (the observed hook), in order. rounds is unbuffered:
// the observer sends a round's notice only once next has read the round,
// so that a notice is never sent, and coalesced with a pending one, for a
// round that next has yet to read. Otherwise next could take, for an
// earlier round, a pending notice that also stands for a later round, and
// then wait in vain for a notice of the later one: notices coalesce, and
// the observer is right to send none (the one taken was taken after the
// later round's watches were set, so an Inspect after it saw the change).
type observing struct {
	l      locker.Locker // the observer's Locker, which Inspects
	key    string
	parent string
	events <-chan struct{}
	stop   func()
	rounds chan round
}

// observe starts observing key through d (whose Locker is l), with the
// observed hook set for the rest of the test.
func observe(t *testing.T, l locker.Locker, d *driver, key string) *observing {
	t.Helper()
	o := &observing{l: l, key: key, parent: d.base + "/" + encodeKey(key), rounds: make(chan round)}
	quit := make(chan struct{}) // the test is over: no round is read
	testHooks.Store(&hooks{observed: func(parent string, evs []gozk.Event, reconnected bool, holders []string) {
		if parent == o.parent {
			select {
			case o.rounds <- round{evs, reconnected, holders}:
			case <-quit:
			}
		}
	}})
	t.Cleanup(func() { testHooks.Store(nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, stop, err := d.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	o.events, o.stop = events, stop
	t.Cleanup(stop)
	t.Cleanup(func() { close(quit) }) // first: stop waits for a round being reported
	return o
}

// next waits for the observer's next round that matches, then for a
// notice: one taken after the round was read was sent after its watches
// were set again, or was pending then and the round's own coalesced with
// it, so an Inspect after it sees the change. The observer sends it once
// the round is read (see observing), so it comes whatever the timing.
// Rounds before it are skipped.
func (o *observing) next(t *testing.T, what string, match func(round) bool) round {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-o.rounds:
			if !match(r) {
				continue
			}
			select {
			case <-o.events:
			case <-deadline:
				t.Fatalf("%s: the observer set its watches again, and sent no notice within 30s", what)
			}
			return r
		case <-deadline:
			t.Fatalf("%s: no such round within 30s", what)
		}
	}
}

// inspect returns what Inspect finds of the key now.
func (o *observing) inspect(t *testing.T) locker.Holder {
	t.Helper()
	h, err := locker.Inspect(context.Background(), o.l, o.key)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// holder describes h for a failure message.
func holder(h locker.Holder) string {
	return fmt.Sprintf("held %v, value %q, %d waiting, node %s", h.Held, h.Value, h.Waiters, h.Detail["node"])
}

func uniqBase(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return "/" + prefix + "-" + hex.EncodeToString(b[:])
}

func openURL(t *testing.T, raw string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestObserve: an observer sends a notice after every change of the key's
// holders, having set its watches again, so that an Inspect after the
// notice sees the change: a key node created, a grant, a value replaced,
// a waiter queued, a release handing the key over, the expiry of a
// crashed holder; and after a reconnect of its own connection.
func TestObserve(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	servers := testenv.Hosts(t, raw)
	base := uniqBase("observe")
	op := testenv.Proxy(t, servers[0]) // the observer's link
	ol, d := lossLocker(t, []string{op.Addr()}, base)
	o := observe(t, ol, d, "k")
	ctx := context.Background()
	a, b := openURL(t, raw+base), openURL(t, raw+base)

	// The key node does not exist yet: an exists watch waits for it, and
	// the listing after it for the grant.
	lkA, err := a.Acquire(ctx, "k", locker.WithValue([]byte("a")))
	if err != nil {
		t.Fatal(err)
	}
	r := o.next(t, "the key node created", func(r round) bool { return r.has(gozk.EventNodeCreated, o.parent) })
	for len(r.holders) == 0 {
		// The listing after the key node's creation came before the
		// grant: the grant fires the child watch it set, and the
		// observer then watches the holder's data. Until it does, a new
		// value would be seen by its next listing, not as a data event.
		r = o.next(t, "the grant", func(r round) bool { return r.has(gozk.EventNodeChildrenChanged, o.parent) })
	}
	h := o.inspect(t)
	nodeA := h.Detail["node"]
	if !h.Held || string(h.Value) != "a" || !slices.Equal(r.holders, []string{nodeA}) {
		t.Fatalf("after the grant: %s, the observer watching %q; want value a, the holder watched", holder(h), r.holders)
	}

	if err := lkA.SetValue(ctx, []byte("b")); err != nil {
		t.Fatal(err)
	}
	o.next(t, "the value replaced", func(r round) bool { return r.has(gozk.EventNodeDataChanged, nodeA) })
	if h := o.inspect(t); string(h.Value) != "b" {
		t.Fatalf("after SetValue: %s; want value b", holder(h))
	}

	granted := make(chan locker.Lock, 1)
	go func() {
		lk, err := b.Acquire(ctx, "k", locker.WithValue([]byte("w")))
		if err != nil {
			t.Error(err)
		}
		granted <- lk
	}()
	o.next(t, "a waiter queued", func(r round) bool { return r.has(gozk.EventNodeChildrenChanged, o.parent) })
	if h := o.inspect(t); h.Waiters != 1 || string(h.Value) != "b" {
		t.Fatalf("after a waiter queued: %s; want value b, 1 waiting", holder(h))
	}

	if err := lkA.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.next(t, "the release", func(r round) bool {
		return r.has(gozk.EventNodeDeleted, nodeA) || r.has(gozk.EventNodeChildrenChanged, o.parent)
	})
	if h := o.inspect(t); !h.Held || string(h.Value) != "w" || h.Waiters != 0 {
		t.Fatalf("after the release: %s; want the waiter holding, value w", holder(h))
	}
	lkB := <-granted
	if lkB == nil {
		return
	}
	if err := lkB.Release(ctx); err != nil {
		t.Fatal(err)
	}
	o.next(t, "the last release", func(r round) bool { return r.has(gozk.EventNodeChildrenChanged, o.parent) })
	if h := o.inspect(t); h.Held {
		t.Fatalf("after the last release: %s; want free", holder(h))
	}

	// A holder cut off from the server: its session expires, and its node
	// with it.
	cp := testenv.Proxy(t, servers[0])
	crashed := openURL(t, "zookeeper://"+cp.Addr()+base)
	if _, err := crashed.Acquire(ctx, "k", locker.WithTTL(time.Second), locker.WithValue([]byte("c"))); err != nil {
		t.Fatal(err)
	}
	o.next(t, "the crashed holder's grant", func(r round) bool { return r.has(gozk.EventNodeChildrenChanged, o.parent) })
	h = o.inspect(t)
	if string(h.Value) != "c" {
		t.Fatalf("after the grant: %s; want value c", holder(h))
	}
	cp.Cut()
	// A change of the key's children from the crashed holder's own
	// acquisition may still be on its way: the expiry is the notice after
	// which the key is free, and each notice before it must leave the
	// crashed holder in place (its session outlives the cut by its TTL).
	for i := 1; ; i++ {
		o.next(t, "the crashed holder's expiry", func(r round) bool {
			return r.has(gozk.EventNodeDeleted, h.Detail["node"]) || r.has(gozk.EventNodeChildrenChanged, o.parent)
		})
		now := o.inspect(t)
		if !now.Held {
			break
		}
		if now.Detail["node"] != h.Detail["node"] || i == 5 {
			t.Fatalf("after the crashed holder's session expired (notice %d): %s; want free", i, holder(now))
		}
	}

	// The observer's own connection drops and comes back (its session
	// lives on): a notice, and the watches still work.
	op.Cut()
	op.Restore()
	o.next(t, "the observer's reconnect", func(r round) bool { return r.reconnected })
	lk, err := a.Acquire(ctx, "k", locker.WithValue([]byte("again")))
	if err != nil {
		t.Fatal(err)
	}
	o.next(t, "a grant after the reconnect", func(r round) bool { return r.has(gozk.EventNodeChildrenChanged, o.parent) })
	if h := o.inspect(t); string(h.Value) != "again" {
		t.Fatalf("after a grant after the reconnect: %s; want value again", holder(h))
	}
	lk.Release(ctx)
}

// TestObserveStop: stop ends the observer (its goroutine is gone when
// stop returns; goleak checks that none is left) and takes its watches out
// of the connection's: the session's next connection sets them again
// while the observer runs, and none of them once it is stopped. The
// holder's data watch is read back from the server ('wchp'), on the
// ensemble, whose members allow that command. Closing the Locker ends an
// observer not stopped.
func TestObserveStop(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	servers := testenv.Hosts(t, raw)
	base := uniqBase("observe-stop")
	ctx := context.Background()
	lk, err := openURL(t, raw+base).Acquire(ctx, "k", locker.WithValue([]byte("v")))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	p := testenv.Proxy(t, servers[0])
	l, d := lossLocker(t, []string{p.Addr()}, base)
	h, err := locker.Inspect(ctx, l, "k")
	if err != nil {
		t.Fatal(err)
	}
	parent, node := d.base+"/"+encodeKey("k"), h.Detail["node"]
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, stop, err := d.Observe(octx, "k")
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.inspectSession(ctx) // the observer's: the only one
	if err != nil {
		t.Fatal(err)
	}
	defer s.unref()
	sid := fmt.Sprintf("0x%x", s.conn.SessionID())
	// reconnect drops the observer's connection, and returns once the
	// server has taken in the watches the next one set again: they go
	// out first on it, before a read sent after the reconnect.
	reconnect := func() {
		t.Helper()
		n := s.connects.Load()
		p.Cut()
		p.Restore()
		testenv.WaitFor(t, 30*time.Second, "the observer's reconnect", func() bool { return s.connects.Load() > n })
		if _, _, err := s.conn.Exists(parent); err != nil {
			t.Fatal(err)
		}
	}
	// watched returns the nodes under the key node whose data the
	// session watches on the server. (wchp lists data watches only: the
	// child watch on the key node is not among them.)
	watched := func() []string {
		t.Helper()
		out, err := fourLetter(ctx, servers[0], "wchp")
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		var path string
		for _, line := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(line, "/"):
				path = line
			case strings.TrimSpace(line) == sid && strings.HasPrefix(path, parent):
				paths = append(paths, path)
			}
		}
		slices.Sort(paths)
		return slices.Compact(paths)
	}
	reconnect()
	if got, want := watched(), []string{node}; !slices.Equal(got, want) {
		t.Fatalf("after a reconnect, the running observer's session watches %q on the server; want %q", got, want)
	}
	stop()
	stop() // again: nothing
	reconnect()
	if got := watched(); len(got) != 0 {
		t.Fatalf("after stop and a reconnect, the session still watches %q on the server", got)
	}

	// A second observer, left running, is ended by Close.
	if _, _, err := d.Observe(octx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Observe(octx, "k"); !errors.Is(err, locker.ErrClosed) {
		t.Fatalf("Observe after Close: %v, want ErrClosed", err)
	}
}
