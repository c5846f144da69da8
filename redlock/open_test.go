package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redislog"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redlock"
)

// openers open a Locker on the nodes at addrs in each way there is: a
// URL with either client library, and the typed constructors.
func openers(t *testing.T, log *slog.Logger) map[string]func(addrs []string) (locker.Locker, error) {
	return map[string]func(addrs []string) (locker.Locker, error){
		"url": func(addrs []string) (locker.Locker, error) {
			return locker.Open(context.Background(), "redlock://"+strings.Join(addrs, ","), locker.WithLogger(log))
		},
		"url-redigo": func(addrs []string) (locker.Locker, error) {
			return locker.Open(context.Background(), "redlock://"+strings.Join(addrs, ",")+"?client=redigo", locker.WithLogger(log))
		},
		"New": func(addrs []string) (locker.Locker, error) {
			var cs []goredis.UniversalClient
			for _, a := range addrs {
				c := goredis.NewClient(&goredis.Options{Addr: a, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
				t.Cleanup(func() { c.Close() })
				cs = append(cs, c)
			}
			return redlock.New(cs, &redlock.Options{Config: locker.Config{Logger: log}})
		},
		"NewRedigo": func(addrs []string) (locker.Locker, error) {
			var ps []*redigo.Pool
			for _, a := range addrs {
				p := &redigo.Pool{DialContext: func(ctx context.Context) (redigo.Conn, error) {
					return redigo.DialContext(ctx, "tcp", a)
				}}
				t.Cleanup(func() { p.Close() })
				ps = append(ps, p)
			}
			return redlock.NewRedigo(ps, &redlock.Options{Config: locker.Config{Logger: log}})
		},
	}
}

// TestOpenWithoutMajority: with fewer than a majority of nodes answering,
// no lock can ever be taken, so Open fails (as every other backend does
// when it cannot reach its servers) with an error that names each node
// that did not answer and why; the typed constructors do the same. With
// a majority answering, Open succeeds and warns, through the logger
// given, naming each node down.
func TestOpenWithoutMajority(t *testing.T) {
	redislog.Record(t) // the failed dials at Open, off the test's output
	down := testenv.ClosedAddrs(t, 3)
	quiet := slog.New(slog.DiscardHandler)
	for name, open := range openers(t, quiet) {
		t.Run(name+"/none", func(t *testing.T) {
			l, err := open(down)
			if err == nil {
				l.Close()
				t.Fatalf("open with none of 3 nodes answering succeeded, want an error")
			}
			if want := "only 0 of 3 nodes answered"; !strings.Contains(err.Error(), want) {
				t.Errorf("open: %v; want %q", err, want)
			}
			for _, a := range down {
				if !strings.Contains(err.Error(), a+": ") {
					t.Errorf("open: %v; want it to name the node down %s", err, a)
				}
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("open: %v; want errors.Is ECONNREFUSED", err)
			}
		})
	}

	srv, _ := nodes(t, 3)
	var up []string
	for _, s := range srv {
		up = append(up, s.Addr())
	}
	for name, open := range openers(t, quiet) {
		t.Run(name+"/2-of-5", func(t *testing.T) {
			l, err := open(append(up[:2:2], down...))
			if err == nil {
				l.Close()
				t.Fatalf("open with 2 of 5 nodes answering succeeded, want an error")
			}
			if want := "only 2 of 5 nodes answered, fewer than the majority of 3"; !strings.Contains(err.Error(), want) {
				t.Errorf("open: %v; want %q", err, want)
			}
		})
		t.Run(name+"/3-of-5", func(t *testing.T) {
			var logs logBuffer
			l, err := openers(t, logs.logger())[name](append(up[:3:3], down[:2]...))
			if err != nil {
				t.Fatalf("open with 3 of 5 nodes answering: %v, want a Locker", err)
			}
			defer l.Close()
			lk, err := l.TryAcquire(context.Background(), "open-3-of-5/"+name)
			if err != nil {
				t.Fatalf("TryAcquire with 3 of 5 nodes up: %v", err)
			}
			lk.Release(context.Background())
			for _, a := range down[:2] {
				if want := "node unreachable at open"; !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), a) {
					t.Errorf("the logger given does not say %q naming %s:\n%s", want, a, logs.String())
				}
			}
		})
	}
}

