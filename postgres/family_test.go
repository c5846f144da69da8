package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/locker"
)

// TestReleasedReaderDoesNotBlockWriter: the row of a read/write lock's
// shared holds lives as long as its latest live hold. A reader that took
// a long TTL and released must not keep a writer out once the other
// reader, cut off with a short TTL, has lapsed: the writer gets the key
// at the short TTL, whether its Locker takes exclusive holds with the
// one-statement INSERT or through acquire_v2 (once it asked for a fence).
// The writer's deadline, 10 s, is far below the released reader's 60 s
// TTL and far above the short one's 1 s.
func TestReleasedReaderDoesNotBlockWriter(t *testing.T) {
	raw := serverURL(t)
	admin := adminPool(t)
	s := freshSchema(t, admin, false)
	u := withParams(t, raw, "schema", s)
	for _, fenced := range []bool{false, true} {
		name := map[bool]string{false: "insert", true: "acquire_v2"}[fenced]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			readers, writers := openLocker(t, u), openLocker(t, u)
			if fenced {
				askForFences(t, writers)
			}
			key := uniqueKey(t)
			long, err := readers.TryAcquire(ctx, key, locker.Shared(), locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			short, err := readers.TryAcquire(ctx, key, locker.Shared(), locker.WithTTL(time.Second), locker.WithAutoRefresh(false))
			if err != nil {
				t.Fatal(err)
			}
			if err := long.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			w, err := writers.Acquire(wctx, key, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("the writer, after the long reader released and while the short one (TTL 1s) lapsed: %v", err)
			}
			if _, err := short.TTL(ctx); err == nil {
				t.Errorf("the short reader's TTL answers while the writer holds the key")
			}
			if err := w.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
