package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/backend"
)

// op is one step of a resource's history: a grant to client, or (write
// set) a write of client with fence.
type op struct {
	write  bool
	client string
	fence  uint64
}

func grant(c string) op           { return op{client: c} }
func write(c string, f uint64) op { return op{write: true, client: c, fence: f} }

func TestResourceVerdicts(t *testing.T) {
	tests := []struct {
		name     string
		fencing  bool
		ops      []op
		verdicts []string // one per write, in order
		accepted []bool   // one per write, in order
		counts   Counts
	}{
		{
			name:     "fencing rejects the superseded holder's write",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 5), grant("B"), write("B", 6), write("A", 5)},
			verdicts: []string{"rightful", "rightful", "stale-rejected"},
			accepted: []bool{true, true, false},
			counts:   Counts{StaleRejected: 1},
		},
		{
			name:     "without fencing the superseded holder's write is accepted",
			fencing:  false,
			ops:      []op{grant("A"), write("A", 5), grant("B"), write("B", 6), write("A", 5)},
			verdicts: []string{"rightful", "rightful", "stale-accepted"},
			accepted: []bool{true, true, true},
			counts:   Counts{StaleAccepted: 1},
		},
		{
			name:     "without fencing a stale write before the new holder's first is late",
			fencing:  false,
			ops:      []op{grant("A"), write("A", 0), grant("B"), write("A", 0), write("B", 0)},
			verdicts: []string{"rightful", "late-accepted", "rightful"},
			accepted: []bool{true, true, true},
			counts:   Counts{LateAccepted: 1},
		},
		{
			name:     "with fencing a stale write with a larger fence before the new holder writes is late",
			fencing:  true,
			ops:      []op{grant("A"), grant("B"), write("A", 5), write("B", 6)},
			verdicts: []string{"late-accepted", "rightful"},
			accepted: []bool{true, true},
			counts:   Counts{LateAccepted: 1},
		},
		{
			name:     "with fencing a stale write after the new holder's write is stale-accepted if its fence is larger",
			fencing:  true,
			ops:      []op{grant("A"), grant("B"), write("B", 3), write("A", 5)},
			verdicts: []string{"rightful", "stale-accepted"},
			accepted: []bool{true, true},
			counts:   Counts{StaleAccepted: 1},
		},
		{
			name:     "a current holder with a fence below an older holder's is rightful-rejected",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 9), grant("B"), write("B", 4)},
			verdicts: []string{"rightful", "rightful-rejected"},
			accepted: []bool{true, false},
			counts:   Counts{RightfulRejected: 1},
		},
		{
			name:     "equal fence from the same holder twice is accepted",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 7), write("A", 7)},
			verdicts: []string{"rightful", "rightful"},
			accepted: []bool{true, true},
		},
		{
			name:     "equal fence from a different holder is rejected",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 7), grant("B"), write("B", 7)},
			verdicts: []string{"rightful", "rightful-rejected"},
			accepted: []bool{true, false},
			counts:   Counts{RightfulRejected: 1},
		},
		{
			name:     "equal fence from a superseded holder is stale-rejected",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 7), grant("B"), write("B", 8), write("A", 8)},
			verdicts: []string{"rightful", "rightful", "stale-rejected"},
			accepted: []bool{true, true, false},
			counts:   Counts{StaleRejected: 1},
		},
		{
			name:     "a rejected write does not raise the top fence",
			fencing:  true,
			ops:      []op{grant("A"), write("A", 5), grant("B"), write("A", 4), write("B", 5)},
			verdicts: []string{"rightful", "stale-rejected", "rightful-rejected"},
			accepted: []bool{true, false, false},
			counts:   Counts{StaleRejected: 1, RightfulRejected: 1},
		},
		{
			name:     "a grant resets whether the latest holder wrote",
			fencing:  false,
			ops:      []op{grant("A"), write("A", 0), grant("B"), write("B", 0), grant("A"), write("B", 0)},
			verdicts: []string{"rightful", "rightful", "late-accepted"},
			accepted: []bool{true, true, true},
			counts:   Counts{LateAccepted: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &resource{fencing: tt.fencing}
			var got []Write
			for i, o := range tt.ops {
				if !o.write {
					r.grant(o.client, backend.Claim{})
					continue
				}
				at := time.Duration(i) * time.Millisecond
				w := r.write(o.client, o.fence, at)
				if w.Client != o.client || w.Fence != o.fence || w.At != at {
					t.Errorf("write %d: got %+v, want client %s fence %d at %v", i, w, o.client, o.fence, at)
				}
				got = append(got, w)
			}
			if len(got) != len(tt.verdicts) {
				t.Fatalf("%d writes judged, want %d", len(got), len(tt.verdicts))
			}
			for i, w := range got {
				if w.Verdict != tt.verdicts[i] || w.Accepted != tt.accepted[i] {
					t.Errorf("write %d (%s, fence %d): verdict %q accepted %v, want %q accepted %v",
						i, w.Client, w.Fence, w.Verdict, w.Accepted, tt.verdicts[i], tt.accepted[i])
				}
			}
			if r.counts != tt.counts {
				t.Errorf("counts = %+v, want %+v", r.counts, tt.counts)
			}
			if len(r.writes) != len(got) {
				t.Fatalf("resource kept %d writes, want %d", len(r.writes), len(got))
			}
			for i := range got {
				if r.writes[i] != got[i] {
					t.Errorf("writes[%d] = %+v, returned %+v", i, r.writes[i], got[i])
				}
			}
		})
	}
}

