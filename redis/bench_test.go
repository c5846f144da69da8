package redis_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// rawRelease is the compare-and-delete script of the Redis distlock page,
// the release half of the raw baseline.
const rawRelease = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// rawOp is the raw pair on key through c, the baseline the Locker is
// measured against: SET NX PX, then EVALSHA of rawRelease. It fails
// where the key was taken or gone.
func rawOp(b *testing.B, c *goredis.Client, key string) func(context.Context) error {
	sha, err := c.ScriptLoad(context.Background(), rawRelease).Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int
	return func(ctx context.Context) error {
		n++
		token := fmt.Sprint(n)
		ok, err := c.SetNX(ctx, key, token, 30*time.Second).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("raw: key taken")
		}
		released, err := c.EvalSha(ctx, sha, []string{key}, token).Int()
		if err == nil && released != 1 {
			err = errors.New("raw: release found the key gone")
		}
		return err
	}
}

// BenchmarkUncontended compares one holder acquiring and releasing a free
// key through a Locker with the raw pair on the same server: SET NX PX,
// then EVALSHA of the compare-and-delete script. Both cost two round
// trips; the Locker's also mints a fencing token and publishes a release
// notice inside its scripts. Compare ops/s between sub-benchmarks: goredis
// and goredis-autorefresh with raw, redigo with raw-redigo.
func BenchmarkUncontended(b *testing.B) {
	addr := hostOf(b, testenv.Get(b, testenv.RedisURL))
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) }, MaxIdle: 8}
	defer pool.Close()
	noRefresh := locker.WithAutoRefresh(false)

	b.Run("raw", func(b *testing.B) {
		raw := rawOp(b, c, "bench-raw")
		benchkit.Loop(b, func(ctx context.Context, _ int) error { return raw(ctx) })
	})
	b.Run("raw-redigo", func(b *testing.B) {
		rc := pool.Get()
		sha, err := redigo.String(rc.Do("SCRIPT", "LOAD", rawRelease))
		rc.Close()
		if err != nil {
			b.Fatal(err)
		}
		key := "bench-raw-redigo"
		do := func(ctx context.Context, cmd string, args ...any) (any, error) {
			rc, err := pool.GetContext(ctx)
			if err != nil {
				return nil, err
			}
			defer rc.Close()
			return redigo.DoContext(rc, ctx, cmd, args...)
		}
		benchkit.Loop(b, func(ctx context.Context, i int) error {
			token := fmt.Sprint(i)
			if _, err := redigo.String(do(ctx, "SET", key, token, "NX", "PX", 30000)); err != nil {
				return fmt.Errorf("raw: SET NX PX: %w", err)
			}
			n, err := redigo.Int(do(ctx, "EVALSHA", sha, 1, key, token))
			if err == nil && n != 1 {
				err = errors.New("raw: release found the key gone")
			}
			return err
		})
	})
	b.Run("goredis", func(b *testing.B) {
		l, err := redis.New(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchkit.AcquireRelease(b, l, "bench-goredis", noRefresh)
	})
	b.Run("goredis-autorefresh", func(b *testing.B) {
		l, err := redis.New(c, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchkit.AcquireRelease(b, l, "bench-goredis-ar")
	})
	b.Run("redigo", func(b *testing.B) {
		l, err := redis.NewRedigo(pool, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		benchkit.AcquireRelease(b, l, "bench-redigo", noRefresh)
	})
}

// BenchmarkHandoff measures release-to-next-acquire latency and fairness
// with 2 and 8 waiters on one key, each with its own client and Locker,
// woken by pub/sub release notices. The package doc (# Performance) gives
// what it measured against the rejected per-key wake-up list.
func BenchmarkHandoff(b *testing.B) {
	addr := hostOf(b, testenv.Get(b, testenv.RedisURL))
	for _, waiters := range []int{2, 8} {
		b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
			var clients []*goredis.Client
			defer func() {
				for _, c := range clients {
					c.Close()
				}
			}()
			benchkit.Handoff(b, waiters, func() (locker.Locker, error) {
				c := goredis.NewClient(&goredis.Options{Addr: addr})
				clients = append(clients, c)
				return redis.New(c, nil)
			}, "bench-handoff", locker.WithAutoRefresh(false))
		})
	}
}

// BenchmarkTurns compares, taking turns one operation at a time
// (benchkit.Interleave) so that the machine's noise hits all alike:
//
//   - "raw": the raw pair, SET NX PX, then EVALSHA of compare-and-delete;
//   - "setnx": the Locker's commands for a lock whose fence is not asked
//     for, sent directly: SET NX PX, then release.lua (which also
//     publishes the release notice);
//   - "scripts": its commands once fences are asked for: acquire.lua
//     (SET NX PX and the fence's mint), then release.lua;
//   - "new": a Locker built on the same client as the raw pair, whose
//     holders never ask for the fence;
//   - "fenced": another, whose holders ask for it every time (the first
//     Fence mints in a round trip of its own; from then on the Locker
//     mints with each acquisition: see Performance in the package doc);
//   - "open": a Locker opened from a URL as an application opens it.
//
// Read "new/raw" and "open/raw": the Locker's throughput relative to the
// raw pair; "setnx/raw" and "scripts/raw" what the protocol itself costs,
// "new/setnx" and "fenced/scripts" what the Locker's code adds.
func BenchmarkTurns(b *testing.B) {
	url := testenv.Get(b, testenv.RedisURL)
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(b, url)})
	defer c.Close()
	ctx := context.Background()
	d, err := redis.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	f, err := redis.New(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	o, err := locker.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	noRefresh := locker.WithAutoRefresh(false)
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: rawOp(b, c, "bench-turns-raw")},
		benchkit.Design{Name: "setnx", Op: redis.SetNXOp(c, "bench-turns-setnx")},
		benchkit.Design{Name: "scripts", Op: redis.ScriptsOp(c, "bench-turns-scripts")},
		benchkit.Design{Name: "new", Op: benchkit.AcquireReleaseOp(d, "bench-turns-new", noRefresh)},
		benchkit.Design{Name: "fenced", Op: benchkit.AcquireFenceReleaseOp(f, "bench-turns-fenced", noRefresh)},
		benchkit.Design{Name: "open", Op: benchkit.AcquireReleaseOp(o, "bench-turns-open", noRefresh)},
	)
}

