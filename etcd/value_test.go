package etcd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

// Values on holds are the values of their queue entries; Observe is a
// watch on a key's queue. The tests read the entries on the server beside
// what Inspect says, and wait for notices with generous bounds: a notice
// that does not come fails the test, and one that comes is checked
// against what Inspect reads after it.

// rawEntry returns the one queue entry of key, with its value, in the
// default namespace.
func rawEntry(t *testing.T, raw *clientv3.Client, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := raw.Get(context.Background(), etcd.QueuePrefix(etcd.DefaultNamespace, key), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("queue of %s: %d entries, want one", key, len(resp.Kvs))
	}
	return resp.Kvs[0]
}

// wantHolder checks that Inspect shows lk alone holding key, with value
// (nil: none), and its fence.
func wantHolder(t *testing.T, l locker.Locker, key string, lk locker.Lock, value []byte) {
	t.Helper()
	h, err := locker.Inspect(context.Background(), l, key)
	if err != nil {
		t.Fatal(err)
	}
	if !h.Held || len(h.Holds) != 1 {
		t.Fatalf("Inspect(%s) = %+v, want one holder", key, h)
	}
	if !bytes.Equal(h.Value, value) || !bytes.Equal(h.Holds[0].Value, value) || (value == nil) != (h.Value == nil) {
		t.Errorf("Inspect(%s): Value %q, Holds[0].Value %q, want %q", key, h.Value, h.Holds[0].Value, value)
	}
	if f, ok := lk.Fence(); !ok || !h.Fenced || h.Fence != f {
		t.Errorf("Inspect(%s): Fence %d (fenced %v), want the holder's Lock.Fence() %d", key, h.Fence, h.Fenced, f)
	}
}

// TestValueRoundTrip: a value put with the hold, replaced by SetValue,
// kept across a Refresh that moves the entry to another lease, as long as
// Capabilities.MaxValueLen, and removed, each as Inspect and the entry on
// the server show it; SetValue changes neither the entry's create
// revision (the fence) nor its lease.
func TestValueRoundTrip(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	l := open(t, url)
	ctx := context.Background()
	key := uniqueKey("value")
	lk, err := l.Acquire(ctx, key, locker.WithTTL(5*time.Second), locker.WithValue([]byte("first")))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	wantHolder(t, l, key, lk, []byte("first"))
	put := rawEntry(t, raw, key)
	if string(put.Value) != "first" {
		t.Fatalf("the entry's value after the acquire = %q, want %q", put.Value, "first")
	}

	set := func(v []byte) {
		t.Helper()
		if err := lk.SetValue(ctx, v); err != nil {
			t.Fatalf("SetValue(%d bytes): %v", len(v), err)
		}
	}
	set([]byte("second"))
	wantHolder(t, l, key, lk, []byte("second"))
	if e := rawEntry(t, raw, key); e.CreateRevision != put.CreateRevision || e.Lease != put.Lease {
		t.Errorf("after SetValue the entry has create revision %d and lease %x, want %d and %x as before",
			e.CreateRevision, e.Lease, put.CreateRevision, put.Lease)
	}

	if err := lk.Refresh(ctx, 7*time.Second); err != nil {
		t.Fatal(err)
	}
	if e := rawEntry(t, raw, key); e.Lease == put.Lease {
		t.Fatal("a Refresh with another TTL left the entry on its lease: the move was not tested")
	}
	wantHolder(t, l, key, lk, []byte("second")) // the move kept the value

	longest := bytes.Repeat([]byte("v"), l.Capabilities().MaxValueLen)
	if len(longest) != 64<<10 {
		t.Errorf("MaxValueLen = %d, want 64 KiB", len(longest))
	}
	set(longest)
	wantHolder(t, l, key, lk, longest)
	if err := lk.SetValue(ctx, append(longest, 'v')); !errors.Is(err, locker.ErrInvalidValue) {
		t.Errorf("SetValue of MaxValueLen+1 bytes = %v, want ErrInvalidValue", err)
	}

	set(nil)
	wantHolder(t, l, key, lk, nil)
	if e := rawEntry(t, raw, key); len(e.Value) != 0 {
		t.Errorf("the entry's value after SetValue(nil) = %d bytes, want none", len(e.Value))
	}
}