func TestCountsAdd(t *testing.T) {
	c := Counts{1, 2, 3, 4, 5, 6}
	c.add(Counts{10, 20, 30, 40, 50, 60})
	want := Counts{11, 22, 33, 44, 55, 66}
	if c != want {
		t.Errorf("add: got %+v, want %+v", c, want)
	}
}

func TestOverlaps(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	h := func(c string, from, to int) Hold { return Hold{Client: c, From: ms(from), To: ms(to)} }
	tests := []struct {
		name  string
		holds []Hold
		want  int
	}{
		{"none", nil, 0},
		{"one", []Hold{h("A", 0, 10)}, 0},
		{"disjoint", []Hold{h("A", 0, 10), h("B", 20, 30), h("C", 40, 50)}, 0},
		{"touching", []Hold{h("A", 0, 10), h("B", 10, 20), h("C", 20, 30)}, 0},
		{"touching out of order", []Hold{h("C", 20, 30), h("A", 0, 10), h("B", 10, 20)}, 0},
		{"two overlap", []Hold{h("A", 0, 10), h("B", 5, 15)}, 1},
		{"nested", []Hold{h("A", 0, 100), h("B", 40, 50)}, 1},
		{"A across two holds of B counts once", []Hold{h("A", 0, 100), h("B", 10, 20), h("B", 30, 40)}, 1},
		{"B's second hold overlaps A, given out of order", []Hold{h("B", 30, 40), h("B", 200, 300), h("A", 250, 260)}, 1},
		{"three clients all overlapping", []Hold{h("A", 0, 100), h("B", 10, 90), h("C", 20, 80)}, 3},
		{"chain: A-B and B-C but not A-C", []Hold{h("A", 0, 10), h("B", 5, 25), h("C", 20, 30)}, 2},
		{"a long hold overlaps one that starts after a short one", []Hold{h("A", 0, 100), h("B", 1, 2), h("C", 50, 60)}, 2},
		{"same client twice does not count", []Hold{h("A", 0, 10), h("A", 5, 15)}, 0},
		{"same client twice, another in between", []Hold{h("A", 0, 10), h("A", 5, 15), h("B", 8, 9)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]Hold(nil), tt.holds...)
			if got := overlaps(tt.holds); got != tt.want {
				t.Errorf("overlaps(%v) = %d, want %d", tt.holds, got, tt.want)
			}
			for i := range in {
				if tt.holds[i] != in[i] {
					t.Fatalf("overlaps reordered its argument: %v, was %v", tt.holds, in)
				}
			}
		})
	}
}

