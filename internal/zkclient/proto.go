package zkclient

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	gozk "github.com/go-zookeeper/zk"
)

// The wire format, from the ZooKeeper programmer's guide and the jute
// record definitions (zookeeper.jute): every packet is a 4-byte big-endian
// length and that many bytes. Integers are big-endian; a bool is one byte;
// a string or a buffer is an int32 length (-1 for null) and its bytes; a
// vector is an int32 count (-1 for null) and its elements.

// An opcode says what a request asks (ZooDefs.OpCode).
type opcode int32

// The operations this client sends.
const (
	opCreate          = opcode(1)
	opDelete          = opcode(2)
	opExists          = opcode(3)
	opGetData         = opcode(4)
	opSetData         = opcode(5)
	opSync            = opcode(9)
	opPing            = opcode(11)
	opGetChildren2    = opcode(12)
	opCheck           = opcode(13)
	opMulti           = opcode(14)
	opCreate2         = opcode(15)
	opCreateContainer = opcode(19)
	opAuth            = opcode(100)
	opSetWatches      = opcode(101)
	opCloseSession    = opcode(-11)
	opError           = opcode(-1) // a failed operation's result in a multi
)

// Reserved xids: replies and packets that answer no numbered request.
const (
	xidNotification int32 = -1
	xidPing         int32 = -2
	xidAuth         int32 = -4
	xidSetWatches   int32 = -8
)

// Watch event types (Watcher.Event.EventType) the server sends.
const (
	evNone                int32 = -1
	evNodeCreated         int32 = 1
	evNodeDeleted         int32 = 2
	evNodeDataChanged     int32 = 3
	evNodeChildrenChanged int32 = 4
)

// The sizes this client accepts and sends.
const (
	// maxFrame bounds a packet from the server. ZooKeeper's own limit
	// (jute.maxbuffer) is 1 MiB by default; a larger length is not a
	// reply but a broken stream.
	maxFrame = 16 << 20
	// maxSetWatches bounds one SetWatches packet, as the Java client does
	// (it splits larger sets), so that a client with many watches does
	// not exceed the server's jute.maxbuffer on reconnecting.
	maxSetWatches = 128 << 10
	// passwdLen is the length of a session's password.
	passwdLen = 16
)

// Errors the server reports by code (KeeperException.Code). Where
// go-zookeeper has an error for a code, it is that error, so that code
// written for either client compares errors the same way (errors.Is).
var (
	// ErrRuntimeInconsistency is the result of the operations after a
	// failed one in a multi: they were not applied.
	ErrRuntimeInconsistency = errors.New("zk: not applied: an earlier operation of the multi failed")
	// ErrProtocol says that the server's bytes did not decode as the reply
	// they should be: the connection is dropped.
	ErrProtocol = errors.New("zk: malformed reply")
)

var codeErrors = map[int32]error{
	-1:   errors.New("zk: system error"),
	-2:   ErrRuntimeInconsistency,
	-3:   errors.New("zk: data inconsistency"),
	-4:   gozk.ErrConnectionClosed,
	-5:   errors.New("zk: marshalling error"),
	-6:   errors.New("zk: operation not implemented by the server"),
	-7:   errors.New("zk: operation timeout"),
	-8:   gozk.ErrBadArguments,
	-100: gozk.ErrAPIError,
	-101: gozk.ErrNoNode,
	-102: gozk.ErrNoAuth,
	-103: gozk.ErrBadVersion,
	-108: gozk.ErrNoChildrenForEphemerals,
	-110: gozk.ErrNodeExists,
	-111: gozk.ErrNotEmpty,
	-112: gozk.ErrSessionExpired,
	-114: gozk.ErrInvalidACL,
	-115: gozk.ErrAuthFailed,
	-116: gozk.ErrClosing,
	-118: gozk.ErrSessionMoved,
	-122: gozk.ErrReconfigDisabled,
}

// codeError returns the error of a reply's code, nil for 0.
func codeError(code int32) error {
	if code == 0 {
		return nil
	}
	if err, ok := codeErrors[code]; ok {
		return err
	}
	return fmt.Errorf("%w: code %d", gozk.ErrUnknown, code)
}

// encoder appends records to a packet.
type encoder struct{ b []byte }

func (e *encoder) int32(v int32) { e.b = binary.BigEndian.AppendUint32(e.b, uint32(v)) }
func (e *encoder) int64(v int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }

