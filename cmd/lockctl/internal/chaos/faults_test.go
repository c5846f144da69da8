package chaos

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/conformance"
)

func TestURLHosts(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want []string
	}{
		{"redis://127.0.0.1:6380", []string{"127.0.0.1:6380"}},
		{"redis://u:p@h1/2?ttl=5s", []string{"h1:6379"}},
		{"redlock://a:1,b,c:3", []string{"a:1", "b:6379", "c:3"}},
		{"redis+sentinel://s1,s2:26380/mymaster", []string{"s1:26379", "s2:26380"}},
		{"zk://[::1],[::1]:2182/chroot", []string{"[::1]:2181", "[::1]:2182"}},
		{"etcds://e1?cacert=/x", []string{"e1:2379"}},
		{"postgres://u@p1,p2:5433/db?target_session_attrs=read-write", []string{"p1:5432", "p2:5433"}},
		{"postgresql://[::1]/db", []string{"[::1]:5432"}},
	} {
		if got := urlHosts(tc.url); !slices.Equal(got, tc.want) {
			t.Errorf("urlHosts(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

// echoServer accepts connections on loopback and echoes what it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// echoes reports whether a connection dialled through f to addr echoes.
func echoes(t *testing.T, f *Faults, addr string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := f.dial(ctx, "tcp", addr)
	if err != nil {
		if !errors.Is(err, errCutOff) {
			t.Fatalf("dial %s: %v, want a cut-off error or none", addr, err)
		}
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("x")); err != nil {
		return false
	}
	b := make([]byte, 1)
	_, err = io.ReadFull(c, b)
	return err == nil && b[0] == 'x'
}

// TestFaults: the proxies follow the fault commands, for the servers the
// URL names (by index) and for those it does not (a master a Sentinel
// names), and for connections opened before and after a command.
func TestFaults(t *testing.T) {
	a, b, other := echoServer(t), echoServer(t), echoServer(t)
	f := &Faults{hosts: []string{a, b}, byTarget: map[string]*conformance.Proxy{}, cut: map[string]bool{}}
	defer f.Close()
	steps := []struct {
		cmd  string
		want [3]bool // a, b, other echo
	}{
		{"", [3]bool{true, true, true}},
		{"cut 1", [3]bool{true, false, true}},
		{"restore", [3]bool{true, true, true}},
		{"cut", [3]bool{false, false, false}},
		{"restore", [3]bool{true, true, true}},
		{"latency 1ms", [3]bool{true, true, true}},
	}
	for _, s := range steps {
		if s.cmd != "" {
			if err := f.apply(strings.Fields(s.cmd)); err != nil {
				t.Fatalf("%q: %v", s.cmd, err)
			}
		}
		for i, addr := range []string{a, b, other} {
			if got := echoes(t, f, addr); got != s.want[i] {
				t.Errorf("after %q: server %d echoes %v, want %v", s.cmd, i, got, s.want[i])
			}
		}
	}
	if len(f.byTarget) != 3 {
		t.Errorf("%d proxies, want one per server dialled (3)", len(f.byTarget))
	}
}

func TestFaultsBadCommands(t *testing.T) {
	f := &Faults{hosts: []string{"h:1"}, byTarget: map[string]*conformance.Proxy{}, cut: map[string]bool{}}
	for _, cmd := range []string{"cut 1", "cut x", "latency soon", "hold maybe", "restore now", "explode", ""} {
		if err := f.apply(strings.Fields(cmd)); err == nil {
			t.Errorf("%q: no error", cmd)
		}
	}
}
