// Package redisbench compares locker's Redis backend with bsm/redislock,
// the peer a user of a single Redis would otherwise take, and with the
// raw pair (SET NX PX, then a compare-and-delete script) on the same
// server, in one run. It is a module of its own so that redislock stays
// out of the library's go.mod.
//
//	eval $(scripts/services.sh env)   # from the repository root
//	cd bench/redis && go test -run '^$' -bench . -benchmem -count 3
//
// Two kinds of holder use the Locker: one that never asks for the fence
// ("locker") and one that asks for it on every lock ("fenced": the Locker
// then mints it with each acquisition, in the acquire script; see
// Performance in the redis package doc). The costs behind the gap, one by
// one, are in the redis package's BenchmarkTurns and BenchmarkClients.
package redisbench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/benchkit"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// rawRelease is the compare-and-delete script of the Redis distlock page.
const rawRelease = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

const ttl = 30 * time.Second

// clients returns a function that makes a new client of the test server,
// closed when b ends.
func clients(b *testing.B) func() *goredis.Client {
	u, err := url.Parse(testenv.Get(b, testenv.RedisURL))
	if err != nil {
		b.Fatal(err)
	}
	return func() *goredis.Client {
		c := goredis.NewClient(&goredis.Options{Addr: u.Host})
		b.Cleanup(func() { c.Close() })
		return c
	}
}

// designs returns the four designs on key (suffixed per design), each on
// a client of its own from newClient, which the caller closes.
func designs(b *testing.B, newClient func() *goredis.Client, key string) []benchkit.Design {
	ctx := context.Background()
	rc := newClient()
	sha, err := rc.ScriptLoad(ctx, rawRelease).Result()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	raw := func(ctx context.Context) error {
		n++
		token := strconv.Itoa(n)
		ok, err := rc.SetNX(ctx, key+"/raw", token, ttl).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("raw: key taken")
		}
		return rc.EvalSha(ctx, sha, []string{key + "/raw"}, token).Err()
	}
	rl := redislock.New(newClient())
	peer := func(ctx context.Context) error {
		lk, err := rl.Obtain(ctx, key+"/redislock", ttl, nil)
		if err != nil {
			return fmt.Errorf("redislock obtain: %w", err)
		}
		return lk.Release(ctx)
	}
	lockers := make([]locker.Locker, 2)
	for i := range lockers {
		l, err := redis.New(newClient(), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		lockers[i] = l
	}
	return []benchkit.Design{
		{Name: "raw", Op: raw},
		{Name: "redislock", Op: peer},
		{Name: "locker", Op: benchkit.AcquireReleaseOp(lockers[0], key+"/locker", locker.WithTTL(ttl))},
		{Name: "fenced", Op: benchkit.AcquireFenceReleaseOp(lockers[1], key+"/fenced", locker.WithTTL(ttl))},
	}
}

// BenchmarkUncontended: one client per design takes and releases a free
// key, the designs taking turns one operation at a time
// (benchkit.Interleave). Read "locker/raw", "locker/redislock",
// "fenced/raw" and "fenced/redislock".
func BenchmarkUncontended(b *testing.B) {
	benchkit.Interleave(b, designs(b, clients(b), fmt.Sprintf("bench-peer/%d", time.Now().UnixNano()))...)
}

// BenchmarkClients: 16 and 64 clients per design, each with a client (and
// a Locker) of its own and a key of its own, the designs taking turns by
// rounds (benchkit.InterleaveClients).
func BenchmarkClients(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			newClient := clients(b)
			var cds []benchkit.ClientsDesign
			for i := range n {
				ds := designs(b, newClient, fmt.Sprintf("bench-peer-clients/%d/%d", time.Now().UnixNano(), i))
				if cds == nil {
					cds = make([]benchkit.ClientsDesign, len(ds))
				}
				for j, d := range ds {
					cds[j].Name = d.Name
					cds[j].Ops = append(cds[j].Ops, d.Op)
				}
			}
			benchkit.InterleaveClients(b, 20, cds...)
		})
	}
}
