package bench

import (
	"context"
	"time"

	"github.com/distlock/locker"
	_ "github.com/distlock/locker/etcd"      // etcd://
	_ "github.com/distlock/locker/memory"    // memory://
	_ "github.com/distlock/locker/postgres"  // postgres://, postgresql://
	_ "github.com/distlock/locker/redis"     // redis://
	_ "github.com/distlock/locker/redlock"   // redlock://
	_ "github.com/distlock/locker/zookeeper" // zookeeper://
)

// LockerDesign is this library on the deployment at rawURL: a Locker per
// client from locker.Open, with its defaults (the watchdog on), as an
// application would use it. Its Shared and Permits are the backend's
// capabilities, which the caller sets (prepare does).
func LockerDesign(backend, rawURL string) Design {
	return Design{
		Backend: backend, Name: "locker", Kind: KindLocker, Waits: true,
		Open: func(ctx context.Context) (Client, error) {
			l, err := locker.Open(ctx, rawURL)
			if err != nil {
				return nil, err
			}
			return lockerClient{l}, nil
		},
	}
}

type lockerClient struct{ l locker.Locker }

func (c lockerClient) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	lk, err := c.l.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

func (c lockerClient) Close() error { return c.l.Close() }

// LockShared takes a read lock (locker.Shared).
func (c lockerClient) LockShared(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	lk, err := c.l.Acquire(ctx, key, locker.WithTTL(ttl), locker.Shared())
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// LockPermit takes one permit of a semaphore of limit (locker.Limit).
func (c lockerClient) LockPermit(ctx context.Context, key string, limit int, ttl time.Duration) (Unlock, error) {
	lk, err := c.l.Acquire(ctx, key, locker.WithTTL(ttl), locker.Limit(limit))
	if err != nil {
		return nil, err
	}
	return lk.Release, nil
}

// acquire takes key as Lock does, returning the Lock itself, for the
// scenarios that watch a held lock's Lost.
func (c lockerClient) acquire(ctx context.Context, key string, ttl time.Duration) (locker.Lock, error) {
	return c.l.Acquire(ctx, key, locker.WithTTL(ttl))
}
