package zookeeper

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Names on the server. Lock key K lives in the node <base>/k-<enc(K)>, a
// container; each acquisition queues one ephemeral sequential child in it
// named _c_<guid>-lock-<sequence>. The guid is fresh per acquisition, so a
// create whose reply was lost can be found again by it ("protected"
// create), and a node is only ever deleted by the acquisition that owns it.
const (
	keyPrefix       = "k-"
	protectedPrefix = "_c_"
	lockInfix       = "-lock-"
	guidLen         = 32 // hex digits
)

// encodeKey maps any key (any bytes) to a valid znode name: bytes that are
// letters, digits, '-', '_', '.' or '~' stay, every other byte becomes %XX.
// The mapping is injective ('%' itself is escaped), never yields '/', so no
// key nests inside another, and the "k-" prefix keeps names clear of ".",
// ".." and the reserved "zookeeper".
func encodeKey(key string) string {
	var b strings.Builder
	b.Grow(len(keyPrefix) + len(key))
	b.WriteString(keyPrefix)
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// decodeKey is the inverse of encodeKey.
func decodeKey(name string) (string, error) {
	rest, ok := strings.CutPrefix(name, keyPrefix)
	if !ok {
		return "", fmt.Errorf("zookeeper: %q is not a key node name", name)
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		if rest[i] != '%' {
			b.WriteByte(rest[i])
			continue
		}
		if i+2 >= len(rest) {
			return "", fmt.Errorf("zookeeper: %q: truncated escape", name)
		}
		v, err := strconv.ParseUint(rest[i+1:i+3], 16, 8)
		if err != nil {
			return "", fmt.Errorf("zookeeper: %q: bad escape", name)
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), nil
}

// newGUID returns 16 random bytes in hex.
func newGUID() string {
	var b [guidLen / 2]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// lockPrefix is the path a protected sequential create is given; the server
// appends the sequence number.
func lockPrefix(parent, guid string) string {
	return parent + "/" + protectedPrefix + guid + lockInfix
}

// nodeData is what this library writes into its lock nodes. It says that
// the node announces a move (see held.move) by a change of its data before
// the move deletes and re-creates it under the same name. So a waiter
// watching such a node learns from a deletion alone that the node is gone
// for good; one watching a node without it (written by an earlier version
// of this library, or by another client) lists the queue to find out.
var nodeData = []byte("locker:1")

// lockNode is one parsed child of a key node.
type lockNode struct {
	guid string
	seq  int64
}

// parseLockNode parses a child name made by lockPrefix plus the server's
// sequence number. Other names are not lock nodes.
func parseLockNode(name string) (lockNode, bool) {
	rest, ok := strings.CutPrefix(name, protectedPrefix)
	if !ok || len(rest) < guidLen+len(lockInfix)+1 {
		return lockNode{}, false
	}
	guid, seqStr := rest[:guidLen], rest[guidLen:]
	seqStr, ok = strings.CutPrefix(seqStr, lockInfix)
	if !ok {
		return lockNode{}, false
	}
	seq, err := strconv.ParseInt(seqStr, 10, 64)
	if err != nil {
		return lockNode{}, false
	}
	return lockNode{guid: guid, seq: seq}, true
}

// queue is a key node's children as far as the lock recipe sees them.
type queue struct {
	self    bool     // our node is present
	lowest  bool     // ... and has the lowest sequence number: we hold the lock
	pred    string   // name of the node just before ours, when not lowest
	ahead   int      // lock nodes before ours, orphans not counted
	orphans []string // other nodes with our guid: creates whose reply was lost
}

// order finds our node (name self, from guid) among children.
func order(children []string, self string, guid string) queue {
	var q queue
	me, ok := parseLockNode(self)
	if !ok {
		return q
	}
	var predSeq int64
	for _, c := range children {
		n, ok := parseLockNode(c)
		if !ok {
			continue
		}
		switch {
		case c == self:
			q.self = true
		case n.guid == guid:
			q.orphans = append(q.orphans, c)
		case n.seq < me.seq:
			q.ahead++
			if q.pred == "" || n.seq > predSeq {
				q.pred, predSeq = c, n.seq
			}
		}
	}
	q.lowest = q.self && q.pred == ""
	return q
}

// cleanBase checks the URL path that names the base node and returns it
// without a trailing slash; "" and "/" mean defaultBase.
func cleanBase(p string) (string, error) {
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return defaultBase, nil
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("zookeeper: path %q must start with /", p)
	}
	for _, part := range strings.Split(p[1:], "/") {
		switch part {
		case "":
			return "", fmt.Errorf("zookeeper: path %q has an empty element", p)
		case ".", "..":
			return "", fmt.Errorf("zookeeper: path %q has a %q element, which ZooKeeper does not allow", p, part)
		}
		for _, r := range part {
			if r < 0x20 || r >= 0x7f && r <= 0x9f || r >= 0xd800 && r <= 0xf8ff || r >= 0xfff0 && r <= 0xffff {
				return "", fmt.Errorf("zookeeper: path %q has the character %U, which ZooKeeper does not allow", p, r)
			}
		}
	}
	if p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/") {
		return "", fmt.Errorf("zookeeper: path %q is in ZooKeeper's reserved /zookeeper tree", p)
	}
	return p, nil
}

// ancestors returns the paths from the top down to p, p included:
// "/a/b" gives ["/a", "/a/b"].
func ancestors(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return append(out, p)
}
