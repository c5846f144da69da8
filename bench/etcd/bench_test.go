// Package etcdbench compares locker's etcd backend with etcd's own
// concurrency.Mutex on the same server, in one run. It is a module of its
// own so that the comparison stays out of the library's go.mod.
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/etcd && go test -run '^$' -bench . -benchmem -count 5
//
// Uncontended reports the Locker's throughput relative to the raw pair and
// to the Mutex, measured taking turns; Handoff reports p50/p99 handoff
// latency per design. The Locker and the Mutex are within a few percent of
// each other uncontended; on a shared two-core machine one run of 3,000
// rounds reads their ratio to within about 1%, one of 10,000 rounds to
// within about 0.5%:
//
//	go test -run '^$' -bench Uncontended -benchtime 10000x
package etcdbench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/etcdbench"
	"github.com/distlock/locker/internal/testenv"
)

// sessionTTL is the lease TTL of both designs, in seconds: the Locker's
// default TTL.
const sessionTTL = int(locker.DefaultTTL / time.Second)

func client(b *testing.B) *clientv3.Client {
	b.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: testenv.Hosts(b, testenv.Get(b, testenv.EtcdURL)), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

func uniq(name string) string { return fmt.Sprintf("bench-%s/%d", name, time.Now().UnixNano()) }

// BenchmarkUncontended: one holder acquiring and releasing a free key, by
// the raw pair (put-if-absent with a kept-alive lease, then delete), by
// concurrency.Mutex on one session, by the Locker's own two transactions
// sent directly ("txns": put if the queue is empty, then delete if the
// create revision is ours), and by a Locker, all on one client, taking
// turns (benchkit.Interleave). Read "locker/raw" and "locker/mutex": the
// Locker's throughput relative to the others; "txns/mutex" compares the
// two protocols alone, and "locker/txns" shows what the Locker's own work
// costs on top of its protocol.
func BenchmarkUncontended(b *testing.B) {
	c := client(b)
	raw, err := concurrency.NewSession(c, concurrency.WithTTL(sessionTTL)) // a kept-alive lease
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	rawKey := uniq("raw")
	txnsQueue := uniq("txns") + "/"
	txnsKey := txnsQueue + fmt.Sprintf("%x", raw.Lease())
	l, err := etcd.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(sessionTTL))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, uniq("mutex"))
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: etcdbench.RawPair(c, rawKey, raw.Lease())},
		benchkit.Design{Name: "mutex", Op: func(ctx context.Context) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}},
		benchkit.Design{Name: "txns", Op: func(ctx context.Context) error {
			r, err := c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(txnsQueue), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(txnsKey, "", clientv3.WithLease(raw.Lease()))).Commit()
			if err != nil {
				return err
			}
			if !r.Succeeded {
				return errors.New("txns: queue not empty")
			}
			_, err = c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(txnsKey), "=", r.Header.Revision)).
				Then(clientv3.OpDelete(txnsKey)).Commit()
			return err
		}},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(l, uniq("locker"))},
	)
}

// BenchmarkHandoff: release-to-next-acquire latency with 8 waiters on one
// key, each with its own client, for a Locker each and for a
// concurrency.Mutex on a session each.
func BenchmarkHandoff(b *testing.B) {
	const waiters = 8
	b.Run("locker/"+benchkit.WaitersName(waiters), func(b *testing.B) {
		benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
			return etcd.New(client(b), nil)
		}, uniq("handoff-locker"))
	})
	b.Run("mutex/"+benchkit.WaitersName(waiters), func(b *testing.B) {
		benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
			s, err := concurrency.NewSession(client(b), concurrency.WithTTL(sessionTTL))
			if err != nil {
				return nil, err
			}
			return mutexLocker{s}, nil
		}, uniq("handoff-mutex"))
	})
}

// mutexLocker presents a concurrency.Mutex per acquisition as a
// locker.Locker, only as far as benchkit.Handoff needs.
type mutexLocker struct{ s *concurrency.Session }

func (m mutexLocker) Acquire(ctx context.Context, key string, _ ...locker.Option) (locker.Lock, error) {
	mu := concurrency.NewMutex(m.s, key)
	if err := mu.Lock(ctx); err != nil {
		return nil, err
	}
	return mutexLock{mu: mu, key: key}, nil
}

func (m mutexLocker) TryAcquire(ctx context.Context, key string, _ ...locker.Option) (locker.Lock, error) {
	mu := concurrency.NewMutex(m.s, key)
	if err := mu.TryLock(ctx); err != nil {
		return nil, err
	}
	return mutexLock{mu: mu, key: key}, nil
}

func (m mutexLocker) Capabilities() locker.Capabilities { return locker.Capabilities{} }
func (m mutexLocker) Close() error                      { return m.s.Close() }

type mutexLock struct {
	mu  *concurrency.Mutex
	key string
}

func (l mutexLock) Key() string                                  { return l.key }
func (l mutexLock) Token() string                                { return l.mu.Key() }
func (l mutexLock) Fence() (uint64, bool)                        { return uint64(l.mu.Header().Revision), true }
func (l mutexLock) Refresh(context.Context, time.Duration) error { return errors.ErrUnsupported }
func (l mutexLock) TTL(context.Context) (time.Duration, error)   { return 0, errors.ErrUnsupported }
func (l mutexLock) Release(ctx context.Context) error            { return l.mu.Unlock(ctx) }
func (l mutexLock) Lost() <-chan struct{}                        { return nil }

// Until: a Mutex reports no validity of its own (its session's lease
// bounds it); the zero time says so.
func (l mutexLock) Until() time.Time { return time.Time{} }

// SetValue: the peer stores no value beside its lock.
func (l mutexLock) SetValue(context.Context, []byte) error { return locker.ErrUnsupported }

// Err: a Mutex does not tell whether it was lost (Lost is nil); nil says
// nothing is known.
func (l mutexLock) Err() error { return nil }
