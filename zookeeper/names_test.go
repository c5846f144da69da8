package zookeeper

import (
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/distlock/locker/backend"
)

var (
	exclusive = backend.Claim{Kind: backend.Exclusive}
	shared    = backend.Claim{Kind: backend.Shared}
)

func permit(limit, weight int) backend.Claim {
	return backend.Claim{Kind: backend.Permit, Limit: limit, Weight: weight}
}

// oldName is how a version of this library that knows no kinds tells a
// lock node from other children (its parseLockNode): _c_, 32 characters,
// -lock-, a sequence number.
var oldName = regexp.MustCompile(`^_c_.{32}-lock-[0-9]+$`)

// TestTags: a node's name carries its claim and reads back as it; an
// exclusive node's name is the one every version gave; an older version
// takes every name for a lock node (and so for an exclusive hold, which
// blocks and waits for all others); and a tag this version does not know
// reads as exclusive.
func TestTags(t *testing.T) {
	hexTag := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for _, c := range []backend.Claim{exclusive, shared, permit(1, 1), permit(5, 3), permit(backend.SharedCapacity, backend.SharedCapacity), permit(backend.SharedCapacity, 1)} {
		tag := newTag(c)
		name := tag + lockInfix + "0000000042"
		name = protectedPrefix + name
		n, ok := parseLockNode(name)
		if !ok || n.claim != c || n.guid != tag || n.seq != 42 || n.name != name {
			t.Errorf("parseLockNode(%q) = %+v, %v; want the claim %+v, the tag and sequence 42", name, n, ok, c)
		}
		if !oldName.MatchString(name) {
			t.Errorf("%q is not a lock node to an older version", name)
		}
		if (c.Kind == backend.Exclusive) != hexTag.MatchString(tag) {
			t.Errorf("tag %q of %+v: only an exclusive hold's is 32 hex digits, as before kinds", tag, c)
		}
		if tag == newTag(c) {
			t.Errorf("two tags of %+v are both %q", c, tag)
		}
	}
	for _, tag := range []string{
		"p0000000000000000100000000000000", // limit 0
		"p0000000300000004000000000000000", // weight above the limit
		"p00000003000000000000000000000000"[:32],
		"pzzzzzzzz000000010000000000000000"[:32],
		"q0000000000000000000000000000000",
		"S0000000000000000000000000000000",
	} {
		if c := tagClaim(tag); c != exclusive {
			t.Errorf("tagClaim(%q) = %+v, want an exclusive claim", tag, c)
		}
	}
}

// node names a lock node of claim c with sequence number seq.
func node(c backend.Claim, seq int) string {
	return fmt.Sprintf("%s%s%s%010d", protectedPrefix, newTag(c), lockInfix, seq)
}

// TestOrder: backend.Admit over the nodes ahead of ours, in sequence
// order: what a waiter holds, waits for, or is refused.
func TestOrder(t *testing.T) {
	type want struct {
		admitted bool
		wait     int // index in the queue of the node to watch; -1: the children
		mismatch bool
	}
	cases := []struct {
		name  string
		queue []backend.Claim // in sequence order
		me    int             // our index in it
		want  want
	}{
		{"alone", []backend.Claim{shared}, 0, want{admitted: true, wait: -1}},
		{"readers together", []backend.Claim{shared, shared, shared}, 2, want{admitted: true, wait: -1}},
		{"reader behind a writer", []backend.Claim{shared, exclusive, shared, shared}, 3, want{wait: 1}},
		{"writer behind readers watches its predecessor", []backend.Claim{shared, shared, exclusive}, 2, want{wait: 1}},
		{"writer first", []backend.Claim{exclusive, shared}, 0, want{admitted: true, wait: -1}},
		{"a node of another kind behind ours is not ours to judge", []backend.Claim{shared, permit(2, 1), exclusive}, 0, want{admitted: true, wait: -1}},
		{"permits fit", []backend.Claim{permit(3, 1), permit(3, 2)}, 1, want{admitted: true, wait: -1}},
		{"no single permit holder blocks", []backend.Claim{permit(3, 1), permit(3, 1), permit(3, 2)}, 2, want{wait: -1}},
		{"the nearest that conflicts", []backend.Claim{permit(3, 2), permit(3, 1), permit(3, 2)}, 2, want{wait: 0}},
		{"a waiter that does not fit blocks a smaller one", []backend.Claim{permit(3, 1), permit(3, 2), permit(3, 1)}, 2, want{wait: -1}},
		{"shared on a semaphore", []backend.Claim{permit(2, 1), shared}, 1, want{mismatch: true}},
		{"exclusive on a semaphore", []backend.Claim{permit(2, 1), exclusive}, 1, want{mismatch: true}},
		{"permit on a read/write lock", []backend.Claim{shared, permit(2, 1)}, 1, want{mismatch: true}},
		{"another limit", []backend.Claim{permit(2, 1), permit(3, 1)}, 1, want{mismatch: true}},
		{"another limit behind ours", []backend.Claim{permit(2, 1), permit(3, 1)}, 0, want{admitted: true, wait: -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := make([]string, len(tc.queue))
			for i, c := range tc.queue {
				// Sequence numbers out of the names' order: the queue is by
				// sequence number, not by name.
				names[i] = node(c, 100-10*(len(tc.queue)-i))
			}
			// Listed out of order, with a node that is no lock node and an
			// orphan of ours (a create whose reply was lost).
			self := names[tc.me]
			orphan := self[:len(self)-10] + "0000000999"
			children := append([]string{"other", orphan}, names...)
			for i, j := 0, len(children)-1; i < j; i, j = i+1, j-1 {
				children[i], children[j] = children[j], children[i]
			}
			n, _ := parseLockNode(self)
			q := order(children, self, n.guid)
			wantWait := ""
			if tc.want.wait >= 0 && !tc.want.admitted && !tc.want.mismatch {
				wantWait = names[tc.want.wait]
			}
			var m *backend.Mismatch
			if !q.self || q.admitted != tc.want.admitted || q.wait != wantWait || (q.mismatch != nil) != tc.want.mismatch ||
				tc.want.mismatch && !errors.As(q.mismatch, &m) || q.ahead != tc.me || len(q.orphans) != 1 || q.orphans[0] != orphan {
				t.Errorf("order = %+v, want self, %+v (wait %q), %d ahead and the orphan %s", q, tc.want, wantWait, tc.me, orphan)
			}
		})
	}
}

