package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// TestRefreshBatch checks the pipelined refresh the watchdog uses, on both
// client libraries: every lock still ours is extended, and a lock that is
// not ours any more is reported as such without touching it.
func TestRefreshBatch(t *testing.T) {
	u, err := url.Parse(testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	gc := goredis.NewClient(&goredis.Options{Addr: u.Host})
	defer gc.Close()
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", u.Host) }}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, c := range map[string]redisconn.Conn{"goredis": redisconn.NewGoRedis(gc, false), "redigo": redisconn.NewRedigo(pool, false)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			d := newDriver(c, log, wakePubSub)
			defer d.Close()
			base := fmt.Sprintf("batch/%s/%d", name, time.Now().UnixNano())
			var locks []backend.Held
			var ttls []time.Duration
			for i := range 50 {
				acq, err := d.TryAcquire(ctx, backend.Request{Key: fmt.Sprintf("%s/%d", base, i), Token: fmt.Sprint("t", i), TTL: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				locks = append(locks, acq.Held)
				ttls = append(ttls, time.Minute)
			}
			// Lock 7 changes hands behind its holder's back.
			stolen := fmt.Sprintf("%s/7", base)
			if err := gc.Set(ctx, lockKey(stolen), "thief", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			errs := d.RefreshBatch(ctx, locks, ttls)
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
			if v, _ := gc.Get(ctx, lockKey(stolen)).Result(); v != "thief" {
				t.Errorf("the batch touched a lock that is not ours: value %q", v)
			}
			if ttl, _ := gc.PTTL(ctx, lockKey(stolen)).Result(); ttl > time.Minute {
				t.Errorf("the batch extended a lock that is not ours: %v", ttl)
			}
			for _, l := range locks {
				l.Release(ctx)
			}
			gc.Del(ctx, lockKey(stolen))
		})
	}
}
