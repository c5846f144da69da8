package zookeeper

import (
	"bufio"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The client library keeps two things a lock needs to itself: the session
// timeout the server granted, and the zxid in the header of each reply,
// which for a create is the new node's czxid: the fence. Reading our own
// node back to learn the czxid would cost a request per acquisition; a
// connection of ours reads both off the wire instead, from the frames of
// the documented protocol (each a 4-byte length and a body):
//
//	client: ConnectRequest, then RequestHeader{xid int, type int} + request
//	server: ConnectResponse{protocolVersion int, timeOut int, sessionId long, ...},
//	        then ReplyHeader{xid int, zxid long, err int} + reply
//
// Only creates registered with watchCreate are followed. Seeing a create's
// request go out also lets the next request of the acquisition (the
// listing of the queue) be sent right behind it, without waiting for the
// create's reply: the client library writes requests in the order it is
// given them, and the server answers a session's requests in the order
// they arrive, a read after the writes before it.

const opCreate = 1 // the protocol's create request type

// created is what the wire said about one create.
type created struct {
	prefix string        // the path sent: the sequential node's prefix
	done   bool          // the reply was seen
	zxid   int64         // its zxid: the node's czxid
	err    int32         // its error code; 0 for success
	owner  int64         // the session the connection carried
	sent   chan struct{} // closed once the request is being written
	isSent bool
}

// wire follows the creates of one session's connections.
type wire struct {
	active  atomic.Int32 // creates being followed; 0 lets frames pass unread
	mu      sync.Mutex
	byPath  map[string]*created
	byXid   map[int32]*created
	granted func(timeoutMs int32, session int64)
}

// watchCreate starts following the create of prefix (a sequential node's
// path, as sent); done stops it and reports what was seen.
func (w *wire) watchCreate(prefix string) *created {
	c := &created{prefix: prefix, sent: make(chan struct{})}
	w.mu.Lock()
	if w.byPath == nil {
		w.byPath, w.byXid = map[string]*created{}, map[int32]*created{}
	}
	w.byPath[prefix] = c
	w.mu.Unlock()
	w.active.Add(1)
	return c
}

// done stops following c and returns the node's czxid and owner, if the
// reply was seen and was a success.
func (w *wire) done(c *created) (czxid, owner int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byPath[c.prefix] == c {
		delete(w.byPath, c.prefix)
	}
	for x, v := range w.byXid {
		if v == c {
			delete(w.byXid, x)
		}
	}
	w.active.Add(-1)
	return c.zxid, c.owner, c.done && c.err == 0
}

// conn wraps a connection of the client library so that it reports to w.
// Its reads are buffered: the client library reads each reply in two
// reads (its length, then its body), a system call each; a buffer takes
// in all the replies that have arrived in one.
func (w *wire) conn(c net.Conn) net.Conn {
	wc := &wireConn{Conn: c, w: w, r: bufio.NewReaderSize(c, readBuffer)}
	wc.in.want = func(first bool) int {
		if first {
			return 16 // protocolVersion, timeOut, sessionId
		}
		return 16 // xid, zxid, err
	}
	wc.in.frame = wc.reply
	wc.out.want = func(first bool) int {
		if first || w.active.Load() == 0 {
			return 0
		}
		return maxFollowedRequest
	}
	wc.out.frame = wc.request
	return wc
}

// maxFollowedRequest bounds how much of a request frame is read to find
// its path. A lock node's path is shorter unless the base path is very
// long (a key of at most 1024 bytes escapes to at most 3072); a create
// whose path is longer goes unfollowed, and its czxid is read back.
const maxFollowedRequest = 16 << 10

// readBuffer is the size of a connection's read buffer.
const readBuffer = 32 << 10

type wireConn struct {
	net.Conn
	r       *bufio.Reader
	w       *wire
	owner   atomic.Int64 // session id the server granted this connection
	in, out frames
}

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.in.feed(p[:n])
	return n, err
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.out.feed(p)
	return c.Conn.Write(p)
}

func (c *wireConn) reply(first bool, h []byte) {
	if len(h) < 16 {
		return
	}
	if first {
		id := int64(binary.BigEndian.Uint64(h[8:16]))
		c.owner.Store(id)
		if c.w.granted != nil {
			c.w.granted(int32(binary.BigEndian.Uint32(h[4:8])), id)
		}
		return
	}
	if c.w.active.Load() == 0 {
		return
	}
	xid := int32(binary.BigEndian.Uint32(h[0:4]))
	c.w.mu.Lock()
	if cr := c.w.byXid[xid]; cr != nil {
		delete(c.w.byXid, xid)
		cr.done = true
		cr.zxid = int64(binary.BigEndian.Uint64(h[4:12]))
		cr.err = int32(binary.BigEndian.Uint32(h[12:16]))
		cr.owner = c.owner.Load()
	}
	c.w.mu.Unlock()
}

func (c *wireConn) request(_ bool, h []byte) {
	if len(h) < 12 || int32(binary.BigEndian.Uint32(h[4:8])) != opCreate {
		return
	}
	n := int(int32(binary.BigEndian.Uint32(h[8:12])))
	if n < 0 || 12+n > len(h) {
		return
	}
	xid := int32(binary.BigEndian.Uint32(h[0:4]))
	path := string(h[12 : 12+n])
	c.w.mu.Lock()
	if cr := c.w.byPath[path]; cr != nil {
		c.w.byXid[xid] = cr
		if !cr.isSent {
			cr.isSent = true
			close(cr.sent)
		}
	}
	c.w.mu.Unlock()
}

// frames splits one direction of a connection into frames and hands the
// first want(first) bytes of each (or all of a shorter one) to frame; the
// rest passes unread. Each direction is used by one goroutine at a time.
type frames struct {
	want  func(first bool) int
	frame func(first bool, head []byte)

	started bool // the first frame was seen
	lenBuf  [4]byte
	lenN    int
	left    int    // bytes of the current frame still to come
	keep    int    // of which the first keep are wanted
	head    []byte // the wanted bytes so far
	first   bool   // the current frame is the connection's first
}

func (f *frames) feed(p []byte) {
	for len(p) > 0 {
		if f.left == 0 {
			k := copy(f.lenBuf[f.lenN:], p)
			f.lenN += k
			p = p[k:]
			if f.lenN < 4 {
				return
			}
			f.lenN = 0
			f.left = int(int32(binary.BigEndian.Uint32(f.lenBuf[:])))
			f.first = !f.started
			f.started = true
			f.keep = min(max(f.want(f.first), 0), max(f.left, 0))
			f.head = f.head[:0]
			if f.left <= 0 {
				f.left = 0
				continue
			}
		}
		k := min(len(p), f.left)
		if need := f.keep - len(f.head); need > 0 {
			f.head = append(f.head, p[:min(k, need)]...)
			if len(f.head) == f.keep {
				f.frame(f.first, f.head)
			}
		}
		f.left -= k
		p = p[k:]
	}
}

// dialer returns a dialer for the client library whose connections report
// to w, and which remembers the last dial error in lastErr.
func (w *wire) dialer(lastErr *atomic.Pointer[error]) func(network, addr string, timeout time.Duration) (net.Conn, error) {
	return func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			lastErr.Store(&err)
			return nil, err
		}
		return w.conn(c), nil
	}
}