// TestAdmitted: the holders are the front of the queue that Admit admits.
func TestAdmitted(t *testing.T) {
	for _, tc := range []struct {
		queue []backend.Claim
		want  int
	}{
		{nil, 0},
		{[]backend.Claim{exclusive, exclusive}, 1},
		{[]backend.Claim{shared, shared, exclusive, shared}, 2},
		{[]backend.Claim{permit(3, 1), permit(3, 2), permit(3, 1)}, 2},
		{[]backend.Claim{permit(3, 1), permit(3, 3), permit(3, 1)}, 1},
		{[]backend.Claim{shared, permit(3, 1), shared}, 1}, // a disagreeing node holds nothing
	} {
		q := make([]lockNode, len(tc.queue))
		for i, c := range tc.queue {
			q[i], _ = parseLockNode(node(c, i))
		}
		if got := admitted(q); got != tc.want {
			t.Errorf("admitted(%+v) = %d, want %d", tc.queue, got, tc.want)
		}
	}
}

// TestLockData: a lock node's data says the fence a move recorded and the
// value, and reads back as written; data that is not as lockData writes
// it is another client's, all of it a value, with no fence.
func TestLockData(t *testing.T) {
	for _, tc := range []struct {
		fence int64
		value string
		data  string
	}{
		{0, "", "locker:1"},
		{0, "v", "locker:1\nv"},
		{0, "\n", "locker:1\n\n"},
		{0, " 12\nx", "locker:1\n 12\nx"},
		{4294967312, "", "locker:1 4294967312"},
		{7, "host:1\x00\xff", "locker:1 7\nhost:1\x00\xff"},
	} {
		data := lockData(tc.fence, []byte(tc.value))
		if string(data) != tc.data {
			t.Errorf("lockData(%d, %q) = %q, want %q", tc.fence, tc.value, data, tc.data)
		}
		fence, value, ours := parseLockData(data)
		if fence != tc.fence || string(value) != tc.value || !ours || (tc.value == "") != (value == nil) {
			t.Errorf("parseLockData(%q) = %d, %q, %v; want %d, %q, ours", data, fence, value, ours, tc.fence, tc.value)
		}
	}
	for _, data := range []string{"", "x", "locker:", "locker:2", "locker:1x", "locker:1 ", "locker:1 x", "locker:1 0", "locker:1 012",
		"locker:1 -3", "locker:1 +3", "locker:1 3x", "locker:1 99999999999999999999", "locker:1 3 4"} {
		fence, value, ours := parseLockData([]byte(data))
		if ours || fence != 0 || string(value) != data || (data == "") != (value == nil) {
			t.Errorf("parseLockData(%q) = %d, %q, %v; want another client's data: all of it the value, no fence", data, fence, value, ours)
		}
	}
}
