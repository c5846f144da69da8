package zkclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/goleak"
)

// The ops a Conn awaits replies to, in xid order from 1, in FuzzDispatch.
var fuzzOps = []opcode{opCreate2, opCreateContainer, opDelete, opExists, opGetData, opSetData, opGetChildren2, opSync, opMulti, opCheck, opCloseSession}

// reply encodes one packet from the server: a reply header and body.
func reply(xid int32, zxid int64, code int32, body func(*encoder)) []byte {
	var e encoder
	at := len(e.b)
	e.int32(0)
	e.int32(xid)
	e.int64(zxid)
	e.int32(code)
	if body != nil {
		body(&e)
	}
	e.end(at)
	return e.b
}

func statBytes(e *encoder) {
	for range statSize {
		e.b = append(e.b, 7)
	}
}

// fuzzSeeds are well-formed streams: a reply to each op, an error reply,
// a notification, pings.
func fuzzSeeds() [][]byte {
	var all []byte
	bodies := map[opcode]func(*encoder){
		opCreate2:         func(e *encoder) { e.string("/a/n-0000000001"); statBytes(e) },
		opCreateContainer: func(e *encoder) { e.string("/a"); statBytes(e) },
		opExists:          statBytes,
		opGetData:         func(e *encoder) { e.buffer([]byte("locker:1")); statBytes(e) },
		opSetData:         statBytes,
		opGetChildren2:    func(e *encoder) { e.strings([]string{"n-1", "n-2"}); statBytes(e) },
		opSync:            func(e *encoder) { e.string("/a") },
		opMulti: func(e *encoder) {
			multiHeader(e, opCheck)
			multiHeader(e, opError)
			e.int32(-101)
			multiHeader(e, opCreate)
			e.string("/a/b")
			e.int32(-1)
			e.bool(true)
			e.int32(-1)
		},
	}
	for i, op := range fuzzOps {
		all = append(all, reply(int32(i+1), int64(100+i), 0, bodies[op])...)
	}
	notify := reply(xidNotification, -1, 0, func(e *encoder) {
		e.int32(evNodeDeleted)
		e.int32(3)
		e.string("/a")
	})
	notify = append(notify, reply(xidNotification, -1, 0, func(e *encoder) {
		e.int32(evNodeChildrenChanged)
		e.int32(3)
		e.string("/c")
	})...)
	notify = append(notify, reply(xidNotification, -1, 0, func(e *encoder) {
		e.int32(evNodeCreated)
		e.int32(3)
		e.string("/e")
	})...)
	ping := reply(xidPing, 5, 0, nil)
	errReply := reply(1, 9, -101, nil)
	return [][]byte{all, append(append(ping, notify...), errReply...), ping, {0, 0, 0, 1, 9}, {0xff, 0xff, 0xff, 0xff}}
}

// FuzzDispatch feeds arbitrary bytes, as if from the server, to a Conn
// awaiting a reply to each kind of request: no input panics it, every
// request gets exactly one outcome (the rest failing as a dropped
// connection fails them), and a watch, data or child, is set only by a
// successful read; an exists watch also by ErrNoNode.
func FuzzDispatch(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := &Conn{watches: map[string][]chan gozk.Event{}, children: map[string][]chan gozk.Event{}, exists: map[string][]chan gozk.Event{}, log: discard()}
		var rs []*request
		for i, op := range fuzzOps {
			r := &request{op: op, xid: int32(i + 1), done: make(chan struct{})}
			switch op {
			case opCreate2:
				r.asked, r.seq = "/a/n-", true
			case opCreateContainer, opSync:
				r.asked = "/a"
			case opGetData:
				r.watchPath, r.watch = "/a", make(chan gozk.Event, 1)
			case opGetChildren2:
				r.watchPath, r.watch = "/c", make(chan gozk.Event, 1)
			case opExists:
				r.watchPath, r.watch = "/e", make(chan gozk.Event, 1)
			}
			c.pending.push(r)
			rs = append(rs, r)
		}
		fr := newFrameReader(bytes.NewReader(stream))
		for {
			b, err := fr.next()
			if err != nil {
				break
			}
			if err := c.dispatch(b); err != nil {
				break
			}
		}
		for _, r := range c.pending.drain() {
			r.complete(gozk.ErrConnectionClosed)
		}
		for _, r := range rs {
			select {
			case <-r.done:
			default:
				t.Fatalf("request %d (op %d) has no outcome", r.xid, r.op)
			}
			if r.err == nil && !agrees(r) {
				t.Fatalf("op %d succeeded with a reply that contradicts it: path %q, children %q", r.op, r.path, r.children)
			}
			if r.watch != nil {
				ws := map[opcode]map[string][]chan gozk.Event{opGetData: c.watches, opGetChildren2: c.children, opExists: c.watches}[r.op]
				want := r.err == nil
				if r.op == opExists && errors.Is(r.err, gozk.ErrNoNode) {
					// Watching for the node's creation.
					ws, want = c.exists, true
				}
				set := len(ws[r.watchPath]) > 0 || len(r.watch) > 0
				if set != want {
					t.Fatalf("op %d's outcome %v, watch set %v", r.op, r.err, set)
				}
			}
		}
	})
}

