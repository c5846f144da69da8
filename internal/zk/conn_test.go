package zk

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker/internal/testenv"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// gatedDialer dials for real, once its gate is open, and remembers the
// connection it made last so that a test can drop it. While hold is set,
// a connection that has sent an Exists request touches the socket for no
// later request until hold is closed.
type gatedDialer struct {
	mu   sync.Mutex
	gate chan struct{}
	hold chan struct{}
	last net.Conn
}

type heldConn struct {
	net.Conn
	g      *gatedDialer
	exists atomic.Bool // an Exists request went out
}

func (c *heldConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	// A request is one write: length, xid, opcode, body.
	if len(b) >= 12 && int32(binary.BigEndian.Uint32(b[8:12])) == opExists {
		c.exists.Store(true)
	}
	return n, err
}

// SetWriteDeadline starts every request write. Holding it, not Write,
// keeps the send loop off the socket: any operation on it would order the
// send loop's later steps before the receive loop's next read.
func (c *heldConn) SetWriteDeadline(t time.Time) error {
	if !t.IsZero() && c.exists.Load() {
		c.g.mu.Lock()
		hold := c.g.hold
		c.g.mu.Unlock()
		if hold != nil {
			<-hold
		}
	}
	return c.Conn.SetWriteDeadline(t)
}

func (g *gatedDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	<-gate
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.last = c
	g.mu.Unlock()
	return &heldConn{Conn: c, g: g}, nil
}

// drop shuts the gate and drops the current connection; open lets the
// client connect again, and release lets its new connection send what
// follows its first Exists request.
func (g *gatedDialer) drop() (open, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate, hold := make(chan struct{}), make(chan struct{})
	g.gate, g.hold = gate, hold
	g.last.Close()
	return func() { close(gate) }, func() { close(hold) }
}

// TestReconnectWithWatchAndQueuedRequest drives the interleaving behind
// the data race that go-zookeeper v1.0.4 has on lastZxid (see doc.go): a
// watch is registered, the connection drops, a request is queued while
// the client is away, and on the new connection the receive loop reads
// that request's reply before the SetWatches request goes out (the
// connection holds it back), while the connection loop reads lastZxid to
// build it: nothing orders the two. With the released client the race detector reports this on
// every run; here the request succeeds, and the watch still fires.
func TestReconnectWithWatchAndQueuedRequest(t *testing.T) {
	host := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperURL))[0]
	g := &gatedDialer{gate: make(chan struct{})}
	close(g.gate)
	c, events, err := Connect([]string{host}, 10*time.Second, WithDialer(g.dial), WithLogger(quiet{}), WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitState(t, events, StateHasSession)

	b := make([]byte, 8)
	rand.Read(b)
	path := "/locker-zk-test-" + hex.EncodeToString(b)
	exists, _, watch, err := c.ExistsW(path)
	if err != nil || exists {
		t.Fatalf("ExistsW(%s) = %v, %v; want a watch on a node that does not exist", path, exists, err)
	}

	open, release := g.drop()
	waitState(t, events, StateDisconnected)
	// Queue a request while there is no connection, and let the client
	// reconnect only once the request waits for its reply.
	var done chan error
	queue := func() {
		done = make(chan error, 1)
		go func() {
			_, _, err := c.Exists("/")
			done <- err
		}()
	}
	queue()
	testenv.WaitFor(t, 10*time.Second, "the request queued", func() bool {
		select {
		case err := <-done:
			// With one server, the reconnect's first pass over the
			// server list fails what was queued before it with
			// ErrNoServer: queue another.
			if !errors.Is(err, ErrNoServer) {
				t.Fatalf("request queued while disconnected: %v, want it to wait (or ErrNoServer)", err)
			}
			queue()
			return false
		default:
			return waitingForReply()
		}
	})
	open()

	deadline := time.After(30 * time.Second)
	for answered := false; !answered; {
		select {
		case err := <-done:
			if errors.Is(err, ErrNoServer) {
				// The flush of the pass over the server list came after
				// the request was seen waiting: the next one waits out
				// that pass's pause, still before the new connection.
				queue()
				continue
			}
			if err != nil {
				t.Fatalf("request queued across the reconnect: %v", err)
			}
			answered = true
		case <-deadline:
			t.Fatal("request queued across the reconnect still has no answer after 30s")
		}
	}
	release()
	if _, err := c.Create(path, nil, FlagEphemeral, WorldACL(PermAll)); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-watch:
		if ev.Type != EventNodeCreated || ev.Path != path {
			t.Fatalf("watch fired with %+v, want EventNodeCreated on %s", ev, path)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watch set before the reconnect did not fire on create: it was not re-registered")
	}
}

// waitState reads events until the session reaches s.
func waitState(t *testing.T, events <-chan Event, s State) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.Type == EventSession && ev.State == s {
				return
			}
		case <-timeout:
			t.Fatalf("session never reached %v", s)
		}
	}
}

// waitingForReply tells whether some goroutine waits in Conn.request for a
// reply: the request is queued for sending.
func waitingForReply() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "zk.(*Conn).request(") {
			return true
		}
	}
	return false
}
