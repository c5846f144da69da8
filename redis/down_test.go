package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redislog"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

// TestNewNil: every constructor refuses a nil client or pool, typed nils
// in the interface included, with an error that says so, instead of a
// panic in a goroutine of the eviction check that the caller cannot
// recover.
func TestNewNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() (locker.Locker, error)
		want string
	}{
		{"New(nil)", func() (locker.Locker, error) { return redis.New(nil, nil) }, "redis: New: the client is nil"},
		{"New(nil *Client)", func() (locker.Locker, error) { return redis.New((*goredis.Client)(nil), nil) }, "the client is a nil *redis.Client"},
		{"New(nil *ClusterClient)", func() (locker.Locker, error) { return redis.New((*goredis.ClusterClient)(nil), nil) }, "the client is a nil *redis.ClusterClient"},
		{"New(nil *Ring)", func() (locker.Locker, error) { return redis.New((*goredis.Ring)(nil), &redis.Options{}) }, "the client is a nil *redis.Ring"},
		{"NewRedigo(nil)", func() (locker.Locker, error) { return redis.NewRedigo(nil, nil) }, "redis: NewRedigo: the pool is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.WantNewError(t, tc.name, tc.new, tc.want)
		})
	}
}

// TestServerDownLogsRarely: once it has found the server down, a Locker
// turns its requests away without dialling, so go-redis's process-wide
// logger (recorded here through go-redis's own SetLogger) gets the lines
// of the first request of the outage, not one per request; an acquire
// that never left says so,
// without claiming that a lock may have been taken; once the server is
// back, the Locker uses it again.
func TestServerDownLogsRarely(t *testing.T) {
	single := hostOf(t, testenv.Get(t, testenv.RedisURL))
	log := redislog.Record(t)
	cases := map[string]func(t *testing.T, addr string) locker.Locker{
		"url": func(t *testing.T, addr string) locker.Locker {
			l, err := locker.Open(context.Background(), "redis://"+addr, locker.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		"New": func(t *testing.T, addr string) locker.Locker {
			c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l, err := redis.New(c, &redis.Options{Config: locker.Config{Logger: slog.New(slog.DiscardHandler)}})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
	for name, open := range cases {
		t.Run(name, func(t *testing.T) {
			g := newGate(t, single)
			l := open(t, g.addr)
			defer l.Close()
			ctx := context.Background()
			key := fmt.Sprintf("server-down/%s/%d", name, time.Now().UnixNano())
			lk, err := l.TryAcquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			lk.Release(ctx)

			g.down()
			// The first request finds the server down: go-redis logs each
			// dial that fails, its retries' included (up to 4 with its
			// defaults). The others must add nothing.
			var logged int
			const requests = 30
			for i := range requests {
				if i == 1 {
					logged = log.Len()
				}
				_, err := l.TryAcquire(ctx, key)
				if err == nil || errors.Is(err, locker.ErrNotAcquired) {
					t.Fatalf("TryAcquire %d with the server down: %v, want its error", i, err)
				}
				// The first request found the server down (go-redis may
				// have sent it before its dial failed); the others never left.
				if i > 0 && strings.Contains(err.Error(), "possibly taken lock") {
					t.Fatalf("TryAcquire %d: %v; the request never left, so no lock can have been taken", i, err)
				}
			}
			if lines := log.Since(logged); len(lines) > 0 {
				t.Errorf("go-redis logged %d lines for %d requests to a server found down, want none:\n%s",
					len(lines), requests-1, strings.Join(lines, "\n"))
			}

			// Back: forwarding again on the same port.
			ln, err := net.Listen("tcp", g.addr)
			if err != nil {
				t.Skipf("cannot listen on %s again: %v", g.addr, err)
			}
			g.serve(ln, true)
			testenv.WaitFor(t, 30*time.Second, "lock taken once the server is back", func() bool {
				lk, err := l.TryAcquire(ctx, key)
				if err == nil {
					lk.Release(ctx)
				}
				return err == nil
			})
		})
	}
}

// TestRouteClientLogs: go-redis's lines go to the logger given, at Warn
// with client=go-redis; a second call changes the destination; nil means
// slog.Default(). go-redis's default logger is back after the test.
func TestRouteClientLogs(t *testing.T) {
	t.Cleanup(logging.Enable)
	closed := testenv.ClosedAddr(t)
	dialFailure := func() {
		t.Helper()
		c := goredis.NewClient(&goredis.Options{Addr: closed, DialerRetries: 1, MaxRetries: -1})
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err == nil {
			t.Fatalf("PING %s answered; want a failed dial", closed)
		}
	}
	logger := func(b *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }
	var first, second, def bytes.Buffer
	redis.RouteClientLogs(logger(&first))
	dialFailure()
	want := "level=WARN msg=\"connection pool: failed to dial"
	if !strings.Contains(first.String(), want) || !strings.Contains(first.String(), "client=go-redis") {
		t.Errorf("the logger given got %q, want a line with %q and client=go-redis", first.String(), want)
	}
	redis.RouteClientLogs(logger(&second))
	n := first.Len()
	dialFailure()
	if first.Len() != n || !strings.Contains(second.String(), want) {
		t.Errorf("after a second call: first logger got %q more, second %q; want the line in the second only", first.String()[n:], second.String())
	}
	old := slog.Default()
	slog.SetDefault(logger(&def))
	t.Cleanup(func() { slog.SetDefault(old) })
	redis.RouteClientLogs(nil)
	dialFailure()
	if !strings.Contains(def.String(), want) {
		t.Errorf("RouteClientLogs(nil): slog.Default got %q, want the line", def.String())
	}
}

// TestNewRedigoWithoutDial: a pool that is not nil but cannot dial (the
// zero Pool) is an error at New that says why, not a panic.
func TestNewRedigoWithoutDial(t *testing.T) {
	l, err := redis.NewRedigo(&redigo.Pool{}, nil)
	if err == nil {
		l.Close()
		t.Fatal("NewRedigo of a pool without Dial succeeded, want an error")
	}
	if !strings.Contains(err.Error(), "Dial") {
		t.Errorf("NewRedigo of a pool without Dial: %v, want an error naming Dial", err)
	}
}