// TestNewNil: the typed constructors refuse a nil element, typed nils
// included, with an error that names it, instead of a panic.
func TestNewNil(t *testing.T) {
	ok := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer ok.Close()
	okPool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return nil, errors.New("not dialled in this test") }}
	for _, tc := range []struct {
		name string
		new  func() (locker.Locker, error)
		want string
	}{
		{"New(nil)", func() (locker.Locker, error) { return redlock.New(nil, nil) }, "no nodes given"},
		{"New(nil element)", func() (locker.Locker, error) {
			return redlock.New([]goredis.UniversalClient{ok, nil, ok}, nil)
		}, "redlock: New: client 1 is nil"},
		{"New(nil *Client)", func() (locker.Locker, error) {
			return redlock.New([]goredis.UniversalClient{ok, ok, (*goredis.Client)(nil)}, nil)
		}, "client 2 is a nil *redis.Client"},
		{"New(nil *ClusterClient)", func() (locker.Locker, error) {
			return redlock.New([]goredis.UniversalClient{(*goredis.ClusterClient)(nil), ok, ok}, nil)
		}, "client 0 is a nil *redis.ClusterClient"},
		{"NewRedigo(nil)", func() (locker.Locker, error) { return redlock.NewRedigo(nil, nil) }, "no nodes given"},
		{"NewRedigo(nil element)", func() (locker.Locker, error) {
			return redlock.NewRedigo([]*redigo.Pool{okPool, okPool, nil}, nil)
		}, "redlock: NewRedigo: pool 2 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.WantNewError(t, tc.name, tc.new, tc.want)
		})
	}
}

// defaultLog records what goes to slog.Default() during one test.
type defaultLog struct{ logBuffer }

func recordDefaultLog(t *testing.T) *defaultLog {
	d := &defaultLog{}
	old := slog.Default()
	slog.SetDefault(d.logger())
	t.Cleanup(func() { slog.SetDefault(old) })
	return d
}

// TestLogsOnlyToTheLoggerGiven: what the Locker logs, from Open's
// warnings to a node being skipped, goes to the logger given and nothing
// to slog.Default(), however the Locker was made.
func TestLogsOnlyToTheLoggerGiven(t *testing.T) {
	def := recordDefaultLog(t)
	srv, _ := nodes(t, 4)
	dead := testenv.ClosedAddrs(t, 1)[0]
	addrs := []string{srv[0].Addr(), srv[1].Addr(), dead, srv[2].Addr(), srv[3].Addr()}
	for name := range openers(t, nil) {
		t.Run(name, func(t *testing.T) {
			var logs logBuffer
			l, err := openers(t, logs.logger())[name](addrs)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for i := range 4 { // enough failures for the dead node to be skipped
				lk, err := l.TryAcquire(context.Background(), fmt.Sprintf("logs-to-logger/%s/%d", name, i))
				if err != nil {
					t.Fatal(err)
				}
				lk.Release(context.Background())
			}
			for _, want := range []string{"node unreachable at open", "node skipped"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the logger given does not say %q:\n%s", want, logs.String())
				}
			}
		})
	}
	if s := def.String(); s != "" {
		t.Errorf("slog.Default() got lines although a logger was given:\n%s", s)
	}
}

// TestDownNodesLogRarely: with a majority of nodes down after Open, every
// request asks every node (skipping them would cost a majority they might
// give), yet nodes known to be down are not dialled per request, so
// go-redis's process-wide logger gets a line or two per node for the
// outage, not one per request.
func TestDownNodesLogRarely(t *testing.T) {
	log := redislog.Record(t)
	srv, url := nodes(t, 5)
	l, err := locker.Open(context.Background(), url, locker.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lk, err := l.TryAcquire(ctx, "down-nodes")
	if err != nil {
		t.Fatal(err)
	}
	lk.Release(ctx)
	for _, s := range srv[:3] {
		s.Stop()
	}
	const requests = 30
	for i := range requests {
		if _, err := l.TryAcquire(ctx, "down-nodes"); err == nil || errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryAcquire %d with 2 of 5 nodes up: %v, want an error naming the nodes down", i, err)
		}
	}
	for _, s := range srv[:3] {
		if lines := log.About(s.Addr()); len(lines) > 2 {
			t.Errorf("go-redis logged %d lines about %s for %d requests while it was down, want at most 2:\n%s",
				len(lines), s.Addr(), requests, strings.Join(lines, "\n"))
		}
	}
}
