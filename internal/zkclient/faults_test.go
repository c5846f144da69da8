package zkclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/internal/testenv"
)

// queuedLen returns how many requests wait for a connection.
func (c *Conn) queuedLen() int {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.queued)
}

// awaitEvent waits for a watch's event.
func awaitEvent(t *testing.T, w <-chan gozk.Event, what string) gozk.Event {
	t.Helper()
	select {
	case ev := <-w:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no event within 30s", what)
	}
	panic("unreachable")
}

// TestReconnectWithWatchAndQueuedRequest drives the interleaving behind
// go-zookeeper v1.0.4's data race on its lastZxid: a watch is set, the
// connection drops, a request is made while there is none, and the
// client reconnects with the watch to set again and the request to send.
// Here the zxid the watches are set again from, the watches themselves and
// every reply are the connection goroutine's alone, and the re-set watches
// go out before the queued request. The session resumes, the request is
// answered on the new connection, and the watch, set before the drop,
// fires on a change made after it.
func TestReconnectWithWatchAndQueuedRequest(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "requeue")
	if _, err := c.Create(root+"/w", []byte("1"), 0, worldACL); err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := c.GetW(root + "/w")
	if err != nil {
		t.Fatal(err)
	}
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	session := c.SessionID()

	seen := len(ch.list())
	f.cut(true)
	_, seen = ch.await(t, seen, StateDisconnected)
	// A request made now waits for a connection; a pass over the servers
	// that fails fails it (ErrNoServer): make it again until it is seen
	// waiting with dials allowed again.
	done := make(chan error, 1)
	var mu sync.Mutex
	var children []string
	ask := func() {
		go func() {
			cs, _, err := c.Children(root)
			mu.Lock()
			children = cs
			mu.Unlock()
			done <- err
		}()
	}
	ask()
	testenv.WaitFor(t, 10*time.Second, "a request waiting for a connection", func() bool {
		select {
		case err := <-done:
			if !errors.Is(err, gozk.ErrNoServer) {
				t.Fatalf("a request made while disconnected: %v, want it to wait or fail with ErrNoServer", err)
			}
			ask()
			return false
		default:
			return c.queuedLen() > 0
		}
	})
	f.restore()
	for {
		err := <-done
		if errors.Is(err, gozk.ErrNoServer) {
			ask() // failed by the pass that ended as dials were allowed again
			continue
		}
		if err != nil {
			t.Fatalf("the request queued across the reconnect: %v", err)
		}
		break
	}
	mu.Lock()
	if len(children) != 2 {
		t.Errorf("the queued listing: %v, want w and e", children)
	}
	mu.Unlock()
	got, _ := ch.await(t, seen, StateConnected)
	if got.Session != session || c.SessionID() != session {
		t.Fatalf("after a cut shorter than the timeout the session is %#x, want %#x resumed", got.Session, session)
	}
	if ok, st, err := o.Exists(eph); !ok || err != nil || st.EphemeralOwner != session {
		t.Fatalf("the ephemeral node after the session resumed: %v, %v", ok, err)
	}
	if _, err := o.Set(root+"/w", []byte("2"), -1); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, watch, "the watch set before the reconnect"); ev.Type != gozk.EventNodeDataChanged || ev.Path != root+"/w" {
		t.Fatalf("the watch set before the reconnect fired %+v", ev)
	}
}

// TestWatchFiresForChangeWhileAway: a change made while the connection is
// down fires the watch once the client is back: the server compares the
// node with the last zxid the client saw.
func TestWatchFiresForChangeWhileAway(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "away")
	if _, err := c.Create(root+"/w", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := c.GetW(root + "/w")
	if err != nil {
		t.Fatal(err)
	}
	seen := len(ch.list())
	f.cut(true)
	ch.await(t, seen, StateDisconnected)
	if err := o.Delete(root+"/w", -1); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-watch:
		t.Fatalf("the watch fired while disconnected: %+v", ev)
	default:
	}
	f.restore()
	if ev := awaitEvent(t, watch, "a watch whose node went while away"); ev.Type != gozk.EventNodeDeleted {
		t.Fatalf("fired %+v, want EventNodeDeleted", ev)
	}
}