func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *encoder) string(s string) {
	e.int32(int32(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) buffer(p []byte) {
	if p == nil {
		e.int32(-1)
		return
	}
	e.int32(int32(len(p)))
	e.b = append(e.b, p...)
}

func (e *encoder) strings(ss []string) {
	e.int32(int32(len(ss)))
	for _, s := range ss {
		e.string(s)
	}
}

func (e *encoder) acls(acl []gozk.ACL) {
	e.int32(int32(len(acl)))
	for _, a := range acl {
		e.int32(a.Perms)
		e.string(a.Scheme)
		e.string(a.ID)
	}
}

// begin starts a packet: its length, filled in by end, and the request
// header.
func (e *encoder) begin(xid int32, op opcode) int {
	at := len(e.b)
	e.int32(0)
	e.int32(xid)
	e.int32(int32(op))
	return at
}

// end sets the length of the packet begun at at.
func (e *encoder) end(at int) {
	binary.BigEndian.PutUint32(e.b[at:], uint32(len(e.b)-at-4))
}

// decoder reads records from a packet. A read past the end, or a length
// that cannot be, sets err and yields zero values from then on: callers
// check err once, after the last read.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = ErrProtocol
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.fail()
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) int32() int32 {
	p := d.take(4)
	if p == nil {
		return 0
	}
	return int32(binary.BigEndian.Uint32(p))
}

func (d *decoder) int64() int64 {
	p := d.take(8)
	if p == nil {
		return 0
	}
	return int64(binary.BigEndian.Uint64(p))
}

func (d *decoder) bool() bool {
	p := d.take(1)
	return p != nil && p[0] != 0
}

// bytes returns a buffer's bytes, nil for a null one. They alias the
// packet: copy what is kept.
func (d *decoder) bytes() []byte {
	n := d.int32()
	if n == -1 {
		return nil
	}
	return d.take(int(n))
}

func (d *decoder) string() string { return string(d.bytes()) }

// count reads a vector's length, each of whose elements takes at least
// min bytes: a count that the rest of the packet cannot hold is an error,
// not an allocation.
func (d *decoder) count(min int) int {
	n := d.int32()
	if n == -1 {
		return 0
	}
	if n < 0 || int(n) > len(d.b)/min {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) strings() []string {
	n := d.count(4)
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.string()
	}
	return ss
}

// statSize is the encoded size of a Stat.
const statSize = 8*4 + 4*3 + 8 + 4*2 + 8

func (d *decoder) stat(s *gozk.Stat) {
	p := d.take(statSize)
	if p == nil {
		return
	}
	be := binary.BigEndian
	s.Czxid = int64(be.Uint64(p[0:]))
	s.Mzxid = int64(be.Uint64(p[8:]))
	s.Ctime = int64(be.Uint64(p[16:]))
	s.Mtime = int64(be.Uint64(p[24:]))
	s.Version = int32(be.Uint32(p[32:]))
	s.Cversion = int32(be.Uint32(p[36:]))
	s.Aversion = int32(be.Uint32(p[40:]))
	s.EphemeralOwner = int64(be.Uint64(p[44:]))
	s.DataLength = int32(be.Uint32(p[52:]))
	s.NumChildren = int32(be.Uint32(p[56:]))
	s.Pzxid = int64(be.Uint64(p[60:]))
}

// A connectRequest opens or resumes a session (ConnectRequest).
type connectRequest struct {
	lastZxid int64
	timeout  int32 // ms
	session  int64
	passwd   []byte
}

func (r *connectRequest) encode(e *encoder) {
	at := len(e.b)
	e.int32(0)
	e.int32(0) // protocol version
	e.int64(r.lastZxid)
	e.int32(r.timeout)
	e.int64(r.session)
	p := r.passwd
	if p == nil {
		p = make([]byte, passwdLen)
	}
	e.buffer(p)
	e.bool(false) // read-only sessions are not asked for
	e.end(at)
}

// A connectResponse grants a session, or refuses to resume one (timeout 0).
type connectResponse struct {
	timeout int32 // ms
	session int64
	passwd  []byte
}

func (r *connectResponse) decode(b []byte) error {
	d := decoder{b: b}
	d.int32() // protocol version
	r.timeout = d.int32()
	r.session = d.int64()
	r.passwd = append([]byte(nil), d.bytes()...)
	// A read-only flag may follow; it is not used.
	return d.err
}

// checkPath rejects what the server would reject as a path, with a
// message naming it; seq says that the server appends a sequence number,
// so that a trailing slash is allowed.
func checkPath(p string, seq bool) error {
	bad := func(why string) error { return fmt.Errorf("%w: path %q %s", gozk.ErrInvalidPath, p, why) }
	switch {
	case p == "":
		return bad("is empty")
	case p[0] != '/':
		return bad("does not start with /")
	case len(p) > math.MaxInt32/2:
		return bad("is too long")
	case p == "/":
		return nil
	case p[len(p)-1] == '/' && !seq:
		return bad("ends with /")
	}
	start := 1
	for i := 1; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return bad("holds a NUL byte")
			}
			continue
		}
		seg := p[start:i]
		switch {
		case seg == "" && !(seq && i == len(p)):
			return bad("has an empty segment")
		case seg == "." || seg == "..":
			return bad("has a relative segment")
		}
		start = i + 1
	}
	return nil
}
