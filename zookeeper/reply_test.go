package zookeeper_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// rewriter is a loopback TCP proxy in front of a ZooKeeper server that
// decodes the frames of each connection enough to rewrite the path in the
// successful reply to a create (create or create2) of a path under under:
// the server applies the create as asked, and the client reads the path
// that rewrite returns for the one the server sent.
type rewriter struct {
	ln      net.Listener
	target  string
	under   string
	rewrite func(got string) string
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startRewriter(t *testing.T, target, under string, rewrite func(got string) string) *rewriter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &rewriter{ln: ln, target: target, under: under, rewrite: rewrite}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *rewriter) addr() string { return p.ln.Addr().String() }

func (p *rewriter) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		creates := &sync.Map{} // xid -> the path a create asked for
		p.wg.Go(func() { p.pipe(server, client, creates, false) })
		p.wg.Go(func() { p.pipe(client, server, creates, true) })
	}
}

// pipe copies the frames of src to dst: requests, noting the xid of every
// create under p.under, or replies, rewriting those to the creates noted.
// The first frame each way is the session's handshake, passed as it is.
func (p *rewriter) pipe(dst, src net.Conn, creates *sync.Map, replies bool) {
	defer dst.Close()
	defer src.Close()
	for first := true; ; first = false {
		var hdr [4]byte
		if _, err := io.ReadFull(src, hdr[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(src, frame); err != nil {
			return
		}
		switch {
		case first:
		case !replies && len(frame) >= 12:
			xid, op := int32(binary.BigEndian.Uint32(frame)), binary.BigEndian.Uint32(frame[4:])
			if path, ok := jString(frame[8:]); ok && (op == 1 || op == 15) && strings.HasPrefix(path, p.under+"/") {
				creates.Store(xid, path)
			}
		case replies && len(frame) >= 16:
			xid := int32(binary.BigEndian.Uint32(frame))
			if _, ok := creates.LoadAndDelete(xid); ok && binary.BigEndian.Uint32(frame[12:]) == 0 {
				frame = p.rewritten(frame)
			}
		}
		binary.BigEndian.PutUint32(hdr[:], uint32(len(frame)))
		if _, err := dst.Write(append(hdr[:], frame...)); err != nil {
			return
		}
	}
}

// rewritten returns the reply frame to a create with its path rewritten:
// the header (xid, zxid, error), the path, then the rest (create2's Stat).
func (p *rewriter) rewritten(frame []byte) []byte {
	got, ok := jString(frame[16:])
	if !ok {
		return frame
	}
	rest := frame[16+4+len(got):]
	out := append([]byte(nil), frame[:16]...)
	repl := p.rewrite(got)
	out = binary.BigEndian.AppendUint32(out, uint32(len(repl)))
	out = append(out, repl...)
	return append(out, rest...)
}

// jString reads a jute string at the start of b.
func jString(b []byte) (string, bool) {
	if len(b) < 4 {
		return "", false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || n > len(b)-4 {
		return "", false
	}
	return string(b[4 : 4+n]), true
}

// TestCreateReplyContradicts: a create's reply that names a node the
// create cannot have made (outside the key node, deeper in it, a sibling
// held by another client, another guid's) is not believed: the
// acquisition fails at once with an error that names the reply, without a
// panic, its own node is found by its guid and removed, and the holder's
// node is left alone. Over the Locker's own connections and over an
// application's (New) alike.
func TestCreateReplyContradicts(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	host := testenv.Hosts(t, raw)[0]
	c := dial(t, []string{host}, 10*time.Second)
	rewrites := map[string]func(parent, holder, got string) string{
		"outside": func(_, _, _ string) string { return "/x" },
		"deeper":  func(_, _, got string) string { return got + "/0000000001" },
		"holder":  func(parent, holder, _ string) string { return parent + "/" + holder },
		"other guid": func(parent, _, got string) string {
			return parent + "/" + zookeeper.LockPrefix(backend.Claim{}) + got[len(got)-10:]
		},
		"no number": func(_, _, got string) string { return got[:len(got)-10] },
	}
	for _, conn := range []string{"own", "given"} {
		for name, rw := range rewrites {
			t.Run(conn+"/"+name, func(t *testing.T) {
				base := "/" + uniq("contradicts")
				parent := base + "/" + zookeeper.EncodeKey("k")
				ctx := context.Background()
				holder := open(t, raw+base)
				held, err := holder.Acquire(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				defer held.Release(ctx)
				nodes := lockNodes(t, c, base, "k")
				if len(nodes) != 1 {
					t.Fatalf("the holder's queue: %v", nodes)
				}
				p := startRewriter(t, host, parent, func(got string) string { return rw(parent, nodes[0], got) })
				var l locker.Locker
				if conn == "own" {
					l = open(t, "zookeeper://"+p.addr()+base)
				} else {
					gc := dial(t, []string{p.addr()}, 10*time.Second)
					if l, err = zookeeper.New(gc, &zookeeper.Options{SessionTimeout: 10 * time.Second, Path: base}); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { l.Close() })
				}
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				lk, err := l.Acquire(actx, "k")
				if err == nil {
					lk.Release(ctx)
					t.Fatalf("Acquire believed a reply that names a node its create cannot have made")
				}
				if actx.Err() != nil || !strings.Contains(err.Error(), "cannot have made") {
					t.Fatalf("Acquire after a contradicting reply: %v, want at once an error naming the reply", err)
				}
				t.Logf("Acquire: %v", err)
				if after := lockNodes(t, c, base, "k"); len(after) != 1 || after[0] != nodes[0] {
					t.Fatalf("queue %v after the failed acquisition, want the holder's %v alone", after, nodes)
				}
				if _, _, err := c.Get(parent + "/" + nodes[0]); err != nil {
					t.Fatalf("the holder's node: %v", err)
				}
				if err := held.Release(ctx); err != nil {
					t.Fatalf("the holder's Release: %v", err)
				}
			})
		}
	}
}
