package chart

import "testing"

func TestID(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		parts  []string
		want   string
	}{
		{"s", []string{"Hot key"}, "s-hot-key"},
		{"timeline", []string{"pause", "redis#2"}, "timeline-pause-redis-2"},
		{"timeline", []string{"lost-replies", "etcd"}, "timeline-lost-replies-etcd"},
	} {
		if got := ID(tc.prefix, tc.parts...); got != tc.want {
			t.Errorf("ID(%q, %q) = %q, want %q", tc.prefix, tc.parts, got, tc.want)
		}
	}
}

func TestStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.5: 2, 3: 5, 7: 10, 20: 20, 2100: 5000} {
		if got := Step(raw); got != want {
			t.Errorf("Step(%v) = %v, want %v", raw, got, want)
		}
	}
}

func TestShorten(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"redis", 10, "redis"},
		{"holder-process-1", 10, "holder-pr…"},
		{"ééééé", 4, "ééé…"},
	} {
		if got := Shorten(tc.s, tc.n); got != tc.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
