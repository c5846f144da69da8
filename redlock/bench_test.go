package redlock_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	_ "github.com/distlock/locker/redis"
)

// BenchmarkUncontended compares Acquire+Release on five Redlock nodes
// with the same on one Redis server (the redis package), in one run: the
// fan-out to all nodes is parallel, so the p50 latency should stay within
// about twice the single server's.
func BenchmarkUncontended(b *testing.B) {
	single := hosts(b, testenv.Get(b, testenv.RedisURL))
	five := hosts(b, testenv.Get(b, testenv.RedlockURL))
	// The floor this machine sets: the raw SET NX PX + compare-and-delete
	// pair on one server, and the same pair sent to five servers at once.
	// On a machine with fewer cores than servers, the five servers queue
	// for the CPU and the fan-out costs more than one round trip.
	b.Run("raw-single", func(b *testing.B) { rawFanOut(b, single) })
	b.Run("raw-fanout-5", func(b *testing.B) { rawFanOut(b, five) })
	// The same with 0.5 ms added each way by a proxy in front of every
	// server, as on a network: then round trips, not CPU, dominate, and
	// the parallel fan-out shows.
	for _, tc := range []struct {
		name  string
		hosts []string
		open  string
	}{{"rtt=1ms/redis-single", single, "redis://"}, {"rtt=1ms/redlock-5", five, "redlock://"}} {
		b.Run(tc.name, func(b *testing.B) {
			var addrs []string
			for _, h := range tc.hosts {
				p := testenv.Proxy(b, h)
				p.SetLatency(500 * time.Microsecond)
				addrs = append(addrs, p.Addr())
			}
			l, err := locker.Open(context.Background(), tc.open+strings.Join(addrs, ","))
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchkit.AcquireRelease(b, l, "bench-uncontended-rtt", locker.WithAutoRefresh(false))
		})
	}
	for _, tc := range []struct{ name, url string }{
		{"redis-single", testenv.Get(b, testenv.RedisURL)},
		{"redlock-5", testenv.Get(b, testenv.RedlockURL)},
		{"redlock-5-redigo", testenv.Get(b, testenv.RedlockURL) + "?client=redigo"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := locker.Open(context.Background(), tc.url)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			benchkit.AcquireRelease(b, l, "bench-uncontended", locker.WithAutoRefresh(false))
		})
	}
}

func hosts(b *testing.B, raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	return strings.Split(u.Host, ",")
}

const rawRelease = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// rawFanOut locks and unlocks a key on every server at once with the raw
// commands, one goroutine per server, as a Redlock round does.
func rawFanOut(b *testing.B, addrs []string) {
	op := rawFanOutOp(b, addrs, "bench-raw", 0)
	benchkit.Loop(b, func(ctx context.Context, _ int) error { return op(ctx) })
}

// rawFanOutOp is rawFanOut's operation on key, with a new token each
// time. With a nodeTimeout, it bounds each fan-out by it, as a Redlock
// round does, on clients that honour contexts as the Locker's do.
func rawFanOutOp(b *testing.B, addrs []string, key string, nodeTimeout time.Duration) func(context.Context) error {
	ctx := context.Background()
	var cs []*goredis.Client
	for _, a := range addrs {
		o := &goredis.Options{Addr: a}
		if nodeTimeout > 0 {
			o.ContextTimeoutEnabled = true
		}
		c := goredis.NewClient(o)
		b.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	sha, err := cs[0].ScriptLoad(ctx, rawRelease).Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cs[1:] {
		c.ScriptLoad(ctx, rawRelease)
	}
	each := func(ctx context.Context, f func(ctx context.Context, c *goredis.Client) error) error {
		if nodeTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, nodeTimeout)
			defer cancel()
		}
		errs := make(chan error, len(cs))
		for _, c := range cs {
			go func() { errs <- f(ctx, c) }()
		}
		var first error
		for range cs {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	var i int
	return func(ctx context.Context) error {
		i++
		token := fmt.Sprint(i)
		if err := each(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.SetNX(ctx, key, token, 30*time.Second).Err()
		}); err != nil {
			return err
		}
		return each(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.EvalSha(ctx, sha, []string{key}, token).Err()
		})
	}
}

// BenchmarkFanOut compares an uncontended Acquire+Release on the five
// nodes with the raw fan-out of SET NX PX and compare-and-delete to the
// same nodes ("raw"), and with that fan-out bounded by the default node
// timeout on clients that honour it ("timeouts": what the Redlock
// algorithm itself asks for), taking turns in one run
// (benchkit.Interleave) so that the machine's noise hits all alike. Read
// "redlock/raw" (throughput, 1 is as fast) and "p50-ratio" (the Redlock
// p50 over the raw one); "timeouts/raw" and "redlock/timeouts" split the
// difference between the per-node timeouts and the rest of the Locker.
// (The release notice the Locker publishes costs nothing measurable with
// nobody subscribed.)
func BenchmarkFanOut(b *testing.B) {
	five := hosts(b, testenv.Get(b, testenv.RedlockURL))
	l, err := locker.Open(context.Background(), testenv.Get(b, testenv.RedlockURL))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	var lat [3]benchkit.Latencies
	timed := func(i int, op func(context.Context) error) func(context.Context) error {
		return func(ctx context.Context) error {
			t0 := time.Now()
			err := op(ctx)
			lat[i].Add(time.Since(t0))
			return err
		}
	}
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: timed(0, rawFanOutOp(b, five, "bench-fanout-raw", 0))},
		// 100 ms: the default node_timeout.
		benchkit.Design{Name: "timeouts", Op: timed(1, rawFanOutOp(b, five, "bench-fanout-timeouts", 100*time.Millisecond))},
		benchkit.Design{Name: "redlock", Op: timed(2, benchkit.AcquireReleaseOp(l, "bench-fanout-redlock", locker.WithAutoRefresh(false)))},
	)
	b.ReportMetric(float64(lat[2].Quantile(0.5))/float64(lat[0].Quantile(0.5)), "p50-ratio")
}

// BenchmarkHandoff measures release-to-next-acquire latency with 2 and 8
// waiters on one key, each with its own Locker.
func BenchmarkHandoff(b *testing.B) {
	url := testenv.Get(b, testenv.RedlockURL)
	for _, waiters := range []int{2, 8} {
		b.Run(benchkit.WaitersName(waiters), func(b *testing.B) {
			benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
				return locker.Open(context.Background(), url)
			}, "bench-handoff", locker.WithAutoRefresh(false))
		})
	}
}

// BenchmarkDeadNode compares uncontended Acquire+Release on the five test
// nodes with the same on four of them and a fifth address that refuses
// connections, taking turns in one run (benchkit.Interleave): the dead
// node must cost next to nothing, as it is skipped after a few failures.
// Compare 1-refused-p50-µs with all-up-p50-µs.
func BenchmarkDeadNode(b *testing.B) {
	five := hosts(b, testenv.Get(b, testenv.RedlockURL))
	dead := testenv.StartRedis(b)
	dead.Stop()
	withDead := append([]string{dead.Addr()}, five[1:]...)
	var designs []benchkit.Design
	for _, tc := range []struct{ name, url string }{
		{"all-up", "redlock://" + strings.Join(five, ",")},
		{"1-refused", "redlock://" + strings.Join(withDead, ",")},
	} {
		l, err := locker.Open(context.Background(), tc.url)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		designs = append(designs, benchkit.Design{Name: tc.name,
			Op: benchkit.AcquireReleaseOp(l, "bench-dead-node-"+tc.name, locker.WithAutoRefresh(false))})
	}
	benchkit.Interleave(b, designs...)
}