// TestSharedValues: every holder of a shared key has its own value, in
// queue order, read at one revision beside the queue; a waiter's value is
// not read.
func TestSharedValues(t *testing.T) {
	k := newKinds(t, "values")
	r1 := k.hold(locker.Shared(), locker.WithValue([]byte("reader 1")))
	r2 := k.hold(locker.Shared(), locker.WithValue([]byte("reader 2")))
	w := k.start(locker.WithValue([]byte("writer")))
	k.queued(1, w)
	h := k.inspect()
	if len(h.Holds) != 2 || len(h.Queue) != 1 {
		t.Fatalf("Inspect: Holds %+v, Queue %+v, want the two readers holding and the writer queued", h.Holds, h.Queue)
	}
	for i, want := range []struct {
		lk    locker.Lock
		value string
	}{{r1, "reader 1"}, {r2, "reader 2"}} {
		if got := h.Holds[i]; string(got.Value) != want.value || got.Fence != fence(want.lk) {
			t.Errorf("Holds[%d]: value %q, fence %d, want %q, %d", i, got.Value, got.Fence, want.value, fence(want.lk))
		}
	}
	if string(h.Value) != "reader 1" {
		t.Errorf("Holder.Value = %q, want the first holder's, %q", h.Value, "reader 1")
	}
	if h.Queue[0].Value != nil {
		t.Errorf("the waiter's Value = %q, want nil (waiters' values are not read)", h.Queue[0].Value)
	}
}

// TestSetValueAfterLoss: SetValue by a holder whose entry is gone fails
// with ErrNotHeld, closes its Lost, and leaves the new holder's value
// alone, whether the new holder's entry has a name of its own or the old
// holder's (the transaction compares the create revision, not the name).
// The old holder's watch never starts here, so SetValue is what finds the
// loss.
func TestSetValueAfterLoss(t *testing.T) {
	etcd.SetWatchAfter(t, time.Hour)
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	ctx := context.Background()

	t.Run("new-holder", func(t *testing.T) {
		a, b := open(t, url), open(t, url)
		key := uniqueKey("value-lost")
		lkA, err := a.Acquire(ctx, key, locker.WithValue([]byte("a")))
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := locker.ForceRelease(ctx, b, key); !ok || err != nil {
			t.Fatalf("ForceRelease = %v, %v", ok, err)
		}
		lkB, err := b.Acquire(ctx, key, locker.WithValue([]byte("b")))
		if err != nil {
			t.Fatal(err)
		}
		defer lkB.Release(ctx)
		if err := lkA.SetValue(ctx, []byte("a again")); !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("SetValue by the holder whose entry was deleted = %v, want ErrNotHeld", err)
		}
		if !testenv.Closed(lkA.Lost()) {
			t.Error("SetValue found the lock gone, and its Lost is still open")
		}
		wantHolder(t, b, key, lkB, []byte("b"))
	})

	t.Run("same-name", func(t *testing.T) {
		a := open(t, url)
		key := uniqueKey("value-same-name")
		lkA, err := a.Acquire(ctx, key, locker.WithValue([]byte("a")))
		if err != nil {
			t.Fatal(err)
		}
		entry := string(rawEntry(t, raw, key).Key)
		if _, err := raw.Delete(ctx, entry); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Put(ctx, entry, "newer holder"); err != nil {
			t.Fatal(err)
		}
		defer raw.Delete(ctx, entry)
		if err := lkA.SetValue(ctx, []byte("a again")); !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("SetValue by the holder whose entry was recreated by someone else = %v, want ErrNotHeld", err)
		}
		if e := rawEntry(t, raw, key); string(e.Value) != "newer holder" || e.Lease != 0 {
			t.Errorf("the newer entry under the old holder's name after its SetValue: value %q, lease %x; want it untouched", e.Value, e.Lease)
		}
	})
}

