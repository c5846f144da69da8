package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/inspecttest"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// inspectBackend is the redis backend as inspecttest runs it. A holder
// learns of a forced release at its next refresh, a third of the TTL on.
func inspectBackend(open func(t testing.TB) locker.Locker) inspecttest.Backend {
	return inspecttest.Backend{
		Open:       open,
		TTL:        1500 * time.Millisecond,
		Token:      true,
		TTLKnown:   true,
		LostWithin: 15 * time.Second,
	}
}

// openURL returns an opener of Lockers from raw.
func openURL(raw string) func(t testing.TB) locker.Locker {
	return func(t testing.TB) locker.Locker {
		t.Helper()
		l, err := locker.Open(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

func TestInspect(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	addr := hostOf(t, raw)
	for _, c := range []struct {
		name string
		open func(t testing.TB) locker.Locker
	}{
		{"URL", openURL(raw)},
		{"URL-redigo", openURL(raw + "?client=redigo")},
		{"New", func(t testing.TB) locker.Locker {
			c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l, err := redis.New(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
		{"NewRedigo", func(t testing.TB) locker.Locker {
			p := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) }}
			t.Cleanup(func() { p.Close() })
			l, err := redis.NewRedigo(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			return l
		}},
	} {
		t.Run(c.name, func(t *testing.T) { inspecttest.Run(t, inspectBackend(c.open)) })
	}
}

func TestInspectCluster(t *testing.T) {
	inspecttest.Run(t, inspectBackend(openURL(testenv.Get(t, testenv.RedisClusterURL))))
}

// TestInspectDetail: Detail names the server keys, and a free key whose
// fence counter is left shows the last holder's fence.
func TestInspectDetail(t *testing.T) {
	l := openURL(testenv.Get(t, testenv.RedisURL))(t)
	defer l.Close()
	key := inspecttest.Key(t)
	lk := inspecttest.Acquire(t, l, key, time.Minute)
	h := inspecttest.Inspect(t, l, key)
	if h.Detail["redis key"] != redis.LockKey(key) || h.Detail["redis fence key"] != redis.LockKey(key)+":fence" || h.Detail["key"] != "" {
		t.Errorf("Detail = %q, want the lock key %q and its fence key", h.Detail, redis.LockKey(key))
	}
	if h.TTL <= 50*time.Second {
		t.Errorf("Holder.TTL = %v just after acquiring for a minute", h.TTL)
	}
	fence, _ := lk.Fence()
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	h = inspecttest.Inspect(t, l, key)
	if h.Held || h.Fenced || h.Detail["last fence"] != strconv.FormatUint(fence, 10) {
		t.Errorf("Inspect after Release = %+v, want free, last fence %d", h, fence)
	}
}

// TestForceReleasePublishes: ForceRelease publishes the release notice
// that waiters subscribe to, as a release does.
func TestForceReleasePublishes(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	l := openURL(raw)(t)
	defer l.Close()
	key := inspecttest.Key(t)
	inspecttest.Acquire(t, l, key, time.Minute)

	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, raw)})
	defer c.Close()
	sub := c.Subscribe(ctx, redis.LockKey(key)+":released")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if !inspecttest.ForceRelease(t, l, key) {
		t.Fatal("ForceRelease of a held key reported nothing released")
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sub.ReceiveMessage(rctx); err != nil {
		t.Fatalf("no release notice after ForceRelease: %v", err)
	}
}
