package etcd_test

import (
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
)

// TestNewNil: New refuses a nil client, and a Client literal that
// clientv3.New did not make (its KV, Lease and Watcher are nil
// interfaces), with an error that says so, instead of a panic.
func TestNewNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    *clientv3.Client
		opts *etcd.Options
		want string
	}{
		{"nil", nil, nil, "etcd: New: the client is nil"},
		{"nil with options", nil, &etcd.Options{Namespace: "n"}, "etcd: New: the client is nil"},
		{"zero Client", &clientv3.Client{}, nil, "make it with clientv3.New"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l locker.Locker
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("New panicked: %v", p)
					}
				}()
				l, err = etcd.New(tc.c, tc.opts)
			}()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New(%s) = %v, want an error containing %q", tc.name, err, tc.want)
			}
			if l != nil {
				t.Errorf("New(%s) returned a Locker with its error", tc.name)
				l.Close()
			}
		})
	}
}