// TestManyWatchesAcrossReconnect: more watches than one SetWatches packet
// holds are all set again.
func TestManyWatchesAcrossReconnect(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "many")
	const n = 1500
	long := strings.Repeat("x", 100) // 1500 paths of some 150 bytes: two packets
	paths := make([]string, n)
	for start := 0; start < n; start += 500 {
		var ops []any
		for i := start; i < start+500; i++ {
			paths[i] = fmt.Sprintf("%s/%s-%d", root, long, i)
			ops = append(ops, &gozk.CreateRequest{Path: paths[i], Acl: worldACL})
		}
		if _, err := c.Multi(ops...); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := c.GetWAll(Stop{}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	seen := len(ch.list())
	f.cut(false)
	ch.await(t, seen, StateConnected)
	var ops []any
	for _, p := range paths {
		ops = append(ops, &gozk.DeleteRequest{Path: p, Version: -1})
	}
	for i := 0; i < n; i += 500 {
		if _, err := o.Multi(ops[i : i+500]...); err != nil {
			t.Fatal(err)
		}
	}
	for i, w := range ws {
		if ev := awaitEvent(t, w.Event, paths[i]); ev.Type != gozk.EventNodeDeleted {
			t.Fatalf("watch %d fired %+v", i, ev)
		}
	}
}

// TestSessionExpiry: a client kept away for longer than its session
// timeout finds the session expired: it says so (StateExpired), its
// watches end, what waited for a connection fails, and it goes on with a
// new session.
func TestSessionExpiry(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, time.Second, f) // the test servers' shortest
	o := observer(t)
	root := tree(t, c, "expiry")
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := c.GetW(eph)
	if err != nil {
		t.Fatal(err)
	}
	old := c.SessionID()
	seen := len(ch.list())
	f.cut(true)
	testenv.WaitFor(t, 30*time.Second, "the server expiring the session", func() bool {
		ok, _, err := o.Exists(eph)
		return err == nil && !ok
	})
	select {
	case ev := <-watch:
		t.Fatalf("the watch fired while the client was away: %+v", ev)
	default:
	}
	f.restore()
	exp, seen := ch.await(t, seen, StateExpired)
	if exp.Server != server(t) {
		t.Errorf("expiry reported for %q, want %q", exp.Server, server(t))
	}
	ev := awaitEvent(t, watch, "a watch of the expired session")
	if ev.Type != gozk.EventNotWatching || !errors.Is(ev.Err, gozk.ErrSessionExpired) {
		t.Fatalf("the expired session's watch got %+v, want EventNotWatching with ErrSessionExpired", ev)
	}
	got, _ := ch.await(t, seen, StateConnected)
	if got.Session == old || got.Session == 0 || c.SessionID() != got.Session {
		t.Fatalf("after the expiry: session %#x (reported %#x), want a new one", c.SessionID(), got.Session)
	}
	p, err := c.Create(root+"/e2", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	if _, st, err := o.Exists(p); err != nil || st.EphemeralOwner != got.Session {
		t.Fatalf("a node of the new session: %+v, %v", st, err)
	}
}

// TestServerClosesMidReply: a connection that ends inside a reply fails
// the requests awaiting theirs with ErrConnectionClosed (their outcome is
// unknown), and the client resumes its session on a new connection.
func TestServerClosesMidReply(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	root := tree(t, c, "midreply")
	session := c.SessionID()
	seen := len(ch.list())
	f.last().truncate.Store(true)
	_, _, err := c.Children(root)
	if !errors.Is(err, gozk.ErrConnectionClosed) {
		t.Fatalf("a request whose reply was cut: %v, want ErrConnectionClosed", err)
	}
	got, _ := ch.await(t, seen, StateConnected)
	if got.Session != session {
		t.Fatalf("session %#x after the cut, want %#x resumed", got.Session, session)
	}
	if _, _, err := c.Children(root); err != nil {
		t.Fatalf("after the reconnect: %v", err)
	}
}

// TestStop: a request whose Stop ends returns ErrStopped at once; a create
// stopped that way reports its outcome to late once it comes.
func TestStop(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	o := observer(t)
	root := tree(t, c, "stop")
	stopped := make(chan struct{})
	close(stopped)
	// A stop that has ended before the call: the request still goes out,
	// and its outcome comes to late. A reply there wins over a stop, and
	// on a busy machine the reply may be back before the wait begins (it
	// is only a loopback round trip away): then the create is ours at
	// once, and the test deletes it and tries again.
	var cr Created
	for try := 1; ; try++ {
		lates := make(chan Created, 1)
		out, _, err := c.CreateAndList(Stop{Done: stopped}, root+"/n-", nil, gozk.FlagEphemeralSequential, worldACL, root, func(cr Created, err error) {
			if err != nil {
				t.Errorf("late: %v", err)
			}
			lates <- cr
		})
		if err == nil && try < 50 {
			if err := c.DeleteStop(Stop{}, out.Path, -1); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("CreateAndList with a stop already ended, %d times: %v, want ErrStopped", try, err)
		}
		cr = <-lates
		break
	}
	if ok, st, _ := o.Exists(cr.Path); !ok || st.Czxid != cr.Zxid {
		t.Fatalf("the stopped create's late outcome %+v does not match the server's node", cr)
	}
	if _, _, err := c.ChildrenStop(Stop{Gone: stopped}, root); err != nil && !errors.Is(err, ErrStopped) {
		t.Fatalf("ChildrenStop: %v", err)
	}
	if err := c.DeleteStop(Stop{}, cr.Path, -1); err != nil {
		t.Fatal(err)
	}
}

// TestClose: Close ends the session at once (its ephemeral nodes go),
// fails what waits, and later requests fail with ErrClosing; it is safe
// to call twice, and while the client is away.
func TestClose(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 30*time.Second, f)
	o := observer(t)
	root := tree(t, c, "close")
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	_, _, watch, err := c.GetW(root) // on a node that stays
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if ok, _, err := o.Exists(eph); ok || err != nil {
		t.Fatalf("the ephemeral node after Close: %v, %v; want it gone with the session", ok, err)
	}
	if ev := awaitEvent(t, watch, "a watch at Close"); ev.Type != gozk.EventNotWatching || !errors.Is(ev.Err, gozk.ErrClosing) {
		t.Fatalf("a watch at Close got %+v", ev)
	}
	if _, _, err := c.Children(root); !errors.Is(err, gozk.ErrClosing) {
		t.Fatalf("a request after Close: %v, want ErrClosing", err)
	}
	for _, s := range ch.list() {
		if s.State == StateDisconnected {
			t.Fatalf("Close reported as a drop: %+v", ch.list())
		}
	}

	// Close while away: the requests waiting for a connection fail.
	c2, ch2 := connect(t, 30*time.Second, f)
	seen := len(ch2.list())
	f.cut(true)
	ch2.await(t, seen, StateDisconnected)
	done := make(chan error, 1)
	go func() {
		_, _, err := c2.Children(root)
		done <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "a request waiting for a connection", func() bool {
		select {
		case err := <-done:
			if !errors.Is(err, gozk.ErrNoServer) {
				t.Fatalf("a request while away: %v", err)
			}
			go func() {
				_, _, err := c2.Children(root)
				done <- err
			}()
			return false
		default:
			return c2.queuedLen() > 0
		}
	})
	start := time.Now()
	c2.Close()
	if err := <-done; !errors.Is(err, gozk.ErrClosing) && !errors.Is(err, gozk.ErrNoServer) {
		t.Fatalf("a request waiting at Close: %v, want ErrClosing", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close while away took %v", d)
	}
	f.restore()
}

// TestSlowLink: on a link whose round trip is longer than two thirds of
// the session timeout (the client gives up on a connection silent that
// long) but fits in the timeout, the client keeps connecting again, each
// handshake answered in time, and what it sends gets through: a delete
// sent over such a connection is applied though its reply never makes it
// back in time.
func TestSlowLink(t *testing.T) {
	p := testenv.Proxy(t, server(t))
	ch := newChanges()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{p.Addr()}, SessionTimeout: 3 * time.Second, OnChange: ch.add})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := observer(t)
	root := tree(t, c, "slow")
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	seen := len(ch.list())
	p.SetLatency(1200 * time.Millisecond) // a 2.4s round trip: past 2s, within 3s
	ch.await(t, seen, StateDisconnected)
	done := make(chan error, 1)
	go func() { done <- c.Delete(eph, -1) }()
	testenv.WaitFor(t, 30*time.Second, "the delete applied over the slow link", func() bool {
		ok, _, err := o.Exists(eph)
		return err == nil && !ok
	})
	p.SetLatency(0)
	if err := <-done; err != nil && !errors.Is(err, gozk.ErrConnectionClosed) && !errors.Is(err, gozk.ErrNoServer) {
		t.Fatalf("the delete over the slow link: %v", err)
	}
	for _, s := range ch.list() {
		if s.State == StateExpired {
			t.Fatal("the session expired on a link slow but within its timeout")
		}
	}
}