// BenchmarkExclusiveHash measures what an exclusive hold would cost if it
// were kept in the hash of holders that shared and permit holds use (a
// semaphore of one permit), against the SET NX PX path the mutex keeps,
// taking turns one operation at a time (benchkit.Interleave):
//
//   - "raw": the raw pair, SET NX PX, then EVALSHA of compare-and-delete;
//   - "setnx": the mutex's commands, SET NX PX, then release.lua;
//   - "hash": hold.lua for a permit of 1, without a fence, then
//     hold_release.lua;
//   - "scripts": the mutex's commands once fences are asked for,
//     acquire.lua (SET NX PX and the fence's mint), then release.lua;
//   - "hash-fenced": hold.lua with the fence minted, then
//     hold_release.lua;
//   - "valued": what an exclusive hold with a value costs (WithValue):
//     hold.lua for an exclusive hold with a 16-byte value, its fence
//     minted and its grant published, then release.lua, which finds the
//     hold in the hash after its GET failed.
//
// Read "hash/setnx" and "hash-fenced/scripts"; "valued/scripts" is what a
// value costs a holder that fences.
func BenchmarkExclusiveHash(b *testing.B) {
	url := testenv.Get(b, testenv.RedisURL)
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(b, url)})
	defer c.Close()
	benchkit.Interleave(b,
		benchkit.Design{Name: "raw", Op: rawOp(b, c, "bench-hash-raw")},
		benchkit.Design{Name: "setnx", Op: redis.SetNXOp(c, "bench-hash-setnx")},
		benchkit.Design{Name: "hash", Op: redis.HoldOp(c, "bench-hash-hash", false)},
		benchkit.Design{Name: "scripts", Op: redis.ScriptsOp(c, "bench-hash-scripts")},
		benchkit.Design{Name: "hash-fenced", Op: redis.HoldOp(c, "bench-hash-fenced", true)},
		benchkit.Design{Name: "valued", Op: redis.ValuedOp(c, "bench-hash-valued")},
	)
}

// BenchmarkClients compares many clients at once, each with a connection
// pool (and a Locker) of its own and a key of its own, taking turns by
// rounds (benchkit.InterleaveClients): the raw pair; the Locker's
// commands sent directly ("setnx": SET NX PX, then release.lua, as in
// BenchmarkTurns); and Lockers with default options (the watchdog on),
// whose holders never ask for the fence ("locker") or ask for it every
// time ("fenced"). Read "locker/raw" and "fenced/raw"; "setnx/raw" is
// what the protocol costs, "locker/setnx" what the Locker's code adds. On two cores the clients' CPU competes
// with the server's, so what a Locker allocates and schedules per
// operation shows here more than with one client.
func BenchmarkClients(b *testing.B) {
	url := testenv.Get(b, testenv.RedisURL)
	addr := hostOf(b, url)
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			var closers []func() error
			defer func() {
				for _, c := range closers {
					c()
				}
			}()
			client := func() *goredis.Client {
				c := goredis.NewClient(&goredis.Options{Addr: addr})
				closers = append(closers, c.Close)
				return c
			}
			raw := benchkit.ClientsDesign{Name: "raw"}
			setnx := benchkit.ClientsDesign{Name: "setnx"}
			plain := benchkit.ClientsDesign{Name: "locker"}
			fenced := benchkit.ClientsDesign{Name: "fenced"}
			for i := range n {
				c := client()
				key, token := fmt.Sprintf("bench-clients-raw/%d", i), 0
				raw.Ops = append(raw.Ops, func(ctx context.Context) error {
					token++
					t := strconv.Itoa(token)
					if err := c.SetNX(ctx, key, t, 30*time.Second).Err(); err != nil {
						return err
					}
					return c.Eval(ctx, rawRelease, []string{key}, t).Err()
				})
				setnx.Ops = append(setnx.Ops, redis.SetNXOp(client(), fmt.Sprintf("bench-clients-setnx/%d", i)))
				for _, d := range []*benchkit.ClientsDesign{&plain, &fenced} {
					l, err := redis.New(client(), nil)
					if err != nil {
						b.Fatal(err)
					}
					closers = append(closers, l.Close)
					key := fmt.Sprintf("bench-clients-%s/%d", d.Name, i)
					op := benchkit.AcquireReleaseOp(l, key)
					if d == &fenced {
						op = benchkit.AcquireFenceReleaseOp(l, key)
					}
					d.Ops = append(d.Ops, op)
				}
			}
			benchkit.InterleaveClients(b, 20, raw, setnx, plain, fenced)
		})
	}
}
