package redisconn

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/internal/testenv"
)

// TestTake runs Take on both client libraries against the server: a free
// key is taken; our own token already there counts as taken, with its
// TTL set afresh (a SET sent again after a broken connection); another's
// answers with its remaining TTL; a key without a TTL with 0.
func TestTake(t *testing.T) {
	u, err := url.Parse(testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	conns := map[string]func() Conn{
		"goredis": func() Conn { return NewGoRedis(goredis.NewClient(&goredis.Options{Addr: u.Host}), true) },
		"redigo": func() Conn {
			return NewRedigo(&redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", u.Host) }}, true)
		},
	}
	for name, open := range conns {
		t.Run(name, func(t *testing.T) {
			c := open()
			defer c.Close()
			ctx := context.Background()
			key := fmt.Sprintf("take/%s/%d", name, time.Now().UnixNano())
			defer c.Eval(ctx, NewScript("del", "return redis.call('DEL', KEYS[1])", 1), []string{key})
			pttl := func() int64 {
				n, err := EvalInt(ctx, c, PTTLScript, []string{key}, "a")
				if err != nil {
					t.Fatal(err)
				}
				return n
			}

			if g, err := Take(ctx, c, key, "a", time.Second); err != nil || !g.Taken {
				t.Fatalf("Take of a free key = %+v, %v; want it taken", g, err)
			}
			if g, err := Take(ctx, c, key, "a", time.Minute); err != nil || !g.Taken {
				t.Fatalf("Take with the holder's own token = %+v, %v; want it taken", g, err)
			}
			if n := pttl(); n <= time.Second.Milliseconds() {
				t.Fatalf("the key's TTL after Take with its own token = %d ms, want the new TTL (a minute)", n)
			}
			g, err := Take(ctx, c, key, "b", time.Minute)
			if err != nil || g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
				t.Fatalf("Take of a key another token holds = %+v, %v; want busy for its remaining TTL, in (0, 1m]", g, err)
			}
			if _, err := c.Eval(ctx, NewScript("persist", "return redis.call('PERSIST', KEYS[1])", 1), []string{key}); err != nil {
				t.Fatal(err)
			}
			if g, err := Take(ctx, c, key, "b", time.Minute); err != nil || g.Taken || g.Mismatch != nil || g.Remaining != 0 {
				t.Fatalf("Take of a key without a TTL = %+v, %v; want busy for an unknown time", g, err)
			}
		})
	}
}
