package zookeeper_test

import (
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

// TestNewNil: New refuses a nil connection with an error that says so,
// whatever the options, instead of a panic.
func TestNewNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *zookeeper.Options
	}{
		{"nil options", nil},
		{"session timeout", &zookeeper.Options{SessionTimeout: 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.WantNewError(t, "New(nil, "+tc.name+")", func() (locker.Locker, error) { return zookeeper.New(nil, tc.opts) }, "zookeeper: New: the connection is nil")
		})
	}
}
