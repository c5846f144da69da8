// Package etcdbench holds the baseline the etcd benchmarks (package etcd's
// and the bench/etcd module's) measure a Locker against, so that both
// compare with the same thing.
package etcdbench

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// RawPair returns the raw server primitives one uncontended lock costs,
// with no library around them: a transaction that puts key with lease if
// it does not exist, then a bare delete. The lease should be kept alive,
// as a Locker's is.
func RawPair(c *clientv3.Client, key string, lease clientv3.LeaseID) func(context.Context) error {
	return func(ctx context.Context) error {
		r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, "", clientv3.WithLease(lease))).Commit()
		if err != nil {
			return err
		}
		if !r.Succeeded {
			return errors.New("raw: key taken")
		}
		_, err = c.Delete(ctx, key)
		return err
	}
}
