package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// countingConn counts the script calls the pipelines carry.
type countingConn struct {
	redisconn.Conn
	calls int
}

func (c *countingConn) EvalMany(ctx context.Context, s *redisconn.Script, calls []redisconn.Call) []redisconn.Reply {
	c.calls += len(calls)
	return c.Conn.EvalMany(ctx, s, calls)
}

// TestRefreshBatch checks the batched refresh the watchdog uses, on both
// client libraries and on a Cluster, over exclusive, shared and permit
// holds mixed: every lock still ours is extended, and no other holder of
// its key; a lock that is not ours any more is reported as such without
// touching it; and 250 locks cost a few script calls (100 locks each on
// one server, one call per hash slot on a Cluster), not 250.
func TestRefreshBatch(t *testing.T) {
	u, err := url.Parse(testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	cu, err := url.Parse(testenv.Get(t, testenv.RedisClusterURL))
	if err != nil {
		t.Fatal(err)
	}
	gc := goredis.NewClient(&goredis.Options{Addr: u.Host})
	defer gc.Close()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(cu.Host, ",")})
	defer cc.Close()
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", u.Host) }}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const n = 250
	for _, tc := range []struct {
		name     string
		raw      goredis.UniversalClient
		c        redisconn.Conn
		maxCalls int
	}{
		{"goredis", gc, redisconn.NewGoRedis(gc, false), 3},
		{"redigo", gc, redisconn.NewRedigo(pool, false), 3},
		// Each lock key is in a hash slot of its own, nearly always: a
		// call per slot (0: count them), the fewest the Cluster allows.
		{"cluster", cc, redisconn.NewGoRedis(cc, false), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			counting := &countingConn{Conn: tc.c}
			d := newDriver(counting, log)
			defer d.Close()
			base := fmt.Sprintf("batch/%s/%d", tc.name, time.Now().UnixNano())
			var locks []backend.Held
			var ttls []time.Duration
			for i := range n {
				// Every third lock shared, every third a permit of 2.
				req := backend.Request{Key: fmt.Sprintf("%s/%d", base, i), Token: fmt.Sprint("t", i), TTL: time.Second}
				switch i % 3 {
				case 1:
					req.Kind = backend.Shared
				case 2:
					req.Kind, req.Limit, req.Weight = backend.Permit, 2, 1
				}
				acq, err := d.TryAcquire(ctx, req)
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, acq.Held)
				ttls = append(ttls, time.Minute)
			}
			// Lock 7, a shared hold, changes hands behind its holder's
			// back. Locks 4 (shared) and 5 (a permit) have another holder
			// each, whose TTL of a second the batch must leave alone.
			stolen := fmt.Sprintf("%s/7", base)
			if err := tc.raw.Set(ctx, lockKey(stolen), "thief", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			for i, req := range map[int]backend.Request{
				4: {Kind: backend.Shared},
				5: {Kind: backend.Permit, Limit: 2, Weight: 1},
			} {
				req.Key, req.Token, req.TTL = fmt.Sprintf("%s/%d", base, i), "other", time.Second
				if _, err := d.TryAcquire(ctx, req); err != nil {
					t.Fatal(err)
				}
			}
			maxCalls := tc.maxCalls
			if maxCalls == 0 {
				slots := map[int]bool{}
				for i := range n {
					slots[redisconn.Slot(lockKey(fmt.Sprintf("%s/%d", base, i)))] = true
				}
				maxCalls = len(slots)
			}
			counting.calls = 0
			errs := d.RefreshBatch(ctx, locks, ttls)
			if counting.calls == 0 || counting.calls > maxCalls {
				t.Errorf("%d locks refreshed in %d script calls, want 1 to %d", n, counting.calls, maxCalls)
			}
			for i, err := range errs {
				if i == 7 {
					if !errors.Is(err, backend.ErrNotHeld) {
						t.Errorf("lock 7 (not ours): got %v, want ErrNotHeld", err)
					}
					continue
				}
				if err != nil {
					t.Errorf("lock %d: %v", i, err)
					continue
				}
				if ttl, err := locks[i].TTL(ctx); err != nil || ttl < 50*time.Second {
					t.Errorf("lock %d after a 1m refresh: TTL %v, %v", i, ttl, err)
				}
			}
			if v, _ := tc.raw.Get(ctx, lockKey(stolen)).Result(); v != "thief" {
				t.Errorf("the batch touched a lock that is not ours: value %q", v)
			}
			if ttl, _ := tc.raw.PTTL(ctx, lockKey(stolen)).Result(); ttl > time.Minute {
				t.Errorf("the batch extended a lock that is not ours: %v", ttl)
			}
			for _, i := range []int{4, 5} {
				other := &held{d: d, key: fmt.Sprintf("%s/%d", base, i), lkey: lockKey(fmt.Sprintf("%s/%d", base, i)),
					token: "other", kind: locks[i].(*held).kind}
				if ttl, err := other.TTL(ctx); err == nil && ttl > time.Second {
					t.Errorf("lock %d's other holder after the batch: TTL %v, want its own second at most", i, ttl)
				}
			}
			for _, l := range locks {
				l.Release(ctx)
			}
			tc.raw.Del(ctx, lockKey(stolen))
		})
	}
}
