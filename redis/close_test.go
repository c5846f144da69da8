package redis_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redislog"
	"github.com/distlock/locker/internal/testenv"
)

// gate is a loopback TCP forwarder to a server that a test can take down
// (connections dropped, the port closed: dials are refused) and then
// listen on again, counting the connections that arrive.
type gate struct {
	t       *testing.T
	target  string
	addr    string
	mu      sync.Mutex
	ln      net.Listener
	conns   []net.Conn
	forward bool
	accepts atomic.Int64
	wg      sync.WaitGroup
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, target: target, addr: ln.Addr().String()}
	g.serve(ln, true)
	t.Cleanup(g.close)
	return g
}

func (g *gate) serve(ln net.Listener, forward bool) {
	g.mu.Lock()
	g.ln, g.forward = ln, forward
	g.mu.Unlock()
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.accepts.Add(1)
			g.mu.Lock()
			if !g.forward {
				g.mu.Unlock()
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", g.target)
			if err != nil {
				g.mu.Unlock()
				c.Close()
				continue
			}
			g.conns = append(g.conns, c, up)
			g.mu.Unlock()
			g.wg.Go(func() { io.Copy(up, c); up.Close() })
			g.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
}

// down drops every connection and closes the port.
func (g *gate) down() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ln.Close()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
}

// listen opens the port again, accepting and counting connections
// without forwarding them.
func (g *gate) listen() {
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("listen on %s again: %v", g.addr, err)
	}
	g.accepts.Store(0)
	g.serve(ln, false)
}

func (g *gate) close() {
	g.down()
	g.wg.Wait()
}

// TestNoDialAfterClose: a Locker whose server went down while it held a
// lock and had a waiter subscribed keeps trying to reach it; once Close
// returns, nothing of the Locker dials the server again, and go-redis logs
// no more dial failures of its own. The gate counts connections after Close on the server's
// port; for Sentinel the gates stand in front of the Sentinels.
func TestNoDialAfterClose(t *testing.T) {
	log := redislog.Record(t)
	single := testenv.Get(t, testenv.RedisURL)
	sentinel := testenv.Get(t, testenv.RedisSentinelURL)
	cases := map[string]struct {
		targets []string
		url     func(addrs []string) string
	}{
		"goredis": {[]string{hostOf(t, single)}, func(a []string) string { return "redis://" + a[0] }},
		"redigo":  {[]string{hostOf(t, single)}, func(a []string) string { return "redis://" + a[0] + "?client=redigo" }},
		"sentinel": {strings.Split(hostOf(t, sentinel), ","), func(a []string) string {
			return "redis+sentinel://" + strings.Join(a, ",") + "/locker"
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var gates []*gate
			var addrs []string
			for _, target := range tc.targets {
				g := newGate(t, target)
				gates = append(gates, g)
				addrs = append(addrs, g.addr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			holder, err := locker.Open(ctx, single)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			l, err := locker.Open(ctx, tc.url(addrs))
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("no-dial-after-close/%s/%d", name, time.Now().UnixNano())
			if _, err := l.Acquire(ctx, key+"/mine", locker.WithTTL(time.Second)); err != nil {
				t.Fatal(err)
			}
			busy, err := holder.Acquire(ctx, key, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Release(ctx)
			waiting := make(chan error, 1)
			go func() {
				_, err := l.Acquire(ctx, key)
				waiting <- err
			}()
			time.Sleep(200 * time.Millisecond) // the waiter subscribes
			for _, g := range gates {
				g.down()
			}
			// The watchdog, the waiter and the subscriber retry meanwhile.
			time.Sleep(1500 * time.Millisecond)
			l.Close()
			<-waiting
			logged := log.Len()
			for _, g := range gates {
				g.listen()
			}
			// Longer than every retry interval: the subscriber's backoff
			// (at most 1 s) and go-redis's redial loop (1 s).
			time.Sleep(2500 * time.Millisecond)
			for _, g := range gates {
				if n := g.accepts.Load(); n != 0 {
					t.Errorf("%d connections to %s after Close", n, g.addr)
				}
			}
			// A dial go-redis had in flight at Close ends at once, but its
			// goroutine, which Close cannot wait for, may still log that
			// it failed: with the gate's error, never a network one.
			for _, line := range log.Since(logged) {
				if !strings.Contains(line, "client closed by its Locker") {
					t.Errorf("go-redis logged after Close: %q", line)
				}
			}
		})
	}
}
