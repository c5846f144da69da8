// Package zookeeperbench compares locker's ZooKeeper backend with
// go-zookeeper's own zk.Lock on the same server, in one run. It is a module
// of its own so that the comparison stays out of the library's go.mod.
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/zookeeper && go test -run '^$' -bench . -benchmem -count 5
package zookeeperbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	_ "github.com/distlock/locker/zookeeper"
)

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func servers(b *testing.B) (raw string, hosts []string) {
	raw = testenv.Get(b, testenv.ZooKeeperURL)
	return raw, testenv.Hosts(b, raw)
}

func connect(b *testing.B, hosts []string) *zk.Conn {
	c, _, err := zk.Connect(hosts, 30*time.Second, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		b.Fatal(err)
	}
	// go-zookeeper connects in the background and retries for ever: a
	// server that is down would hang the benchmark instead of failing it.
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			c.Close()
			b.Fatalf("no ZooKeeper session with %v within 10s: is the server up (make services-up)?", hosts)
		}
		time.Sleep(time.Millisecond)
	}
	return c
}

func uniq(prefix string) string {
	var r [6]byte
	rand.Read(r[:])
	return "/" + prefix + "-" + hex.EncodeToString(r[:])
}

// BenchmarkUncontended: one goroutine locks and unlocks a free key through
// each library, taking turns (benchkit.Interleave): read "locker/zklock".
// Both send three requests: a protected ephemeral sequential create, a
// listing of the queue, a delete; zk.Lock waits for each reply before the
// next request, the Locker sends the listing right behind the create.
// zk.Lock has no context, no fencing token and no TTL; the Locker reads the
// fence from the create's reply.
func BenchmarkUncontended(b *testing.B) {
	raw, hosts := servers(b)
	l, err := benchkit.Warm(locker.Open(context.Background(), raw+uniq("bench-peer-locker")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c := connect(b, hosts)
	defer c.Close()
	lk := zk.NewLock(c, uniq("bench-peer-zklock")+"/k", zk.WorldACL(zk.PermAll))
	benchkit.Interleave(b,
		benchkit.Design{Name: "zklock", Op: func(context.Context) error {
			if err := lk.Lock(); err != nil {
				return fmt.Errorf("zk.Lock: %w", err)
			}
			return lk.Unlock()
		}},
		benchkit.Design{Name: "locker", Op: benchkit.AcquireReleaseOp(l, "k", locker.WithAutoRefresh(false))},
	)
}

// BenchmarkHandoff: release-to-next-acquire latency and throughput with 2
// and 8 waiters on one key, each with its own session, through each
// library, taking turns (benchkit.HandoffInterleave): read
// "locker/zk.Lock". Both wake only the next waiter in the queue.
func BenchmarkHandoff(b *testing.B) {
	raw, hosts := servers(b)
	for _, waiters := range []int{2, 8} {
		b.Run(benchkit.WaitersName(waiters), func(b *testing.B) {
			base, zkBase := raw+uniq("bench-peer-handoff"), uniq("bench-peer-zkhandoff")
			benchkit.HandoffInterleave(b, waiters, "k",
				benchkit.HandoffDesign{Name: "zk.Lock", NewLocker: func() (locker.Locker, error) {
					return &zkLocker{c: connect(b, hosts), base: zkBase}, nil
				}},
				benchkit.HandoffDesign{Name: "locker", NewLocker: func() (locker.Locker, error) {
					return benchkit.Warm(locker.Open(context.Background(), base))
				}, Opts: []locker.Option{locker.WithAutoRefresh(false)}},
			)
		})
	}
}

// zkLocker runs zk.Lock under the locker.Locker interface, as far as
// benchkit's handoffs need it: Acquire and Release. zk.Lock cannot give up
// waiting, so a cancelled Acquire waits for the lock and releases it at
// once before it returns; benchkit cancels the waiters at the end of each
// turn, once the last holder has released.
type zkLocker struct {
	c    *zk.Conn
	base string
}

var errUnsupported = errors.New("not supported by zk.Lock")

func (l *zkLocker) Acquire(ctx context.Context, key string, _ ...locker.Option) (locker.Lock, error) {
	lk := zk.NewLock(l.c, l.base+"/"+key, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- lk.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return &zkLock{key: key, lk: lk}, nil
	case <-ctx.Done():
		if err := <-done; err == nil {
			lk.Unlock()
		}
		return nil, ctx.Err()
	}
}

func (l *zkLocker) TryAcquire(context.Context, string, ...locker.Option) (locker.Lock, error) {
	return nil, errUnsupported
}
func (l *zkLocker) Capabilities() locker.Capabilities { return locker.Capabilities{} }
func (l *zkLocker) Close() error                      { l.c.Close(); return nil }

type zkLock struct {
	key string
	lk  *zk.Lock
}

func (l *zkLock) Key() string                                  { return l.key }
func (l *zkLock) Token() string                                { return "" }
func (l *zkLock) Fence() (uint64, bool)                        { return 0, false }
func (l *zkLock) Refresh(context.Context, time.Duration) error { return errUnsupported }
func (l *zkLock) TTL(context.Context) (time.Duration, error)   { return 0, errUnsupported }
func (l *zkLock) Release(context.Context) error                { return l.lk.Unlock() }
func (l *zkLock) Lost() <-chan struct{}                        { return nil }

// Until: zk.Lock reports no validity of its own (its session bounds it);
// the zero time says so.
func (l *zkLock) Until() time.Time { return time.Time{} }

// SetValue: the peer stores no value beside its lock.
func (l *zkLock) SetValue(context.Context, []byte) error { return locker.ErrUnsupported }

// Err: zk.Lock does not tell whether it was lost (Lost is nil); nil says
// nothing is known.
func (l *zkLock) Err() error { return nil }

// BenchmarkFreshKey: the first acquisition of a key never locked before (a
// lock per order id), then its release, through each library, taking
// turns: read "locker/zklock". zk.Lock's create fails, it creates the
// missing parent, creates again and lists; the Locker's create (and the
// listing behind it) fail, it creates the key node as a container, and its
// node there is the first, which needs no listing.
func BenchmarkFreshKey(b *testing.B) {
	raw, hosts := servers(b)
	l, err := benchkit.Warm(locker.Open(context.Background(), raw+uniq("bench-peer-fresh-locker")))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	c := connect(b, hosts)
	defer c.Close()
	base := uniq("bench-peer-fresh-zklock")
	if _, err := c.Create(base, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		b.Fatal(err)
	}
	var nLocker, nZK int
	benchkit.Interleave(b,
		benchkit.Design{Name: "zklock", Op: func(context.Context) error {
			nZK++
			lk := zk.NewLock(c, fmt.Sprintf("%s/k%d", base, nZK), zk.WorldACL(zk.PermAll))
			if err := lk.Lock(); err != nil {
				return fmt.Errorf("zk.Lock: %w", err)
			}
			return lk.Unlock()
		}},
		benchkit.Design{Name: "locker", Op: func(ctx context.Context) error {
			nLocker++
			lk, err := l.Acquire(ctx, fmt.Sprint("k", nLocker), locker.WithAutoRefresh(false))
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
	)
}