// agrees reports whether the decoded reply of a successful request r
// means what r asked for: a create's path is r's own (the container's)
// or a direct child of its parent named r's name and a number (the
// sequential node's), a sync's is the path synced, a listing's children
// are names.
func agrees(r *request) bool {
	switch r.op {
	case opCreate2:
		return isSeqChild(r.asked, r.path)
	case opCreateContainer, opSync:
		return r.path == r.asked
	case opGetChildren2:
		for _, c := range r.children {
			if c == "" || strings.Contains(c, "/") {
				return false
			}
		}
	}
	return true
}

// isSeqChild reports whether got is a direct child of asked's parent named
// asked's last segment and a sequence number of ten or more characters.
func isSeqChild(asked, got string) bool {
	i, j := strings.LastIndex(asked, "/"), strings.LastIndex(got, "/")
	if i != j || asked[:i] != got[:j] {
		return false
	}
	name, ok := strings.CutPrefix(got[j+1:], asked[i+1:])
	return ok && len(name) >= 10 && strings.Trim(name, "-0123456789") == "" && strings.LastIndex(name, "-") <= 0
}

// FuzzCheckCreated: the check of a create's reply against its request
// never panics, whatever path the reply names, and accepts for a
// sequential create only a direct child of the parent asked for, named as
// asked with a sequence number, and for any other create only the path
// asked for; and it accepts every path the server can make.
func FuzzCheckCreated(f *testing.F) {
	f.Add("/a/b", "_c_guid-lock-", "/a/b/_c_guid-lock-0000000007", int32(7))
	f.Add("/a", "n-", "/x", int32(-1))
	f.Add("/", "n-", "/n-0000000001/0000000001", int32(1<<31-1))
	f.Add("/a", "n-", "/a/n-+000000001", int32(0))
	f.Fuzz(func(t *testing.T, parent, name, got string, seq int32) {
		if checkPath(parent, false) != nil || name == "" || strings.Contains(name, "/") {
			return
		}
		asked := strings.TrimSuffix(parent, "/") + "/" + name
		if checkPath(asked, true) != nil {
			return
		}
		if err := CheckCreated(asked, got, true); err == nil && !isSeqChild(asked, got) {
			t.Fatalf("the create of %q accepted %q", asked, got)
		} else if err != nil && !errors.Is(err, ErrProtocol) {
			t.Fatalf("the create of %q refused %q with %v, want ErrProtocol", asked, got, err)
		}
		if err := CheckCreated(asked, got, false); err == nil && got != asked {
			t.Fatalf("the create of %q, not sequential, accepted %q", asked, got)
		}
		made := fmt.Sprintf("%s%010d", asked, seq)
		if err := CheckCreated(asked, made, true); err != nil {
			t.Fatalf("the create of %q refused the server's %q: %v", asked, made, err)
		}
	})
}

// FuzzConnectResponse: the answer to a session request never panics the
// decoder, whatever its bytes.
func FuzzConnectResponse(f *testing.F) {
	var e encoder
	e.int32(0)
	e.int32(4000)
	e.int64(42)
	e.buffer(make([]byte, 16))
	f.Add(e.b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r connectResponse
		if err := r.decode(b); err == nil && len(b) < 20 {
			t.Fatalf("decoded %d bytes without an error", len(b))
		}
	})
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// garbagePeer listens on loopback and answers every connection's session
// request with granted (if not nil) and then stream, hangs up linger
// later, and records the last zxid each session request claimed to have
// seen.
type garbagePeer struct {
	ln       net.Listener
	granted  []byte
	stream   []byte
	linger   time.Duration
	mu       sync.Mutex
	accepts  int
	lastZxid []int64
}

