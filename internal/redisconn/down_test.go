package redisconn

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker/internal/redislog"
	"github.com/distlock/locker/internal/testenv"
	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
)

// countingDialer dials addr's network for real and counts the attempts.
type countingDialer struct{ n atomic.Int32 }

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.n.Add(1)
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// TestDownServerIsNotDialledPerRequest: once a dial to the server has
// failed, requests fail at once with a *DownError that keeps the dial's
// error, without dialling, and go-redis logs nothing more; once the
// back-off has passed, one request dials (silently) to check, and when
// something listens there again, requests reach it. The clock is the
// test's, so nothing depends on how long anything takes.
func TestDownServerIsNotDialledPerRequest(t *testing.T) {
	log := redislog.Record(t)
	clients := map[string]func(addr string, d *countingDialer) Conn{
		"goredis": func(addr string, d *countingDialer) Conn {
			c := goredis.NewClient(&goredis.Options{Addr: addr, Dialer: d.dial,
				DialerRetries: 1, MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return NewGoRedis(c, false)
		},
		"redigo": func(addr string, d *countingDialer) Conn {
			p := &redigo.Pool{DialContext: func(ctx context.Context) (redigo.Conn, error) {
				return redigo.DialContext(ctx, "tcp", addr, redigo.DialContextFunc(d.dial))
			}}
			t.Cleanup(func() { p.Close() })
			return NewRedigo(p, false)
		},
	}
	for name, newConn := range clients {
		t.Run(name, func(t *testing.T) {
			addr := testenv.ClosedAddr(t)
			var d countingDialer
			c := newConn(addr, &d)
			now := time.Now()
			if g, ok := c.(*guard); ok {
				g.now = func() time.Time { return now }
			} else {
				t.Errorf("the Conn is a %T, without the down state's clock", c)
			}
			ctx := context.Background()
			logged := log.Len()

			for i := range 50 {
				_, err := c.Eval(ctx, NewScript("t", "return 1", 0), nil)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("Eval %d on a closed port: %v, want connection refused", i, err)
				}
				var down *DownError
				if i > 0 && !errors.As(err, &down) {
					t.Fatalf("Eval %d on a server found down: %v, want a *DownError", i, err)
				}
			}
			if n := d.n.Load(); n != 1 {
				t.Errorf("50 requests to a server that is down dialled it %d times, want once", n)
			}
			if name == "goredis" {
				if n := log.Len() - logged; n > 1 {
					t.Errorf("go-redis logged %d lines for 50 requests to a server that is down, want at most 1:\n%s",
						n, strings.Join(log.Since(logged), "\n"))
				}
			}
			// Every operation is turned away, not only Eval.
			if _, err := c.SetNX(ctx, "k", "v", time.Second); !isDown(err) {
				t.Errorf("SetNX: %v, want a *DownError", err)
			}
			if r := c.EvalMany(ctx, NewScript("t", "return 1", 0), []Call{{}, {}}); !isDown(r[0].Err) || !isDown(r[1].Err) {
				t.Errorf("EvalMany: %v, want a *DownError for each call", r)
			}
			if _, err := c.Subscribe(ctx); !isDown(err) {
				t.Errorf("Subscribe: %v, want a *DownError", err)
			}

			// After the back-off, one request checks, fails and doubles it.
			now = now.Add(downMin)
			if _, err := c.Eval(ctx, NewScript("t", "return 1", 0), nil); !isDown(err) {
				t.Fatalf("Eval after the back-off: %v, want a *DownError", err)
			}
			if n := d.n.Load(); n != 2 {
				t.Errorf("after the back-off the server was dialled %d times in all, want 2 (one check)", n)
			}
			now = now.Add(downMin) // half the doubled back-off: no check
			c.Eval(ctx, NewScript("t", "return 1", 0), nil)
			if n := d.n.Load(); n != 2 {
				t.Errorf("within the doubled back-off the server was dialled %d times in all, want 2", n)
			}
			if name == "goredis" {
				if n := log.Len() - logged; n > 1 {
					t.Errorf("go-redis logged %d lines, want at most 1: the checks must be silent", n)
				}
			}

			// Something listens there again: the next check finds it, and
			// the request reaches it.
			ln := testenv.ListenOn(t, addr)
			accepted := make(chan struct{}, 8)
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					accepted <- struct{}{}
					conn.Close()
				}
			}()
			now = now.Add(downMax)
			_, err := c.Eval(ctx, NewScript("t", "return 1", 0), nil)
			if isDown(err) {
				t.Fatalf("Eval once the server listens again: %v, want it sent", err)
			}
			if got := len(accepted); got < 2 {
				t.Errorf("%d connections reached the server, want the check's and the request's", got)
			}
		})
	}
}

func isDown(err error) bool {
	var down *DownError
	return errors.As(err, &down)
}

// TestIsNil: typed nils are nil; values are not.
func TestIsNil(t *testing.T) {
	var c *goredis.Client
	var u goredis.UniversalClient = c
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{nil, true}, {c, true}, {u, true}, {(*redigo.Pool)(nil), true},
		{&redigo.Pool{}, false}, {3, false}, {"", false},
	} {
		if got := IsNil(tc.v); got != tc.want {
			t.Errorf("IsNil(%T %v) = %v, want %v", tc.v, tc.v, got, tc.want)
		}
	}
}
