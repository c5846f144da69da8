package conformance

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
)

// Proxy is a loopback TCP proxy in front of one server address. Putting one
// proxy per simulated client process in front of each server lets a test cut
// that client off (a crash or a partition: its connections are dropped and
// new ones refused) without touching the server or any other client.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	cut     bool
	hold    chan struct{} // while non-nil, replies wait for it to close
	latency time.Duration
	connLat func(conn uint64, dir Direction) time.Duration // SetConnLatency's
	nconns  uint64                                         // connections accepted
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// Direction is the way data flows through a Proxy.
type Direction int

// The directions of a connection.
const (
	Requests Direction = iota // from the client to the server
	Replies                   // from the server to the client
)

// NewProxy listens on a free loopback port and forwards every connection
// to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// ProxyURL starts a Proxy for every host of the locker URL rawURL
// (redlock://h1:p1,h2:p2,... has several) and returns rawURL with each host
// replaced by its proxy's address, and the proxies in the order of the
// hosts. It reads the hosts as locker.Open does: a comma-separated list,
// each host[:port], IPv6 addresses in brackets; a host without a port
// gets the usual port of the backends of this module (6379 for redis://,
// rediss://, redlock:// and redlocks://, 26379 for redis+sentinel:// and
// rediss+sentinel://, 2181 for zookeeper:// and zk://, 2379 for etcd://
// and etcds://, 5432 for postgres:// and postgresql://), and is an error
// for other schemes. The caller closes the
// proxies. A memory:// URL is returned as it is, with no proxy: its host
// part names an in-process store, not a server.
//
// Only the connections to the hosts of the URL go through the proxies:
// a client that learns of other servers from them (Redis Cluster nodes, a
// Sentinel's master) reaches those directly. And a TLS client checks the
// server's certificate against the proxy's address, 127.0.0.1. URLHarness
// has neither limit with the backends of this module.
func ProxyURL(rawURL string) (string, []*Proxy, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		return "", nil, fmt.Errorf("conformance: malformed URL %q: want scheme://host[:port][,host[:port]...]", locker.Redact(rawURL))
	}
	scheme = strings.ToLower(scheme)
	if scheme == "memory" {
		return rawURL, nil, nil
	}
	// The authority ends at the path, query or fragment; its user part
	// ends at the last '@', as in locker.Open.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	userinfo, hosts, tail := "", rest[:end], rest[end:]
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		userinfo, hosts = hosts[:i+1], hosts[i+1:]
	}
	var (
		proxies []*Proxy
		addrs   []string
	)
	closeAll := func() {
		for _, p := range proxies {
			p.Close()
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue // locker.Open names the empty host
		}
		target, err := hostPort(scheme, h)
		if err != nil {
			closeAll()
			return "", nil, fmt.Errorf("conformance: URL %q: %w", locker.Redact(rawURL), err)
		}
		p, err := NewProxy(target)
		if err != nil {
			closeAll()
			return "", nil, err
		}
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	return scheme + "://" + userinfo + strings.Join(addrs, ",") + tail, proxies, nil
}

// defaultPorts are the ports the backends of this module give a host
// without one.
var defaultPorts = map[string]string{
	"redis": "6379", "rediss": "6379", "redlock": "6379", "redlocks": "6379",
	"redis+sentinel": "26379", "rediss+sentinel": "26379",
	"zookeeper": "2181", "zk": "2181",
	"etcd": "2379", "etcds": "2379",
	"postgres": "5432", "postgresql": "5432",
}

// hostPort returns h, a host of a URL of scheme, as host:port.
func hostPort(scheme, h string) (string, error) {
	if hu, err := url.Parse("//" + h); err != nil || hu.Host != h {
		return "", fmt.Errorf("host %q is not host[:port]", h)
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if !strings.Contains(err.Error(), "missing port") {
			return "", fmt.Errorf("host %q: %w", h, err)
		}
		var ok bool
		if port, ok = defaultPorts[scheme]; !ok {
			return "", fmt.Errorf("host %q has no port, and %s:// has no default port known here: give one", h, scheme)
		}
		host = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	}
	if host == "" || port == "" {
		return "", fmt.Errorf("host %q: want host[:port]", h)
	}
	return net.JoinHostPort(host, port), nil
}

// Addr returns the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut drops every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Restore lets connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// SetLatency delays every chunk of data forwarded in either direction by d
// (0 for none).
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// SetConnLatency delays every chunk of data forwarded by f(conn, dir) on
// top of SetLatency's delay: conn numbers the proxy's connections from 1 in
// the order they were accepted, dir says which way the chunk goes. So
// connections, and the two directions of one, can be slowed independently:
// requests a client sends on two pooled connections then reach the server
// in another order than they were sent, which no delay common to all
// connections can do. Data within one direction of one connection keeps
// its order. f is called for every chunk, from the proxy's goroutines, so
// it must be safe for concurrent use; nil removes it.
func (p *Proxy) SetConnLatency(f func(conn uint64, dir Direction) time.Duration) {
	p.mu.Lock()
	p.connLat = f
	p.mu.Unlock()
}

// HoldReplies, while on, holds back everything servers send to clients:
// requests still arrive and are applied, their replies wait in the proxy.
// Turning it off delivers what was held, in order, as if after a long
// delay. Cut drops what is held along with the connections, so Cut while
// holding is a reply lost after its request was applied.
func (p *Proxy) HoldReplies(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.hold == nil:
		p.hold = make(chan struct{})
	case !on && p.hold != nil:
		close(p.hold)
		p.hold = nil
	}
}

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		if !refuse {
			p.nconns++
		}
		id := p.nconns
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c, id)
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut || p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// serve forwards connection number id between client and the target.
func (p *Proxy) serve(client net.Conn, id uint64) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	done := make(chan struct{}, 2)
	go p.pipe(server, client, id, Requests, done)
	go p.pipe(client, server, id, Replies, done)
	<-done
	client.Close()
	server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// pipe copies src to dst, the data of connection id flowing in dir.
func (p *Proxy) pipe(dst, src net.Conn, id uint64, dir Direction, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			lat, hold, connLat := p.latency, p.hold, p.connLat
			p.mu.Unlock()
			if dir == Requests {
				hold = nil
			}
			if connLat != nil {
				lat += connLat(id, dir)
			}
			if hold != nil {
				select {
				case <-hold:
				case <-p.done:
					return
				}
			}
			if lat > 0 {
				t := time.NewTimer(lat)
				select {
				case <-t.C:
				case <-p.done: // closed: do not hold Close up
					t.Stop()
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a closed connection
			return
		}
	}
}
