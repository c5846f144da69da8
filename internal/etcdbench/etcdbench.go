// Package etcdbench holds the baselines the etcd benchmarks (package etcd's
// and the bench/etcd module's) measure a Locker against, so that both
// compare with the same things.
package etcdbench

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
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

// RecipeRead returns one read hold of key by etcd's experimental
// recipe.RWMutex (client/v3/experimental/recipes) on session s: RLock,
// which puts a key named after the time under key's "read" prefix (a
// transaction) and reads the last writer's key before it, then RUnlock,
// which deletes it. The recipe takes no context: ctx is not used.
func RecipeRead(s *concurrency.Session, key string) func(context.Context) error {
	m := recipe.NewRWMutex(s, key)
	return func(context.Context) error {
		if err := m.RLock(); err != nil {
			return err
		}
		return m.RUnlock()
	}
}
