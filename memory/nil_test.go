package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// TestNewNil: the constructors take only options, and nil options (or a
// nil Store in them) mean the defaults, the process-wide store of
// memory://: a working Locker, not a panic.
func TestNewNil(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts *memory.Options
	}{
		{"nil", nil},
		{"nil Store", &memory.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := memory.New(tc.opts)
			defer a.Close()
			b := memory.NewClient(tc.opts)
			defer b.Close()
			key := "nil-options/" + tc.name
			lk, err := a.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("New(%s).TryAcquire: %v", tc.name, err)
			}
			defer lk.Release(ctx)
			if _, err := b.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
				t.Errorf("NewClient(%s).TryAcquire of a key New(%s) holds: %v, want ErrNotAcquired (one default store)", tc.name, tc.name, err)
			}
		})
	}
}
