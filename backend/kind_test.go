package backend

import (
	"errors"
	"strings"
	"testing"
)

var (
	x  = Claim{Kind: Exclusive}
	sh = Claim{Kind: Shared}
)

func permit(limit, weight int) Claim { return Claim{Kind: Permit, Limit: limit, Weight: weight} }

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []Claim
		i     int
		want  Admission
	}{
		{"first exclusive", []Claim{x}, 0, Admission{Admitted: true}},
		{"second exclusive waits for the first", []Claim{x, x}, 1, Admission{Wait: 0}},
		{"exclusive waits for its predecessor", []Claim{x, x, x}, 2, Admission{Wait: 1}},
		{"readers together", []Claim{sh, sh, sh}, 2, Admission{Admitted: true}},
		{"reader behind a writer", []Claim{sh, x, sh, sh}, 3, Admission{Wait: 1}},
		{"reader behind two writers waits for the nearest", []Claim{x, sh, x, sh}, 3, Admission{Wait: 2}},
		{"writer behind readers waits for the last", []Claim{sh, sh, x}, 2, Admission{Wait: 1}},
		{"permits fit", []Claim{permit(3, 1), permit(3, 2)}, 1, Admission{Admitted: true}},
		{"permits full: no single blocker", []Claim{permit(3, 1), permit(3, 1), permit(3, 1), permit(3, 1)}, 3, Admission{Wait: -1}},
		{"heavy waiter blocks a light one", []Claim{permit(3, 2), permit(3, 2), permit(3, 1)}, 2, Admission{Wait: -1}},
		{"whole-limit permit conflicts with each", []Claim{permit(2, 1), permit(2, 2)}, 1, Admission{Wait: 0}},
		{"semaphore of one is a mutex", []Claim{permit(1, 1), permit(1, 1), permit(1, 1)}, 2, Admission{Wait: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Admit(tc.queue, tc.i)
			if err != nil {
				t.Fatalf("Admit: %v", err)
			}
			if got != tc.want {
				t.Errorf("Admit = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestAdmitFIFO checks that admission is a prefix of the queue: once a
// claim does not fit, no claim behind it is admitted, however small.
func TestAdmitFIFO(t *testing.T) {
	queue := []Claim{permit(4, 1), permit(4, 3), permit(4, 2), permit(4, 1), permit(4, 1)}
	want := []bool{true, true, false, false, false}
	for i := range queue {
		a, err := Admit(queue, i)
		if err != nil {
			t.Fatal(err)
		}
		if a.Admitted != want[i] {
			t.Errorf("claim %d admitted = %v, want %v", i, a.Admitted, want[i])
		}
	}
}

func TestAdmitMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		queue []Claim
		msg   string
	}{
		{"another limit", []Claim{permit(2, 1), permit(3, 1)},
			"the key is a semaphore of 2 permits, the request is for a semaphore of 3 permits"},
		{"shared on a semaphore", []Claim{permit(1, 1), sh},
			"the key is a semaphore of 1 permit, the request is for a read/write lock (exclusive and shared holds)"},
		{"exclusive on a semaphore", []Claim{permit(2, 1), x}, "the key is a semaphore of 2 permits"},
		{"permit on a read/write lock", []Claim{sh, permit(2, 1)},
			"the key is a read/write lock (exclusive and shared holds), the request is for a semaphore of 2 permits"},
		{"behind an agreeing one", []Claim{x, sh, permit(5, 1)}, "read/write lock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Admit(tc.queue, len(tc.queue)-1)
			if !errors.Is(err, ErrKindMismatch) {
				t.Fatalf("Admit: %v, want ErrKindMismatch", err)
			}
			var m *Mismatch
			if !errors.As(err, &m) {
				t.Fatalf("Admit: %T, want *Mismatch", err)
			}
			if got := err.Error(); !strings.Contains(got, tc.msg) {
				t.Errorf("error %q does not say %q", got, tc.msg)
			}
		})
	}
	// Later claims do not judge earlier ones.
	if a, err := Admit([]Claim{x, permit(2, 1)}, 0); err != nil || !a.Admitted {
		t.Errorf("Admit of the first claim before a disagreeing one = %+v, %v; want admitted", a, err)
	}
}
