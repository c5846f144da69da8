package conformance

import (
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// echoServer echoes every byte it reads and reports it on the returned
// channel, so a test knows what reached the server. After echoing a '.'
// it closes the connection.
func echoServer(t *testing.T) (addr string, got <-chan byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan byte, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 1)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
					ch <- b[0]
					if _, err := c.Write(b); err != nil || b[0] == '.' {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), ch
}

func roundTrip(t *testing.T, c net.Conn, b byte) byte {
	t.Helper()
	if _, err := c.Write([]byte{b}); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 1)
	if _, err := io.ReadFull(c, r); err != nil {
		t.Fatal(err)
	}
	return r[0]
}

// sendSeen writes b to c and waits until the server has read it.
func sendSeen(t *testing.T, c net.Conn, got <-chan byte, b byte) {
	t.Helper()
	if _, err := c.Write([]byte{b}); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != b {
		t.Fatalf("the server read %q, want %q", r, b)
	}
}

// wantEnded fails unless c's stream ends without data; what names c.
func wantEnded(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n > 0 {
		t.Fatalf("%s carried data", what)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s was not closed", what)
	}
}

func TestProxy(t *testing.T) {
	addr, got := echoServer(t)
	p, err := NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Target() != addr {
		t.Fatalf("Target() = %q, want %q", p.Target(), addr)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := roundTrip(t, c, 'a'); r != 'a' || <-got != 'a' {
		t.Fatalf("echo through the proxy: got %q", r)
	}

	// HoldReplies: the request arrives, its reply waits in the proxy until
	// released. The server ends the connection after its reply to '.', so
	// a reply that was not held would reach the client at once.
	p.HoldReplies(true)
	sendSeen(t, c, got, '.')
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := c.Read(make([]byte, 1)); n > 0 {
		t.Fatal("a reply came through while replies were held")
	}
	p.HoldReplies(false)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "." {
		t.Fatalf("after HoldReplies(false) the client read %q, %v; want the held reply and the end of the stream", b, err)
	}

	// Cut while holding: the held reply is lost with the connection, and
	// new connections are refused until Restore.
	p.HoldReplies(true)
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendSeen(t, c, got, 'b')
	p.Cut()
	p.HoldReplies(false)
	wantEnded(t, c, "the connection cut while its reply was held")
	if c2, err := net.Dial("tcp", p.Addr()); err == nil {
		wantEnded(t, c2, "a connection made while cut")
		c2.Close()
	}
	p.Restore()
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r := roundTrip(t, c, 'c'); r != 'c' || <-got != 'c' {
		t.Fatalf("echo after Restore: got %q", r)
	}
}

// TestProxyConnLatency checks that SetConnLatency delays connections and
// directions independently: a request sent first on a slow connection
// reaches the server after one sent later on a fast one.
func TestProxyConnLatency(t *testing.T) {
	addr, got := echoServer(t)
	p, err := NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Connections are numbered in the order the proxy accepted them: a
	// round trip on the first before dialling the second fixes the order.
	var conns [2]net.Conn
	for i := range conns {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if r := roundTrip(t, c, 'o'); r != 'o' || <-got != 'o' {
			t.Fatalf("echo on connection %d: got %q", i+1, r)
		}
		conns[i] = c
	}
	const slow = time.Second
	p.SetConnLatency(func(conn uint64, dir Direction) time.Duration {
		if (conn == 1 && dir == Requests) || (conn == 2 && dir == Replies) {
			return slow
		}
		return 0
	})

	start := time.Now()
	for i, b := range []byte{'a', 'b'} {
		if _, err := conns[i].Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if first, second := <-got, <-got; first != 'b' || second != 'a' {
		t.Fatalf("the server read %q then %q; want 'b' (fast requests) before 'a' (slow requests)", first, second)
	}
	if d := time.Since(start); d < slow {
		t.Errorf("the slow connection's request reached the server after %v, want at least %v", d, slow)
	}
	// The reply to 'b' was held up on its way back: it arrives a delay
	// after its request reached the server, which was at once.
	r := make([]byte, 1)
	if _, err := io.ReadFull(conns[1], r); err != nil || r[0] != 'b' {
		t.Fatalf("reply on the second connection: %q, %v", r, err)
	}
	if d := time.Since(start); d < slow {
		t.Errorf("the reply on the connection with slow replies came after %v, want at least %v", d, slow)
	}
	if _, err := io.ReadFull(conns[0], r); err != nil || r[0] != 'a' {
		t.Fatalf("reply on the first connection: %q, %v", r, err)
	}

	p.SetConnLatency(nil)
	start = time.Now()
	if r := roundTrip(t, conns[0], 'c'); r != 'c' || <-got != 'c' {
		t.Fatalf("echo after SetConnLatency(nil): got %q", r)
	}
	if d := time.Since(start); d >= slow {
		t.Errorf("a round trip after SetConnLatency(nil) took %v, want less than the %v removed", d, slow)
	}
}

// TestProxyURL checks that ProxyURL puts a proxy in front of every host
// and keeps the rest of the URL.
func TestProxyURL(t *testing.T) {
	a, _ := echoServer(t)
	b, _ := echoServer(t)
	raw, proxies, err := ProxyURL("redlock://" + a + "," + b + "/2?ttl=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	if len(proxies) != 2 || proxies[0].Target() != a || proxies[1].Target() != b {
		t.Fatalf("ProxyURL made proxies %v, want one to %s and one to %s", proxies, a, b)
	}
	if want := "redlock://" + proxies[0].Addr() + "," + proxies[1].Addr() + "/2?ttl=1s"; raw != want {
		t.Errorf("ProxyURL returned %q, want %q", raw, want)
	}
	if _, _, err := ProxyURL("::"); err == nil {
		t.Error("ProxyURL accepted a malformed URL")
	}
}

// TestProxyURLHosts checks that ProxyURL reads hosts as locker.Open
// does: lists url.Parse refuses (a host without a port beside one with,
// IPv6 addresses), a user part, and the usual port of each scheme for a
// host that names none.
func TestProxyURLHosts(t *testing.T) {
	tests := []struct {
		raw     string
		targets []string
		rest    string // what follows the hosts, kept as it is
	}{
		{"zookeeper://h1,h2:2182/chroot/x", []string{"h1:2181", "h2:2182"}, "/chroot/x"},
		{"zk://127.0.0.2", []string{"127.0.0.2:2181"}, ""},
		{"redis://user:p%40ss@h1:7000,h2/0?client=redigo", []string{"h1:7000", "h2:6379"}, "/0?client=redigo"},
		{"rediss+sentinel://s1,s2:5000/mymaster?sentinel_password=x", []string{"s1:26379", "s2:5000"}, "/mymaster?sentinel_password=x"},
		{"redlock://[::1]:7001,[::1],[::1]:7003", []string{"[::1]:7001", "[::1]:6379", "[::1]:7003"}, ""},
		{"etcds://e1,e2,e3?cacert=/ca.pem", []string{"e1:2379", "e2:2379", "e3:2379"}, "?cacert=/ca.pem"},
		{"ETCD://e1#frag", []string{"e1:2379"}, "#frag"},
		{"postgres://user:p%40ss@db1,db2:5433/app?sslmode=disable", []string{"db1:5432", "db2:5433"}, "/app?sslmode=disable"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, proxies, err := ProxyURL(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, p := range proxies {
					p.Close()
				}
			}()
			var targets, addrs []string
			for _, p := range proxies {
				targets = append(targets, p.Target())
				addrs = append(addrs, p.Addr())
			}
			if !slices.Equal(targets, tt.targets) {
				t.Errorf("proxies to %v, want %v", targets, tt.targets)
			}
			scheme, _, _ := strings.Cut(tt.raw, "://")
			user := ""
			if strings.Contains(tt.raw, "@") {
				user = "user:p%40ss@"
			}
			if want := strings.ToLower(scheme) + "://" + user + strings.Join(addrs, ",") + tt.rest; got != want {
				t.Errorf("ProxyURL = %q, want %q", got, want)
			}
		})
	}
	for _, bad := range []struct{ raw, want string }{
		{"custom://h1", `host "h1" has no port, and custom:// has no default port known here`},
		{"redis://h1:6379,::1", `host "::1"`},
		{"redis://h1:x", `host "h1:x" is not host[:port]`},
		{"no-scheme", "malformed URL"},
	} {
		if _, _, err := ProxyURL(bad.raw); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ProxyURL(%q) = %v, want an error saying %q", bad.raw, err, bad.want)
		}
	}
	if got, proxies, err := ProxyURL("memory://name?prefix=p"); err != nil || got != "memory://name?prefix=p" || len(proxies) != 0 {
		t.Errorf("ProxyURL(memory://name) = %q, %d proxies, %v; want it as it is, with none", got, len(proxies), err)
	}
}