// TestCloseWhileAway: Close between connections ends the session on the
// next one, so that its ephemeral nodes go at once rather than a session
// timeout later. Close here begins right as the connection drops, before
// the Conn decides whether to connect again: it must still connect, to
// send the closeSession that waits for a connection.
func TestCloseWhileAway(t *testing.T) {
	f := &faults{}
	ch := newChanges()
	var c *Conn
	var armed atomic.Bool
	closed := make(chan struct{})
	onChange := func(x Change) {
		ch.add(x)
		if x.State == StateDisconnected && armed.Load() {
			go func() {
				c.Close()
				close(closed)
			}()
			for !c.ending.Load() { // Close has begun before the Conn goes on
				runtime.Gosched()
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{server(t)}, SessionTimeout: 30 * time.Second, OnChange: onChange, Dial: f.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := observer(t)
	root := tree(t, c, "closeaway")
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	armed.Store(true)
	f.cut(false)
	testenv.WaitFor(t, 10*time.Second, "the closeSession request waiting for a connection", func() bool { return c.queuedLen() == 1 })
	if _, _, err := c.Children(root); !errors.Is(err, gozk.ErrClosing) {
		t.Fatalf("a request while Close ends the session: %v, want ErrClosing", err)
	}
	close(gate)
	<-closed
	if ok, _, err := o.Exists(eph); ok || err != nil {
		t.Fatalf("the ephemeral node after Close while away: %v, %v; want it gone with the session", ok, err)
	}
}

// TestConnectFails: Connect to a port nobody serves fails once its context
// ends, naming the reason, and leaves no goroutine behind (TestMain).
func TestConnectFails(t *testing.T) {
	ln, err := listenClosed()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = Connect(ctx, Config{Servers: []string{ln}, SessionTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), ln) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Connect to a closed port: %v, want an error naming it and the refusal", err)
	}
	for _, cfg := range []Config{{SessionTimeout: time.Second}, {Servers: []string{ln}}, {Servers: []string{ln}, SessionTimeout: -time.Second}} {
		if _, err := Connect(ctx, cfg); err == nil {
			t.Errorf("Connect(%+v) succeeded", cfg)
		}
	}
}

// TestAuth: digest credentials are accepted and hold on later connections;
// credentials the server refuses make the Conn refuse every request.
func TestAuth(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	root := tree(t, c, "auth")
	if err := c.AddAuth("digest", []byte("user:secret")); err != nil {
		t.Fatal(err)
	}
	acl := gozk.DigestACL(gozk.PermAll, "user", "secret")
	if _, err := c.Create(root+"/private", nil, 0, acl); err != nil {
		t.Fatal(err)
	}
	seen := len(ch.list())
	f.cut(false)
	ch.await(t, seen, StateConnected)
	if _, _, err := c.Get(root + "/private"); err != nil {
		t.Fatalf("a node of the credentials, read after a reconnect: %v", err)
	}
	o := observer(t)
	if _, _, err := o.Get(root + "/private"); !errors.Is(err, gozk.ErrNoAuth) {
		t.Fatalf("another client reads the node: %v, want ErrNoAuth", err)
	}
	if err := c.Delete(root+"/private", -1); err != nil {
		t.Fatal(err)
	}

	bad, ch2 := connect(t, 8*time.Second, nil)
	if err := bad.AddAuth("no-such-scheme", []byte("x")); !errors.Is(err, gozk.ErrAuthFailed) {
		t.Fatalf("AddAuth with an unknown scheme: %v, want ErrAuthFailed", err)
	}
	ch2.await(t, 0, StateAuthFailed)
	if _, _, err := bad.Children("/"); !errors.Is(err, gozk.ErrAuthFailed) {
		t.Fatalf("a request after the credentials were refused: %v, want ErrAuthFailed", err)
	}
}

// TestConcurrentRequests: requests from many goroutines, pipelined on one
// connection, each get their own reply.
func TestConcurrentRequests(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	root := tree(t, c, "concurrent")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				p := fmt.Sprintf("%s/g%d-%d", root, g, i)
				data := []byte(p)
				if _, err := c.Create(p, data, gozk.FlagEphemeral, worldACL); err != nil {
					errs <- err
					return
				}
				got, _, err := c.Get(p)
				if err != nil || string(got) != p {
					errs <- fmt.Errorf("Get(%s) = %q, %v", p, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	children, _, err := c.Children(root)
	if err != nil || len(children) != 16*50 {
		t.Fatalf("%d children, %v; want %d", len(children), err, 16*50)
	}
}

// TestProbe: the range the test server grants, and pings timed.
func TestProbe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lo, err := Probe(ctx, server(t), 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	hi, err := Probe(ctx, server(t), time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	// scripts/services.sh: minSessionTimeout 1000, maxSessionTimeout 120000.
	if lo.Granted != time.Second || hi.Granted != 2*time.Minute || len(lo.RTTs) != 3 || lo.RTTs[0] <= 0 {
		t.Fatalf("Probe: %+v and %+v, want 1s with 3 round trips and 2m", lo, hi)
	}
}

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// listenClosed returns an address on which nothing listens.
func listenClosed() (string, error) {
	ln, err := listen()
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, nil
}

// TestClosedBeforeAnswer: a server that accepts a connection and closes it
// before answering the session request, as ZooKeeper does to a client
// address past its maxClientCnxns, gets an error that names that limit as
// a likely cause, from Probe and from Connect alike. The listener here
// stands for nothing but a connection closed at once.
func TestClosedBeforeAnswer(t *testing.T) {
	ln, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	defer func() {
		ln.Close()
		<-accepting
	}()
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Probe(ctx, addr, time.Second, 0)
	if err == nil || !strings.Contains(err.Error(), "maxClientCnxns") {
		t.Errorf("Probe of a server that closes at once: %v, want maxClientCnxns named as a likely cause", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer ccancel()
	_, err = Connect(cctx, Config{Servers: []string{addr}, SessionTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "maxClientCnxns") {
		t.Errorf("Connect to a server that closes at once: %v, want maxClientCnxns named as a likely cause", err)
	}
}

// TestClosedEarly: the errors of a connection the server closed at once
// (as a server past its maxClientCnxns does), however the kernel reports
// it, name the limit; a refused connection does not.
func TestClosedEarly(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EPIPE)}, true},
		{&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{os.ErrDeadlineExceeded, false},
	} {
		if got := closedEarly(tc.err); got != tc.want {
			t.Errorf("closedEarly(%v) = %v, want %v", tc.err, got, tc.want)
		}
		if got := strings.Contains(noAnswer(tc.err).Error(), "maxClientCnxns"); got != tc.want {
			t.Errorf("noAnswer(%v) names the limit: %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestChildWatchFiresForChangeWhileAway: a child watch is set again on a
// new connection (SetWatches' third list) and fires for a child created
// while the connection was down.
func TestChildWatchFiresForChangeWhileAway(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "childaway")
	_, _, data, err := c.GetW(root)
	if err != nil {
		t.Fatal(err)
	}
	_, _, children, err := c.ChildrenW(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := len(ch.list())
	f.cut(true)
	ch.await(t, seen, StateDisconnected)
	if _, err := o.Create(root+"/new", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	f.restore()
	if ev := awaitEvent(t, children, "a child watch whose node gained a child while away"); ev.Type != gozk.EventNodeChildrenChanged {
		t.Fatalf("fired %+v, want EventNodeChildrenChanged", ev)
	}
	// The data watch on the same node, set again alongside, has not fired:
	// its node's data did not change.
	if _, err := c.Sync(root); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-data:
		t.Fatalf("the data watch fired for a new child: %+v", ev)
	default:
	}
	if _, err := o.Set(root, []byte("v"), -1); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, data, "the data watch set again"); ev.Type != gozk.EventNodeDataChanged {
		t.Fatalf("fired %+v, want EventNodeDataChanged", ev)
	}
}