// TestRoundObserve drives a round's books with the events a pause
// scenario produces, as the engine reads them, and checks the holds,
// the judged writes, the timeline and the counts the round ends with.
func TestRoundObserve(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	r := newRound("k", "redis://x", time.Second, 0, nil, true)
	steps := []struct {
		client string
		e      event
	}{
		{"A", event{Ev: evReady, At: ms(1)}},
		{"B", event{Ev: evReady, At: ms(2)}},
		{"A", event{Ev: evGranted, Fence: 5, Fenced: true, At: ms(10)}},
		{"A", event{Ev: evWrite, Fence: 5, Fenced: true, Believes: true, At: ms(20)}},
		{"B", event{Ev: evGranted, Fence: 6, Fenced: true, At: ms(100)}},
		{"B", event{Ev: evWrite, Fence: 6, Fenced: true, Believes: true, At: ms(110)}},
		{"A", event{Ev: evWrite, Fence: 5, Fenced: true, At: ms(120)}},
		{"A", event{Ev: evLost, Err: "gone", At: ms(130)}},
		{"A", event{Ev: evSkip, Err: "gone", At: ms(140)}},
		{"B", event{Ev: evReleased, At: ms(150)}},
		{"B", event{Ev: evGranted, Fence: 7, Fenced: true, At: ms(160)}},
		{"B", event{Ev: evGranted, Fence: 8, Fenced: true, At: ms(170)}}, // granted again without a release
		{"B", event{Ev: evError, Err: "boom", At: ms(180)}},
	}
	for _, s := range steps {
		r.observe(s.client, s.e)
	}
	res := r.outcome()

	wantHolds := []Hold{
		{Client: "A", From: ms(10), To: ms(130), Ended: "lost"},
		{Client: "B", From: ms(100), To: ms(150), Ended: "released"},
		{Client: "B", From: ms(160), To: ms(170), Ended: "re-granted"},
		{Client: "B", From: ms(170), Ended: "round-end"}, // To: the round's end, checked below
	}
	if len(res.Holds) != len(wantHolds) {
		t.Fatalf("holds = %+v, want %d", res.Holds, len(wantHolds))
	}
	for i, w := range wantHolds {
		h := res.Holds[i]
		if i == len(wantHolds)-1 {
			if h.To < 0 || h.To != res.Took {
				t.Errorf("the hold open at the end: To = %v, want the round's end %v", h.To, res.Took)
			}
			w.To = h.To
		}
		if h != w {
			t.Errorf("hold %d = %+v, want %+v", i, h, w)
		}
	}
	var verdicts []string
	for _, w := range res.Writes {
		verdicts = append(verdicts, w.Verdict)
	}
	if got, want := strings.Join(verdicts, ","), "rightful,rightful,stale-rejected"; got != want {
		t.Errorf("verdicts %s, want %s", got, want)
	}
	want := Counts{Overlaps: 1, StaleRejected: 1, Skipped: 1}
	if res.Counts != want {
		t.Errorf("counts = %+v, want %+v", res.Counts, want)
	}
	// Every event but "ready" is on the timeline, in order, with its client.
	if len(res.Timeline) != len(steps)-2 {
		t.Fatalf("timeline has %d marks, want %d: %+v", len(res.Timeline), len(steps)-2, res.Timeline)
	}
	for i, m := range res.Timeline {
		s := steps[i+2]
		if m.Client != s.client || m.At != s.e.At {
			t.Errorf("mark %d = %+v, want %s at %v", i, m, s.client, s.e.At)
		}
	}
	for i, sub := range map[int]string{0: "granted, fence 5", 1: "write with fence 5: rightful", 4: "stale-rejected", 5: "lost: gone", 6: "write skipped", 10: "error: boom"} {
		if !strings.Contains(res.Timeline[i].What, sub) {
			t.Errorf("mark %d = %q, want it to say %q", i, res.Timeline[i].What, sub)
		}
	}
}

// kop is one step of a resource's history with kinds: a grant of claim
// to client, a release, a stall (paused or killed), or an access.
type kop struct {
	do     string // "grant", "release", "stall", "access"
	client string
	claim  backend.Claim
	fence  uint64
}

var (
	exclusive = backend.Claim{}
	shared    = backend.Claim{Kind: backend.Shared}
	permit2   = backend.Claim{Kind: backend.Permit, Limit: 2, Weight: 1}
)