func startPeer(t *testing.T, granted, stream []byte, linger time.Duration) *garbagePeer {
	t.Helper()
	ln, err := listen()
	if err != nil {
		t.Fatal(err)
	}
	p := &garbagePeer{ln: ln, granted: granted, stream: stream, linger: linger}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { ln.Close() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(nc) })
		}
	})
	return p
}

func (p *garbagePeer) serve(nc net.Conn) {
	defer nc.Close()
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return
	}
	req := make([]byte, binary.BigEndian.Uint32(hdr[:])&0xffff)
	if _, err := io.ReadFull(nc, req); err != nil {
		return
	}
	d := decoder{b: req}
	d.int32()
	zxid := d.int64()
	p.mu.Lock()
	p.accepts++
	p.lastZxid = append(p.lastZxid, zxid)
	p.mu.Unlock()
	if p.granted != nil {
		nc.Write(p.granted)
	}
	nc.Write(p.stream)
	nc.SetReadDeadline(time.Now().Add(p.linger))
	io.Copy(io.Discard, nc)
}

func (p *garbagePeer) addr() string { return p.ln.Addr().String() }

func (p *garbagePeer) seen() (int, []int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts, slices.Clone(p.lastZxid)
}

// grantedBytes is a session request's answer that grants session 42.
func grantedBytes() []byte {
	var e encoder
	at := len(e.b)
	e.int32(0)
	e.int32(0)
	e.int32(4000)
	e.int64(42)
	e.buffer(make([]byte, 16))
	e.end(at)
	return e.b
}

// TestPeerSendsGarbage: a peer on the server's port that answers with
// bytes that are no ZooKeeper reply, before or after a session is granted:
// Connect fails or the requests fail, nothing panics, Close returns, no
// goroutine is left (goleak), and no zxid of a reply that matched no
// request is claimed as seen on reconnecting.
func TestPeerSendsGarbage(t *testing.T) {
	const bogus = 1 << 62
	cases := map[string]struct {
		stream  []byte
		granted bool // a session is granted before the garbage
	}{
		"http":               {stream: []byte("HTTP/1.1 400 Bad Request\r\n\r\n")},
		"huge length":        {stream: []byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3}},
		"negative length":    {stream: []byte{0xff, 0xff, 0xff, 0xf0}},
		"short handshake":    {stream: []byte{0, 0, 0, 4, 0, 0, 0, 0}},
		"refused session":    {stream: []byte{0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		"reply to no one":    {stream: reply(77, bogus, 0, nil), granted: true},
		"truncated stat":     {stream: reply(1, bogus, 0, func(e *encoder) { e.int32(3) }), granted: true},
		"children overflow":  {stream: reply(1, bogus, 0, func(e *encoder) { e.int32(1 << 30) }), granted: true},
		"auth unasked":       {stream: reply(xidAuth, bogus, 0, nil), granted: true},
		"cut inside a frame": {stream: []byte{0, 0, 1, 0, 1, 2}, granted: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			// Registered first, so run last: after the peer is gone.
			ignore := goleak.IgnoreCurrent()
			t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
			var granted []byte
			if tc.granted {
				granted = grantedBytes()
			}
			p := startPeer(t, granted, tc.stream, time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			c, err := Connect(ctx, Config{Servers: []string{p.addr()}, SessionTimeout: 4 * time.Second})
			if !tc.granted {
				if err == nil {
					c.Close()
					t.Fatal("Connect succeeded on a peer that granted no session")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = c.Children("/")
			if err == nil {
				t.Fatal("a request answered by garbage succeeded")
			}
			if !errors.Is(err, gozk.ErrConnectionClosed) && !errors.Is(err, gozk.ErrNoServer) {
				t.Fatalf("a request answered by garbage: %v", err)
			}
			c.Close()
			_, zxids := p.seen()
			for _, z := range zxids {
				if z != 0 {
					t.Fatalf("a session request claimed zxid %#x seen, from a reply that matched no request", z)
				}
			}
		})
	}
}

// TestFlappingServer: a server that grants the session and drops the
// connection at once is not dialled in a busy loop: a connection that did
// not last is followed by a pause, longer each time.
func TestFlappingServer(t *testing.T) {
	p := startPeer(t, grantedBytes(), nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Connect(ctx, Config{Servers: []string{p.addr()}, SessionTimeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	n, _ := p.seen()
	c.Close()
	// Without a pause, a second of hang-ups would be thousands of dials;
	// with pauses of 10 ms doubling, far fewer. A slower machine dials less.
	if n > 30 {
		t.Fatalf("%d connections in about a second to a server that drops each at once", n)
	}
}
