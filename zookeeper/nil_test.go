package zookeeper_test

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
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
			var l locker.Locker
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("New(nil) panicked: %v", p)
					}
				}()
				l, err = zookeeper.New(nil, tc.opts)
			}()
			if want := "zookeeper: New: the connection is nil"; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("New(nil, %s) = %v, want an error containing %q", tc.name, err, want)
			}
			if l != nil {
				t.Errorf("New(nil, %s) returned a Locker with its error", tc.name)
				l.Close()
			}
		})
	}
}
