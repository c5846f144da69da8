package zkclient

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker/internal/testenv"
)

// silentServer accepts connections, reads whatever comes on them and never
// answers: a server that took a connection in and will not serve it, as a
// starting ZooKeeper 3.8 does with one it fails to refuse.
type silentServer struct {
	ln    net.Listener
	ended chan silentEnd // each connection's end, as it ends
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// silentEnd is what a silentServer read on one connection before it ended.
type silentEnd struct {
	read []byte
	err  error // why reading ended: io.EOF when the client closed it
}

// startSilent starts a silentServer, stopped when the test ends.
func startSilent(t *testing.T) *silentServer {
	t.Helper()
	ln, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln, ended: make(chan silentEnd, 16)}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *silentServer) addr() string { return s.ln.Addr().String() }

func (s *silentServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			b, err := io.ReadAll(c)
			if err == nil {
				err = io.EOF // ReadAll reports the client's close as no error
			}
			select {
			case s.ended <- silentEnd{b, err}:
			default:
			}
		}()
	}
}

// isRequest reports whether b is exactly one whole packet (a length, then
// that many bytes), as a session request is.
func isRequest(b []byte) bool {
	return len(b) >= 4 && int(binary.BigEndian.Uint32(b)) == len(b)-4
}

// TestUnansweredHandshake drives the interleaving behind a flaky
// zookeeper.TestReconnectGrantsShorter: a session's connection ends (the
// server went away: an end of stream, not a silence); the reconnect's dial
// is accepted by a server that never answers the session request (a
// restarting ZooKeeper 3.8 leaves such a connection open for good); the
// next dial reaches a server that answers. The Conn must abandon the
// silent connection well before connectTimeout (the session timeout, with
// one server) and resume its session on the next one: waiting out the
// whole timeout would leave the session's locks to expire meanwhile.
func TestUnansweredHandshake(t *testing.T) {
	const session = 24 * time.Second // connectTimeout: 24s; the first answer is waited for 3s
	sl := startSilent(t)
	f := &faults{}
	var toSilent atomic.Bool // the next dial goes to the silent server
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if toSilent.CompareAndSwap(true, false) {
			var d net.Dialer
			return d.DialContext(ctx, network, sl.addr())
		}
		return f.dial(ctx, network, addr)
	}
	ch := newChanges()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{server(t)}, SessionTimeout: session, OnChange: ch.add, Dial: dial})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first, seen := ch.await(t, 0, StateConnected)
	root := tree(t, c, "unanswered")
	eph, err := c.Create(root+"/e", nil, gozk.FlagEphemeral, worldACL)
	if err != nil {
		t.Fatal(err)
	}

	toSilent.Store(true)
	f.cut(false)
	// The silent connection ends only when the client gives up on it.
	// With the whole connectTimeout as its bound that would be 24s after
	// the dial: 18s is far past the bound it gets and short of that.
	select {
	case end := <-sl.ended:
		if !isRequest(end.read) || !errors.Is(end.err, io.EOF) {
			t.Fatalf("the silent server read %d bytes (%x), then %v; want a whole session request, then the client's close", len(end.read), end.read, end.err)
		}
	case <-time.After(session * 3 / 4):
		t.Fatalf("the Conn still waits for an answer from the silent server %v after its connection dropped", session*3/4)
	}
	if toSilent.Load() {
		t.Fatal("no dial went to the silent server")
	}
	again, _ := ch.await(t, seen, StateConnected)
	if again.Session != first.Session {
		t.Fatalf("after the unanswered handshake, session %#x, want %#x resumed", again.Session, first.Session)
	}
	if _, _, err := c.Get(eph); err != nil {
		t.Fatalf("the session's ephemeral node after the reconnect: %v", err)
	}
}

// TestSlowHandshake: on a link slower than the first bound on a
// handshake's answer (an eighth of connectTimeout, at least a second),
// though within connectTimeout, the session is granted all the same:
// each unanswered try waits twice as long as the one before. Once
// connected, the link's round trip is known, and a reconnect over the same
// slow link resumes the session at the first dial.
func TestSlowHandshake(t *testing.T) {
	p := testenv.Proxy(t, server(t))
	p.SetLatency(700 * time.Millisecond) // a round trip of 1.4s at least: past the first bound of 1s
	f := &faults{}
	ch := newChanges()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{p.Addr()}, SessionTimeout: 8 * time.Second, OnChange: ch.add, Dial: f.dial})
	if err != nil {
		t.Fatalf("Connect over a link slower than the first bound: %v", err)
	}
	defer c.Close()
	f.mu.Lock()
	dials := f.dials
	f.mu.Unlock()
	if dials < 2 {
		t.Fatalf("%d dials before the session was granted over a 1.4s round trip; want the first (1s bound) abandoned", dials)
	}
	first, seen := ch.await(t, 0, StateConnected)

	f.cut(false)
	again, _ := ch.await(t, seen, StateConnected)
	if again.Session != first.Session {
		t.Fatalf("after the reconnect over the slow link, session %#x, want %#x resumed", again.Session, first.Session)
	}
	f.mu.Lock()
	redials := f.dials - dials
	f.mu.Unlock()
	if redials != 1 {
		t.Errorf("%d dials to resume the session over a link whose round trip was measured; want 1", redials)
	}
	p.SetLatency(0)
}

// TestAnswerTimeout: the bound on a handshake's answer.
func TestAnswerTimeout(t *testing.T) {
	for _, tc := range []struct {
		connect, rtt time.Duration
		unanswered   int
		want         time.Duration
	}{
		{time.Minute, 0, 0, 7500 * time.Millisecond}, // an eighth of connectTimeout
		{time.Minute, 0, 1, 15 * time.Second},        // doubled for each unanswered try
		{time.Minute, 0, 3, time.Minute},
		{time.Minute, 0, 100, time.Minute}, // never past connectTimeout, nor overflowing
		{4 * time.Second, 0, 0, time.Second},
		{4 * time.Second, 0, 1, 2 * time.Second},
		{time.Second, 0, 0, time.Second},                     // connectTimeout's own floor
		{time.Minute, 10 * time.Second, 0, 30 * time.Second}, // three round trips seen
		{time.Minute, 10 * time.Millisecond, 0, 7500 * time.Millisecond},
		{3 * time.Second, 2 * time.Second, 0, 3 * time.Second}, // a connection dropped for 2/3 of the timeout's silence: all of it
		{10 * time.Second, 9 * time.Second, 0, 10 * time.Second},
	} {
		if got := answerTimeout(tc.connect, tc.rtt, tc.unanswered); got != tc.want {
			t.Errorf("answerTimeout(%v, %v, %d) = %v, want %v", tc.connect, tc.rtt, tc.unanswered, got, tc.want)
		}
	}
}
