package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redlock"
)

// logBuffer is a slog destination that tests read while Lockers write.
type logBuffer struct{ testenv.SyncBuffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// deadNodeHarness makes clients of the nodes live, each behind proxies of
// its own (so that Crash cuts one client off), and of dead, which every
// client dials directly: it refuses connections, as a stopped server's
// port does.
func deadNodeHarness(live []string, dead string, log *slog.Logger) conformance.Harness {
	return conformance.Harness{NewClient: func(ctx context.Context) (conformance.Client, error) {
		var proxies []*conformance.Proxy
		closeAll := func() {
			for _, p := range proxies {
				p.Close()
			}
		}
		hosts := []string{dead}
		for _, h := range live {
			p, err := conformance.NewProxy(h)
			if err != nil {
				closeAll()
				return conformance.Client{}, err
			}
			proxies = append(proxies, p)
			hosts = append(hosts, p.Addr())
		}
		// The dead node in the middle of the list.
		hosts[0], hosts[2] = hosts[2], hosts[0]
		l, err := locker.Open(ctx, "redlock://"+strings.Join(hosts, ","), locker.WithLogger(log))
		if err != nil {
			closeAll()
			return conformance.Client{}, err
		}
		return conformance.Client{
			Locker: l,
			Crash: func() {
				for _, p := range proxies {
					p.Cut()
				}
			},
			Cleanup: closeAll,
		}, nil
	}}
}

// TestDeadNodeConformance runs the suite with one of five nodes refusing
// connections, at the default node timeout: the dead node must cost no
// round its timeout (waiter-gets-full-ttl and refresh-extends fail when
// it does), and the logs must name it.
func TestDeadNodeConformance(t *testing.T) {
	srv, _ := nodes(t, 5)
	dead := srv[4]
	dead.Stop()
	var live []string
	for _, s := range srv[:4] {
		live = append(live, s.Addr())
	}
	var logs logBuffer
	conformance.Run(t, deadNodeHarness(live, dead.Addr(), logs.logger()))
	if want := "node=" + dead.Addr(); !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "node skipped") {
		t.Errorf("logs do not say that node %s was skipped (want %q and %q):\n%s", dead.Addr(), "node skipped", want, logs.String())
	}
}

// TestDeadNodeComesBack: a node that refuses connections is skipped after
// a few failures, errors name it and say why, and once it answers again
// it is used again.
func TestDeadNodeComesBack(t *testing.T) {
	srv, url := nodes(t, 5)
	var logs logBuffer
	l, err := locker.Open(context.Background(), url, locker.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	dead := srv[2]
	dead.Stop()
	// Each TryAcquire+Release asks every node twice.
	for i := range 2 {
		lk, err := l.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("TryAcquire %d with 4 of 5 nodes up: %v", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release %d with 4 of 5 nodes up: %v", i, err)
		}
	}
	if want := "node skipped after failing repeatedly"; !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "node="+dead.Addr()) {
		t.Fatalf("after 4 failed requests to %s, the logs do not say %q naming it:\n%s", dead.Addr(), want, logs.String())
	}

	// With two more down there is no majority: the error names all three,
	// the skipped one with the reason it is skipped.
	srv[0].Stop()
	srv[4].Stop()
	_, err = l.TryAcquire(ctx, "k")
	if err == nil || errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire with 2 of 5 nodes up: %v, want an error naming the nodes down", err)
	}
	for _, s := range []*testenv.Redis{srv[0], dead, srv[4]} {
		if !strings.Contains(err.Error(), s.Addr()+": ") {
			t.Errorf("TryAcquire: %v; want it to name the node down %s", err, s.Addr())
		}
	}
	if want := dead.Addr() + ": not asked: it failed"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("TryAcquire: %v; want %q and the last failure, connection refused", err, want)
	}
	srv[0].Start()
	srv[4].Start()

	// Back: the prober finds it, and a lock is then taken there too.
	dead.Start()
	c := goredis.NewClient(&goredis.Options{Addr: dead.Addr()})
	defer c.Close()
	logged := false
	testenv.WaitFor(t, 30*time.Second, "lock taken on the node that came back", func() bool {
		lk, err := l.TryAcquire(ctx, "k")
		if err != nil {
			// The clients of the nodes just restarted found them down,
			// and turn requests away until a check, at most 5s later,
			// finds them up.
			if !logged {
				t.Logf("TryAcquire just after the restarts: %v", err)
				logged = true
			}
			return false
		}
		defer lk.Release(ctx)
		v, _ := c.Get(ctx, "redlock:{k:k}").Result()
		return v == lk.Token()
	})
	if want := "node answers again"; !strings.Contains(logs.String(), want) {
		t.Errorf("logs do not say %q:\n%s", want, logs.String())
	}
}

// TestFewNodes: fewer than three nodes is an error naming the parameter
// that allows it; with the parameter, one or two nodes work.
func TestFewNodes(t *testing.T) {
	testenv.WantOpenErrors(t, [][2]string{
		{"redlock://127.0.0.1:1", "1 node(s) given, fewer than the 3"},
		{"redlock://127.0.0.1:1,127.0.0.1:2", "allow_few_nodes=true"},
		{"redlock://127.0.0.1:1,127.0.0.1:2?client=redigo", "allow_few_nodes=true"},
		{"redlock://127.0.0.1:1,127.0.0.1:2?allow_few_nodes=maybe", "allow_few_nodes"},
	})
	srv, url := nodes(t, 2)
	for _, u := range []string{url, "redlock://" + srv[0].Addr()} {
		l := mustOpen(t, u+"?allow_few_nodes=true")
		lk, err := l.TryAcquire(context.Background(), "k")
		if err != nil {
			t.Fatalf("%s: TryAcquire: %v", u, err)
		}
		if err := lk.Release(context.Background()); err != nil {
			t.Fatalf("%s: Release: %v", u, err)
		}
	}
	var cs []goredis.UniversalClient
	for _, s := range srv {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		defer c.Close()
		cs = append(cs, c)
	}
	if l, err := redlock.New(cs, nil); err == nil || !strings.Contains(err.Error(), "Options.AllowFewNodes") {
		if l != nil {
			l.Close()
		}
		t.Errorf("New with 2 clients: %v, want an error naming Options.AllowFewNodes", err)
	}
	l, err := redlock.New(cs, &redlock.Options{AllowFewNodes: true})
	if err != nil {
		t.Fatalf("New with 2 clients and AllowFewNodes: %v", err)
	}
	l.Close()
}
