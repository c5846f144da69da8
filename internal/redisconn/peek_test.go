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

// TestSetNXAndPeek runs SetNX and Peek on both client libraries against
// the server: what the redis backend's TryAcquire reads when SET NX finds
// the key taken.
func TestSetNXAndPeek(t *testing.T) {
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
			key := fmt.Sprintf("peek/%s/%d", name, time.Now().UnixNano())

			if v, n, err := c.Peek(ctx, key); err != nil || v != "" || n != -2 {
				t.Fatalf("Peek of a missing key = %q, %d, %v; want \"\", -2", v, n, err)
			}
			if set, err := c.SetNX(ctx, key, "a", time.Minute); err != nil || !set {
				t.Fatalf("SetNX of a missing key = %v, %v; want set", set, err)
			}
			if set, err := c.SetNX(ctx, key, "b", time.Minute); err != nil || set {
				t.Fatalf("SetNX of a taken key = %v, %v; want not set", set, err)
			}
			v, n, err := c.Peek(ctx, key)
			if err != nil || v != "a" || n <= 0 || n > time.Minute.Milliseconds() {
				t.Fatalf("Peek of a key set for a minute = %q, %d, %v; want \"a\" and its TTL in (0, 60000]", v, n, err)
			}
			s := NewScript("persist", "redis.call('PERSIST', KEYS[1]) return 1", 1)
			if _, err := c.Eval(ctx, s, []string{key}); err != nil {
				t.Fatal(err)
			}
			if v, n, err := c.Peek(ctx, key); err != nil || v != "a" || n != -1 {
				t.Fatalf("Peek of a key without a TTL = %q, %d, %v; want \"a\", -1", v, n, err)
			}
			del := NewScript("del", "return redis.call('DEL', KEYS[1])", 1)
			if _, err := c.Eval(ctx, del, []string{key}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
