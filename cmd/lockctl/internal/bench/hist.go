package bench

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// hist records latencies in an HDR histogram: microsecond resolution,
// three significant digits, up to a minute.
type hist struct{ h *hdrhistogram.Histogram }

func newHist() *hist {
	return &hist{h: hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)}
}

// add records d (values past a minute count as a minute).
func (h *hist) add(d time.Duration) {
	us := max(int64(d/time.Microsecond), 1)
	if err := h.h.RecordValue(us); err != nil {
		h.h.RecordValue(h.h.HighestTrackableValue())
	}
}

// merge adds o's values to h.
func (h *hist) merge(o *hist) { h.h.Merge(o.h) }

// Ladder is the percentiles a Latency's distribution is given at: dense
// in the tail, as HDR plots are read.
var Ladder = []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100}

func (h *hist) latency() Latency {
	at := func(q float64) Duration { return time.Duration(h.h.ValueAtPercentile(q)) * time.Microsecond }
	l := Latency{
		Count: h.h.TotalCount(),
		Mean:  time.Duration(h.h.Mean() * float64(time.Microsecond)),
		P50:   at(50), P90: at(90), P99: at(99), P999: at(99.9),
		Max: time.Duration(h.h.Max()) * time.Microsecond,
	}
	if l.Count == 0 {
		return Latency{}
	}
	for _, q := range Ladder {
		l.Percentiles = append(l.Percentiles, Point{Percentile: q, Value: at(q)})
	}
	return l
}
