package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/openhook"
)

// URLHarness returns a Harness whose clients open rawURL through
// locker.Open, each reaching the servers through loopback proxies of its
// own, so that Crash can cut one client off without touching the servers
// or the other clients. Any URL locker.Open accepts will do; the
// backend's package must be imported.
//
// The backends of this module hand every connection a client makes to
// the harness, which puts a proxy of the client's own in front of each
// address the client dials: the servers the URL names, and the servers
// the client learns of from them (the nodes of a Redis Cluster, the
// master a Sentinel names), so that Crash cuts them all. TLS verifies
// each server's certificate against the server's own name, as it would
// without the proxies. For a backend from elsewhere, the harness puts
// the proxies in the URL instead (see ProxyURL): a server the client
// learns of from others then escapes Crash, and TLS checks the
// certificate against the proxy's address, 127.0.0.1.
//
// memory://name has no server: every client shares the named store, and
// Crash crashes the client as memory.Client.Crash does. Another module's
// backend whose hosts are not addresses (no port, and no usual port known
// for its scheme) is opened as its URL says, and its clients cannot crash.
//
// opts go to every Open, e.g. locker.WithLogger: the suite cuts clients
// off on purpose, and a caller that does not want their warnings gives a
// logger of its own rather than changing slog.Default.
func URLHarness(rawURL string, opts ...locker.OpenOption) Harness {
	u := &urlHarness{raw: rawURL, opts: opts}
	return Harness{NewClient: u.newClient}
}

type urlHarness struct {
	raw  string
	opts []locker.OpenOption

	mu    sync.Mutex
	byURL bool // the backend's opener ignores the hook: proxies go in the URL
}

func (u *urlHarness) newClient(ctx context.Context) (Client, error) {
	u.mu.Lock()
	byURL := u.byURL
	u.mu.Unlock()
	if !byURL {
		c, taken, err := u.openHooked(ctx)
		if err != nil || taken {
			return c, err
		}
		u.mu.Lock()
		u.byURL = true
		u.mu.Unlock()
	}
	return u.openProxied(ctx)
}

// openHooked opens the URL with a hook that routes the client's
// connections through proxies of its own, and reports whether the
// backend's opener took the hook; if it did not, the Locker is closed.
func (u *urlHarness) openHooked(ctx context.Context) (Client, bool, error) {
	ps := &proxySet{byTarget: map[string]*Proxy{}}
	hook := openhook.New(ps.dial)
	l, err := locker.Open(openhook.NewContext(ctx, hook), u.raw, u.opts...)
	if err != nil {
		ps.close()
		return Client{}, false, err
	}
	if !hook.Taken() {
		l.Close()
		ps.close()
		return Client{}, false, nil
	}
	c := Client{Locker: l, Crash: ps.cut, Cleanup: ps.close}
	if crash := hook.Crash(); crash != nil {
		c.Crash = crash
	}
	return c, true, nil
}

// openProxied opens the URL with each of its hosts replaced by a proxy's
// address. A URL whose hosts are not addresses (an in-process backend of
// another module, as memory://name is here) is opened as it is, with no
// Crash: the cases that need one are skipped.
func (u *urlHarness) openProxied(ctx context.Context) (Client, error) {
	pu, proxies, err := ProxyURL(u.raw)
	if err != nil {
		l, oerr := locker.Open(ctx, u.raw, u.opts...)
		if oerr != nil {
			return Client{}, errors.Join(err, oerr)
		}
		return Client{Locker: l}, nil
	}
	closeAll := func() {
		for _, p := range proxies {
			p.Close()
		}
	}
	l, err := locker.Open(ctx, pu, u.opts...)
	if err != nil {
		closeAll()
		return Client{}, err
	}
	c := Client{Locker: l, Cleanup: closeAll}
	if len(proxies) > 0 {
		c.Crash = func() {
			for _, p := range proxies {
				p.Cut()
			}
		}
	}
	return c, nil
}

// proxySet is the proxies of one client: one for each server address the
// client dials, started at the first dial.
type proxySet struct {
	mu       sync.Mutex
	byTarget map[string]*Proxy
	down     bool // cut or closed: every proxy cut, new dials refused
}

// errCutOff is what a client that was cut off gets when it dials.
var errCutOff = errors.New("connection refused: the client is cut off (Client.Crash)")

func (s *proxySet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if !strings.HasPrefix(network, "tcp") {
		return nil, fmt.Errorf("conformance: cannot proxy a %s connection to %s", network, addr)
	}
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: errCutOff}
	}
	p := s.byTarget[addr]
	if p == nil {
		var err error
		if p, err = NewProxy(addr); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("conformance: proxy for %s: %w", addr, err)
		}
		s.byTarget[addr] = p
	}
	s.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.Addr())
}

// cut cuts the client off: every connection dropped, and every dial,
// to a server it knew or a new one, refused.
func (s *proxySet) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = true
	for _, p := range s.byTarget {
		p.Cut()
	}
}

func (s *proxySet) close() {
	s.mu.Lock()
	s.down = true
	ps := s.byTarget
	s.byTarget = nil
	s.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}
