package conformance

import (
	"net"
	"sync"
	"time"
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
	closed  bool
	done    chan struct{} // closed by Close
	wg      sync.WaitGroup
}

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
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
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

func (p *Proxy) serve(client net.Conn) {
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
	go p.pipe(server, client, false, done)
	go p.pipe(client, server, true, done)
	<-done
	client.Close()
	server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
}

// pipe copies src to dst; replies says that src is the server.
func (p *Proxy) pipe(dst, src net.Conn, replies bool, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			lat, hold := p.latency, p.hold
			p.mu.Unlock()
			if !replies {
				hold = nil
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
