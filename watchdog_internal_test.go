package locker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/distlock/locker/backend"
)

// countingHeld counts the refreshes sent to it.
type countingHeld struct{ refreshes atomic.Int32 }

func (h *countingHeld) Refresh(ctx context.Context, _ time.Duration) error {
	h.refreshes.Add(1)
	return ctx.Err()
}
func (h *countingHeld) TTL(context.Context) (time.Duration, error) { return time.Second, nil }
func (h *countingHeld) Release(context.Context) error              { return nil }

// TestSendStopsAtEachDeadline: refreshes sent one by one (a driver without
// RefreshBatch) each stop at their own lock's deadline, not at the
// batch's latest: a lock whose deadline has passed (it is reported lost
// here) is not refreshed, which would keep it on the server for another
// TTL, while the others in its batch are.
func TestSendStopsAtEachDeadline(t *testing.T) {
	w := &watchdog{helpers: make(chan struct{}, 1)}
	past, live := &countingHeld{}, &countingHeld{}
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Minute)) // the batch's latest deadline
	defer cancel()
	errs := w.send(ctx, []backend.Held{past, live}, []time.Duration{time.Second, time.Second}, []time.Time{now.Add(-time.Millisecond), now.Add(time.Minute)})
	require.ErrorIs(t, errs[0], context.DeadlineExceeded, "the lock past its deadline")
	require.Zero(t, past.refreshes.Load(), "refreshes sent for the lock past its deadline")
	require.NoError(t, errs[1])
	require.Equal(t, int32(1), live.refreshes.Load(), "refreshes sent for the live lock")
}
