package memory_test

import (
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/memory"
)

// BenchmarkAcquireRelease: uncontended Acquire+Release on the embedded
// backend, whose server is a map in the process. What it measures is
// mostly package locker's own work per lock (validation, the token, the
// lock record, the watchdog's timetable), the part every backend pays on
// top of its round trips.
//
//	go test -run '^$' -bench AcquireRelease -benchmem ./memory/
func BenchmarkAcquireRelease(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []locker.Option
	}{
		{"autorefresh", nil},
		{"no-autorefresh", []locker.Option{locker.WithAutoRefresh(false)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := memory.New(nil)
			defer l.Close()
			benchkit.AcquireRelease(b, l, "bench", tc.opts...)
		})
	}
}