// TestSetValueKeepsHold: the watch of held entries sees SetValue's put on
// the holder's entry and takes it for the holder's own: Lost stays open,
// and the lock is still held.
func TestSetValueKeepsHold(t *testing.T) {
	etcd.SetWatchAfter(t, 0) // the watch from the first lock on
	url := testenv.Get(t, testenv.EtcdURL)
	raw := rawClient(t, testenv.Hosts(t, url)...)
	hooks := setWatchHooks(t)
	l := open(t, url)
	ctx := context.Background()
	key := uniqueKey("value-kept")
	lk := acquireUnrefreshed(t, l, key)
	hooks.waitWatch(t) // else the watch may begin after the put
	entry := string(rawEntry(t, raw, key).Key)
	if err := lk.SetValue(ctx, []byte("proclaimed")); err != nil {
		t.Fatal(err)
	}
	hooks.waitChange(t, "PUT", entry)
	// The watcher reports what a response's events say after their hooks
	// ran: a change made now arrives in a later response, applied once
	// that report is done.
	probe := etcd.DefaultNamespace + "/" + uniqueKey("value-probe")
	defer raw.Delete(ctx, probe)
	if _, err := raw.Put(ctx, probe, ""); err != nil {
		t.Fatal(err)
	}
	hooks.waitChange(t, "PUT", probe)
	if testenv.Closed(lk.Lost()) {
		_, err := lk.TTL(ctx)
		t.Fatalf("the watch took the holder's SetValue for a loss: %v", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release after SetValue: %v", err)
	}
}

// observe starts the driver's Observe of key, stopped when the test ends.
func observe(t *testing.T, d backend.Driver, key string) <-chan struct{} {
	t.Helper()
	obs, ok := d.(backend.Observer)
	if !ok {
		t.Fatal("the etcd driver is not a backend.Observer")
	}
	ev, stop, err := obs.Observe(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return ev
}

// notice waits up to d for a notice on ev.
func notice(t *testing.T, ev <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ev:
	case <-time.After(d):
		t.Fatalf("no notice of %s within %v", what, d)
	}
}

// TestObserve: Observe sends a notice after a grant, a SetValue, a
// release and the expiry of a crashed holder's lease, each one seen by an
// Inspect made after it.
func TestObserve(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	addr := testenv.Hosts(t, url)[0]
	d := etcd.NewDriver(rawClient(t, addr), etcd.DefaultNamespace)
	t.Cleanup(func() { d.Close() })
	l := open(t, url)
	ctx := context.Background()
	key := uniqueKey("observe")
	ev := observe(t, d, key)
	inspect := func() locker.Holder {
		t.Helper()
		h, err := locker.Inspect(ctx, l, key)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	lk, err := l.Acquire(ctx, key, locker.WithValue([]byte("one")))
	if err != nil {
		t.Fatal(err)
	}
	notice(t, ev, 10*time.Second, "the grant")
	wantHolder(t, l, key, lk, []byte("one"))
	if err := lk.SetValue(ctx, []byte("two")); err != nil {
		t.Fatal(err)
	}
	notice(t, ev, 10*time.Second, "SetValue")
	wantHolder(t, l, key, lk, []byte("two"))
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	notice(t, ev, 10*time.Second, "the release")
	if h := inspect(); h.Held {
		t.Fatalf("Inspect after the release's notice: %+v, want the key free", h)
	}

	const ttl = 2 * time.Second
	p := testenv.Proxy(t, addr)
	crashed := open(t, "etcd://"+p.Addr())
	clk, err := crashed.Acquire(ctx, key, locker.WithTTL(ttl), locker.WithValue([]byte("crashed")))
	if err != nil {
		t.Fatal(err)
	}
	notice(t, ev, 10*time.Second, "the crashed holder's grant")
	wantHolder(t, l, key, clk, []byte("crashed"))
	p.Cut()
	defer p.Restore()
	bound := max(ttl, crashed.Capabilities().MinTTL) + crashed.Capabilities().ExpirySlack
	notice(t, ev, bound+10*time.Second, "the crashed holder's lease expiry")
	if h := inspect(); h.Held {
		t.Fatalf("Inspect after the expiry's notice: %+v, want the key free", h)
	}
}

// TestObserveAfterCompaction: a watch that cannot resume, its revisions
// compacted while its client was cut off, is created again and sends a
// notice for the changes it missed; later changes send notices as before.
// On a private server: the test compacts its history.
func TestObserveAfterCompaction(t *testing.T) {
	s := startServer(t, "http", plainReady)
	direct := rawClient(t, s.addr)
	p := testenv.Proxy(t, s.addr)
	const ns = "observe"
	d := etcd.NewDriver(rawClient(t, p.Addr()), ns)
	t.Cleanup(func() { d.Close() })
	ctx := context.Background()
	qp := etcd.QueuePrefix(ns, "k")
	ev := observe(t, d, "k")
	put := func(name string) int64 {
		t.Helper()
		r, err := direct.Put(ctx, qp+name, "")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	put("before")
	notice(t, ev, 10*time.Second, "a put")

	p.Cut()
	// Two changes, so that the revision the watch resumes from, at the
	// latest the first's, goes with the compaction.
	put("missed-1")
	rev := put("missed-2")
	if _, err := direct.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	p.Restore()
	notice(t, ev, 30*time.Second, "the changes made while the watch was cut off and compacted")
	for i := range 2 {
		put(fmt.Sprintf("after-%d", i))
		notice(t, ev, 10*time.Second, "a put after the watch was created again")
	}
}

// TestObserveClosed: Observe on a closed driver fails with ErrClosed, and
// Close ends the watch of an Observe nobody stopped (goleak checks).
func TestObserveClosed(t *testing.T) {
	addr := testenv.Hosts(t, testenv.Get(t, testenv.EtcdURL))[0]
	d := etcd.NewDriver(rawClient(t, addr), etcd.DefaultNamespace)
	obs := d.(backend.Observer)
	if _, _, err := obs.Observe(context.Background(), uniqueKey("observe-closed")); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := obs.Observe(context.Background(), uniqueKey("observe-closed")); !errors.Is(err, backend.ErrClosed) {
		t.Errorf("Observe after Close = %v, want ErrClosed", err)
	}
}

// TestElection: locker.NewElection on etcd. The leader's value and term
// (its Lock.Fence) as Leader and Observe report them; Proclaim seen by an
// observer of another Locker; a campaign queued behind the leader wins
// when it resigns, with a larger term.
func TestElection(t *testing.T) {
	url := testenv.Get(t, testenv.EtcdURL)
	ctx := context.Background()
	name := uniqueKey("election")
	e1 := locker.NewElection(open(t, url), name)
	e2 := locker.NewElection(open(t, url), name)
	watcher := open(t, url)

	lead1, err := e1.Campaign(ctx, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	wantLeader := func(got locker.Leader, value string, lead locker.Lock) {
		t.Helper()
		if string(got.Value) != value || !got.Termed || got.Term != fence(lead) {
			t.Fatalf("leader %q, term %d (termed %v); want %q, term %d (the Lock's fence)", got.Value, got.Term, got.Termed, value, fence(lead))
		}
	}
	ldr, err := e1.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(ldr, "one", lead1)

	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := locker.NewElection(watcher, name).Observe(octx)
	next := func(what string) locker.Leader {
		t.Helper()
		select {
		case l, ok := <-seen:
			if !ok {
				t.Fatalf("Observe's channel closed before %s", what)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("Observe did not report %s within 10s", what)
		}
		panic("unreachable")
	}
	wantLeader(next("the leader"), "one", lead1)
	if err := e1.Proclaim(ctx, []byte("one, proclaimed")); err != nil {
		t.Fatal(err)
	}
	wantLeader(next("the proclaimed value"), "one, proclaimed", lead1)

	type result struct {
		lk  locker.Lock
		err error
	}
	won := make(chan result, 1)
	go func() {
		lk, err := e2.Campaign(ctx, []byte("two"))
		won <- result{lk, err}
	}()
	testenv.WaitFor(t, 30*time.Second, "the second campaign queues", func() bool {
		h, err := locker.Inspect(ctx, watcher, name)
		return err == nil && h.Waiters == 1
	})
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-won:
	case <-time.After(30 * time.Second):
		t.Fatal("the second campaign did not win within 30s of the leader's Resign")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer e2.Resign(ctx)
	if fence(r.lk) <= fence(lead1) {
		t.Errorf("the new leader's term %d is not above the old one's, %d", fence(r.lk), fence(lead1))
	}
	wantLeader(next("the new leader"), "two", r.lk)
	ldr, err = e2.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(ldr, "two", r.lk)
}
