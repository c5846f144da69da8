package zookeeper

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/distlock/locker/backend"
)

// Names on the server. Lock key K lives in the node <base>/k-<enc(K)>, a
// container; each acquisition queues one ephemeral sequential child in it
// named _c_<tag>-lock-<sequence>. The tag is fresh per acquisition, so a
// create whose reply was lost can be found again by it ("protected"
// create), and a node is only ever deleted by the acquisition that owns
// it. The tag also says what the hold claims (see newTag), so that one
// listing of the key node tells a waiter everything backend.Admit needs.
const (
	keyPrefix       = "k-"
	protectedPrefix = "_c_"
	lockInfix       = "-lock-"
	guidLen         = 32 // characters of a tag (the name says guid: the tag of an exclusive hold is one)
)

// Tags. An exclusive hold's tag is its guid alone, 32 hex digits: the
// name every version of this library gave its nodes. The others start
// with a letter that is not a hex digit, followed by what they claim and
// random hex digits up to guidLen:
//
//	s<31 random>                      a shared hold
//	p<limit:8><weight:8><15 random>   a permit: limit and weight in hex
//
// A version of this library that knows no kinds parses these as it
// parses its own names, and so takes every shared or permit node for an
// exclusive one: it waits for all of them, and its own nodes are
// exclusive to newer clients. Mixed versions are thus safe on a key, if
// slower to share it.
const (
	sharedMark = 's'
	permitMark = 'p'
	claimHex   = 8 // hex digits of a permit's limit, and of its weight
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

// newTag returns a fresh tag for a hold claiming c: random hex digits,
// after the claim where it is not exclusive (see Tags). Exclusive tags
// carry 128 random bits, shared ones 124, permits 60: enough to tell
// apart the nodes queued together in one key node.
func newTag(c backend.Claim) string {
	var b [guidLen / 2]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	random := hex.EncodeToString(b[:])
	switch c.Kind {
	case backend.Shared:
		return string(sharedMark) + random[1:]
	case backend.Permit:
		return fmt.Sprintf("%c%0*x%0*x%s", permitMark, claimHex, c.Limit, claimHex, c.Weight, random[1+2*claimHex:])
	}
	return random
}

// tagClaim returns what a node whose tag is tag claims. A tag that is not
// one of a shared hold or of a well-formed permit is an exclusive hold's:
// the claim that blocks every other is the safe reading of a name this
// version does not know.
func tagClaim(tag string) backend.Claim {
	switch tag[0] {
	case sharedMark:
		return backend.Claim{Kind: backend.Shared}
	case permitMark:
		limit, lerr := strconv.ParseUint(tag[1:1+claimHex], 16, 32)
		weight, werr := strconv.ParseUint(tag[1+claimHex:1+2*claimHex], 16, 32)
		if lerr == nil && werr == nil && 1 <= weight && weight <= limit && limit <= backend.SharedCapacity {
			return backend.Claim{Kind: backend.Permit, Limit: int(limit), Weight: int(weight)}
		}
	}
	return backend.Claim{Kind: backend.Exclusive}
}

// lockPrefix is the path a protected sequential create is given; the server
// appends the sequence number.
func lockPrefix(parent, guid string) string {
	return parent + "/" + protectedPrefix + guid + lockInfix
}

// nodeData is what this library writes into its lock nodes, alone or at
// the head of their data (see lockData). It says that the node announces
// a move (see held.move) by a change of its data before the move deletes
// and re-creates it under the same name. So a waiter watching such a node
// learns from a deletion alone that the node is gone for good; one
// watching a node without it (written by an earlier version of this
// library, or by another client) lists the queue to find out.
var nodeData = []byte("locker:1")

// The parts that may follow nodeData in a lock node's data, in this
// order, each at most once:
//
//	" " <fence, in decimal>   the lock's fence, in a node that a move made again
//	"\n" <value>              the hold's value: every byte to the end
//
// A node that a move made again has the move's zxid as its czxid, not the
// lock's fence, so the move writes the fence into it for Inspect. A lock
// with no value that never moved has nodeData alone, as every earlier
// version of this library wrote it.
const (
	fenceMark = ' '
	valueMark = '\n'
)

// lockData is the data of a lock node: nodeData, then the fence a move
// records (0: none) and the hold's value (empty: none).
func lockData(fence int64, value []byte) []byte {
	b := make([]byte, 0, len(nodeData)+21+len(value))
	b = append(b, nodeData...)
	if fence > 0 {
		b = append(b, fenceMark)
		b = strconv.AppendInt(b, fence, 10)
	}
	if len(value) > 0 {
		b = append(b, valueMark)
		b = append(b, value...)
	}
	return b
}

// valueOf returns a copy of v, nil when empty.
func valueOf(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return bytes.Clone(v)
}

// parseLockData reads a lock node's data, as lockData wrote it: the fence
// a move recorded (0: none) and the value (nil: none), and ours, whether
// the data is this library's. Data that is not (it does not start with
// nodeData, or what follows is not as lockData writes it) is another
// client's: all of it is the value, as go-zookeeper's LockWithData stores
// it, and no fence is recorded. The value is a copy.
func parseLockData(data []byte) (fence int64, value []byte, ours bool) {
	rest, ok := bytes.CutPrefix(data, nodeData)
	if !ok {
		return 0, valueOf(data), false
	}
	if len(rest) > 0 && rest[0] == fenceMark {
		digits := rest[1:]
		if i := bytes.IndexByte(digits, valueMark); i >= 0 {
			digits = digits[:i]
		}
		f, err := strconv.ParseInt(string(digits), 10, 64)
		if err != nil || f <= 0 || len(digits) == 0 || digits[0] == '0' || digits[0] == '+' {
			return 0, valueOf(data), false
		}
		fence, rest = f, rest[1+len(digits):]
	}
	switch {
	case len(rest) == 0:
		return fence, nil, true
	case rest[0] != valueMark:
		return 0, valueOf(data), false
	case len(rest) == 1:
		return fence, nil, true
	}
	return fence, valueOf(rest[1:]), true
}

// lockNode is one parsed child of a key node.
type lockNode struct {
	name  string
	guid  string // the tag
	seq   int64
	claim backend.Claim
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
	return lockNode{name: name, guid: guid, seq: seq, claim: tagClaim(guid)}, true
}

// inQueueOrder returns the lock nodes among children in queue order: by
// sequence number, which the server hands out in the order of the
// creates, whatever the tags.
func inQueueOrder(children []string) []lockNode {
	q := make([]lockNode, 0, len(children))
	for _, c := range children {
		if n, ok := parseLockNode(c); ok {
			q = append(q, n)
		}
	}
	slices.SortFunc(q, func(a, b lockNode) int { return cmp.Compare(a.seq, b.seq) })
	return q
}

// admitted returns how many of q's first nodes hold the key: the longest
// run from the front that backend.Admit admits (admission is in queue
// order, so the holders are always the front of the queue).
func admitted(q []lockNode) int {
	claims := make([]backend.Claim, len(q))
	for i, n := range q {
		claims[i] = n.claim
	}
	for i := range claims {
		if a, err := backend.Admit(claims, i); err != nil || !a.Admitted {
			return i
		}
	}
	return len(q)
}

// queue is a key node's children as far as one waiter sees them.
type queue struct {
	self     bool // our node is present
	admitted bool // ... and holds the key (backend.Admit)
	// wait, when not admitted, is the name of the node whose deletion we
	// wait for (Admission.Wait); "" when any node ahead may admit us by
	// going, so that we watch the key node's children.
	wait     string
	ahead    int      // lock nodes before ours, orphans not counted
	orphans  []string // other nodes with our guid: creates whose reply was lost
	mismatch error    // a *backend.Mismatch: a node ahead disagrees with ours
}

// order finds our node (name self, from guid) among children and judges
// it by backend.Admit over the nodes ahead of it in sequence order. An
// exclusive claim reads only its predecessor (the node just before it):
// any node ahead blocks it, so Admit over [predecessor, ours] decides.
func order(children []string, self string, guid string) queue {
	me, ok := parseLockNode(self)
	if !ok {
		return queue{}
	}
	if me.claim.Kind == backend.Exclusive {
		return orderExclusive(children, me)
	}
	var q queue
	var ahead []lockNode
	for _, c := range children {
		n, ok := parseLockNode(c)
		switch {
		case !ok:
		case c == self:
			q.self = true
		case n.guid == guid:
			q.orphans = append(q.orphans, c)
		case n.seq < me.seq:
			ahead = append(ahead, n)
		}
	}
	slices.SortFunc(ahead, func(a, b lockNode) int { return cmp.Compare(a.seq, b.seq) })
	claims := make([]backend.Claim, 0, len(ahead)+1)
	for _, n := range ahead {
		claims = append(claims, n.claim)
	}
	q.ahead = len(ahead)
	q.judge(append(claims, me.claim), func(i int) string { return ahead[i].name })
	return q
}

// orderExclusive is order for an exclusive claim me.
func orderExclusive(children []string, me lockNode) queue {
	var q queue
	var pred lockNode
	for _, c := range children {
		n, ok := parseLockNode(c)
		switch {
		case !ok:
		case c == me.name:
			q.self = true
		case n.guid == me.guid:
			q.orphans = append(q.orphans, c)
		case n.seq < me.seq:
			q.ahead++
			if pred.name == "" || n.seq > pred.seq {
				pred = n
			}
		}
	}
	if pred.name == "" {
		q.admitted = q.self
		return q
	}
	claims := [2]backend.Claim{pred.claim, me.claim}
	q.judge(claims[:], func(int) string { return pred.name })
	return q
}

// judge applies backend.Admit to the last of claims, ours, the others
// being those ahead of it in queue order; name names the node of claim i.
func (q *queue) judge(claims []backend.Claim, name func(i int) string) {
	a, err := backend.Admit(claims, len(claims)-1)
	switch {
	case err != nil:
		q.mismatch = err
	case a.Admitted:
		q.admitted = q.self
	case a.Wait >= 0:
		q.wait = name(a.Wait)
	}
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