func kgrant(c string, cl backend.Claim) kop { return kop{do: "grant", client: c, claim: cl} }
func kaccess(c string, f uint64) kop        { return kop{do: "access", client: c, fence: f} }
func krelease(c string) kop                 { return kop{do: "release", client: c} }
func kstall(c string) kop                   { return kop{do: "stall", client: c} }

// TestResourceKinds: the checker applies the key's rule to fences and
// to grants: readers share, a reader is refused after a newer writer's
// write and a writer after a newer reader's read; a permit holder is
// refused once newer holders' fences take its permit, and is superseded
// only when the live grants exceed the limit.
func TestResourceKinds(t *testing.T) {
	tests := []struct {
		name     string
		fencing  bool
		ops      []kop
		verdicts []string
		counts   Counts
	}{
		{
			name:     "readers share, with any fences",
			fencing:  true,
			ops:      []kop{kgrant("A", shared), kgrant("B", shared), kaccess("B", 6), kaccess("A", 5), kaccess("B", 6)},
			verdicts: []string{"rightful", "rightful", "rightful"},
		},
		{
			name:    "a paused writer's stale write is refused after a newer reader's read",
			fencing: true,
			ops: []kop{kgrant("A", exclusive), kaccess("A", 5), kstall("A"), kgrant("B", shared), kaccess("B", 6),
				kaccess("A", 5)},
			verdicts: []string{"rightful", "rightful", "stale-rejected"},
			counts:   Counts{StaleRejected: 1},
		},
		{
			name:     "without fencing the paused writer's write lands after the read",
			ops:      []kop{kgrant("A", exclusive), kaccess("A", 0), kgrant("B", shared), kaccess("B", 0), kaccess("A", 0)},
			verdicts: []string{"rightful", "rightful", "stale-accepted"},
			counts:   Counts{StaleAccepted: 1},
		},
		{
			name:     "a paused reader's stale read is refused after a newer writer's write",
			fencing:  true,
			ops:      []kop{kgrant("A", shared), kaccess("A", 5), kgrant("B", exclusive), kaccess("B", 6), kaccess("A", 5)},
			verdicts: []string{"rightful", "rightful", "stale-rejected"},
			counts:   Counts{StaleRejected: 1},
		},
		{
			name:     "a released reader is not superseded by a later reader",
			fencing:  true,
			ops:      []kop{kgrant("A", shared), krelease("A"), kgrant("B", shared), kgrant("A", shared), kaccess("A", 7), kaccess("B", 6)},
			verdicts: []string{"rightful", "rightful"},
		},
		{
			name:    "a paused permit holder is superseded, and refused, once newer holders take the permits",
			fencing: true,
			ops: []kop{kgrant("A", permit2), kaccess("A", 5), kgrant("C", permit2), kaccess("C", 6), kstall("A"),
				kgrant("B", permit2), kaccess("B", 7), kaccess("A", 5), kaccess("C", 6)},
			verdicts: []string{"rightful", "rightful", "rightful", "stale-rejected", "rightful"},
			counts:   Counts{StaleRejected: 1},
		},
		{
			// The stalled holder is the one superseded, not the earliest;
			// but its fence is among the 2 newest, which a semaphore's
			// fence check cannot tell from a rightful holder's.
			name:    "a stalled permit holder with one of the newest fences passes the fence check",
			fencing: true,
			ops: []kop{kgrant("C", permit2), kgrant("A", permit2), kstall("A"), kgrant("B", permit2),
				kaccess("C", 5), kaccess("B", 7), kaccess("A", 6)},
			verdicts: []string{"rightful", "rightful", "stale-accepted"},
			counts:   Counts{StaleAccepted: 1},
		},
		{
			name:     "permits within the limit, and a release, supersede no one",
			fencing:  true,
			ops:      []kop{kgrant("A", permit2), kgrant("B", permit2), krelease("B"), kgrant("C", permit2), kaccess("A", 5), kaccess("C", 7)},
			verdicts: []string{"rightful", "rightful"},
		},
		{
			name:     "without fencing a superseded permit holder's access is accepted",
			ops:      []kop{kgrant("A", permit2), kgrant("C", permit2), kgrant("B", permit2), kaccess("B", 0), kaccess("A", 0)},
			verdicts: []string{"rightful", "stale-accepted"},
			counts:   Counts{StaleAccepted: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &resource{fencing: tt.fencing}
			var got []string
			for i, o := range tt.ops {
				switch o.do {
				case "grant":
					r.grant(o.client, o.claim)
				case "release":
					r.release(o.client)
				case "stall":
					r.stall(o.client)
				default:
					got = append(got, r.write(o.client, o.fence, time.Duration(i)).Verdict)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.verdicts, ",") {
				t.Errorf("verdicts %q, want %q", got, tt.verdicts)
			}
			if r.counts != tt.counts {
				t.Errorf("counts = %+v, want %+v", r.counts, tt.counts)
			}
		})
	}
}

// TestOverlapsKinds: shared holds together and permits within the limit
// are no overlap; a shared hold beside an exclusive one is; permits
// beyond the limit count once per group of clients.
func TestOverlapsKinds(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	sh := func(c string, from, to int) Hold { return Hold{Client: c, From: ms(from), To: ms(to), Kind: "shared"} }
	ex := func(c string, from, to int) Hold { return Hold{Client: c, From: ms(from), To: ms(to)} }
	pm := func(c string, from, to int) Hold {
		return Hold{Client: c, From: ms(from), To: ms(to), Kind: "permit", Limit: 2, Weight: 1}
	}
	tests := []struct {
		name  string
		holds []Hold
		want  int
	}{
		{"readers together", []Hold{sh("A", 0, 100), sh("B", 10, 90), sh("C", 20, 80)}, 0},
		{"a writer inside a reader", []Hold{sh("A", 0, 100), ex("B", 10, 20)}, 1},
		{"a reader inside a writer", []Hold{ex("A", 0, 100), sh("B", 10, 20), sh("C", 30, 40)}, 2},
		{"two readers then a writer after", []Hold{sh("A", 0, 10), sh("B", 5, 15), ex("C", 15, 30)}, 0},
		{"two permits of two", []Hold{pm("A", 0, 100), pm("B", 10, 90)}, 0},
		{"three permits of two", []Hold{pm("A", 0, 100), pm("B", 10, 90), pm("C", 20, 30)}, 1},
		{"three of two twice, one group", []Hold{pm("A", 0, 100), pm("B", 10, 90), pm("C", 20, 30), pm("C", 40, 50)}, 1},
		{"three of two, two groups", []Hold{pm("A", 0, 100), pm("B", 10, 90), pm("C", 20, 30), pm("D", 40, 50)}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := overlaps(tt.holds); got != tt.want {
				t.Errorf("overlaps = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestRoundFailedRelease: a holder whose Release returned an error let go
// when it called it, as its Lost says; the next holder is no overlap. (An
// etcd release that timed out after a leader partition was counted as
// one, the failed holder's belief running on to the round's end.)
func TestRoundFailedRelease(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	r := newRound("k", "etcd://x", time.Second, 0, nil, true)
	for _, s := range []struct {
		client string
		e      event
	}{
		{"A", event{Ev: evGranted, Fence: 2, Fenced: true, At: ms(10)}},
		{"A", event{Ev: evError, Err: "release: etcdserver: request timed out", At: ms(100)}},
		{"B", event{Ev: evGranted, Fence: 4, Fenced: true, At: ms(106)}},
		{"B", event{Ev: evReleased, At: ms(110)}},
		{"B", event{Ev: evError, Err: "acquire: context deadline exceeded", At: ms(120)}},
	} {
		r.observe(s.client, s.e)
	}
	res := r.outcome()
	if len(res.Holds) != 2 || res.Holds[0].Ended != "release-failed" || res.Holds[0].To != ms(100) {
		t.Fatalf("holds = %+v, want A's ended at 100ms by its failed release", res.Holds)
	}
	if res.Counts.Overlaps != 0 {
		t.Errorf("overlaps = %d, want 0: A had let go before B's grant", res.Counts.Overlaps)
	}
}
