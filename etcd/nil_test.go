package etcd_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
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
			testenv.WantNewError(t, "New("+tc.name+")", func() (locker.Locker, error) { return etcd.New(tc.c, tc.opts) }, tc.want)
		})
	}
}
