package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/openhook"
)

// Faults are a worker's proxies: one in front of every server address
// its client dials, whether the URL names it or the client learns of it
// from the servers (the master a Sentinel names, the nodes of a Redis
// Cluster), so that a fault reaches every connection of the holder and
// only those. TLS still verifies each server's own name: the client
// dials the proxy in the server's stead.
type Faults struct {
	hosts []string // the URL's hosts, host:port, for faults by host

	mu       sync.Mutex
	byTarget map[string]*conformance.Proxy
	cutAll   bool
	cut      map[string]bool // targets cut off
	latency  time.Duration
	hold     bool
}

// errCutOff is what a worker cut off gets when it dials.
var errCutOff = errors.New("connection refused: the holder is cut off (lockctl chaos)")

// Open opens the Locker at rawURL for a worker, its connections through
// proxies of the worker's own. A backend whose opener does not hand its
// connections to lockctl gets the proxies in its URL instead, which
// reaches every connection of a client that dials only the servers its
// URL names.
func Open(ctx context.Context, rawURL string, opts ...locker.OpenOption) (locker.Locker, *Faults, error) {
	f := &Faults{hosts: urlHosts(rawURL), byTarget: map[string]*conformance.Proxy{}, cut: map[string]bool{}}
	hook := openhook.New(f.dial)
	l, err := locker.Open(openhook.NewContext(ctx, hook), rawURL, opts...)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if hook.Taken() {
		return l, f, nil
	}
	l.Close()
	return f.openProxied(ctx, rawURL, opts)
}

// openProxied opens rawURL with each of its hosts replaced by a proxy's
// address: for a backend that dials the servers its URL names and no
// others (ZooKeeper), the proxies then reach every connection too.
func (f *Faults) openProxied(ctx context.Context, rawURL string, opts []locker.OpenOption) (locker.Locker, *Faults, error) {
	purl, proxies, err := conformance.ProxyURL(rawURL)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: no proxies in front of this backend's servers: %w", locker.Redact(rawURL), err)
	}
	for _, p := range proxies {
		f.byTarget[p.Target()] = p
	}
	l, err := locker.Open(ctx, purl, opts...)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return l, f, nil
}

// dial is the client's dialer: a connection to addr through its proxy,
// started at the first dial, and as the faults in force have it.
func (f *Faults) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	if f.cutAll || f.cut[addr] {
		f.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: errCutOff}
	}
	p := f.byTarget[addr]
	if p == nil {
		var err error
		if p, err = conformance.NewProxy(addr); err != nil {
			f.mu.Unlock()
			return nil, err
		}
		p.SetLatency(f.latency)
		p.HoldReplies(f.hold)
		f.byTarget[addr] = p
	}
	f.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.Addr())
}

// apply carries out a fault command: "cut [HOST-INDEX...]" (every server
// when no index is given), "latency D", "hold on|off", "restore".
func (f *Faults) apply(args []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case len(args) >= 1 && args[0] == "cut":
		return f.cutLocked(args[1:])
	case len(args) == 2 && args[0] == "latency":
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		f.latency = d
	case len(args) == 2 && args[0] == "hold" && (args[1] == "on" || args[1] == "off"):
		f.hold = args[1] == "on"
	case len(args) == 1 && args[0] == "restore":
		f.cutAll, f.cut, f.latency, f.hold = false, map[string]bool{}, 0, false
	default:
		return fmt.Errorf("fault %q: want cut [HOST...], latency D, hold on|off or restore", strings.Join(args, " "))
	}
	for t, p := range f.byTarget {
		f.set(t, p)
	}
	return nil
}

// cutLocked cuts the worker off from the URL's hosts at the indexes
// given, or from every server.
func (f *Faults) cutLocked(idx []string) error {
	if len(idx) == 0 {
		f.cutAll = true
	}
	for _, s := range idx {
		i, err := strconv.Atoi(s)
		if err != nil || i < 0 || i >= len(f.hosts) {
			return fmt.Errorf("cut: host %q: want an index below %d", s, len(f.hosts))
		}
		f.cut[f.hosts[i]] = true
	}
	for t, p := range f.byTarget {
		f.set(t, p)
	}
	return nil
}

// set brings the proxy in front of target in line with the faults.
func (f *Faults) set(target string, p *conformance.Proxy) {
	if f.cutAll || f.cut[target] {
		p.Cut()
	} else {
		p.Restore()
	}
	p.SetLatency(f.latency)
	p.HoldReplies(f.hold)
}

// Close closes the proxies.
func (f *Faults) Close() {
	f.mu.Lock()
	ps := f.byTarget
	f.byTarget, f.cutAll = nil, true
	f.mu.Unlock()
	for _, p := range ps {
		p.Close()
	}
}

// urlHosts returns the hosts of a locker URL as host:port, a host
// without a port given its scheme's usual one, as the backends dial them.
func urlHosts(rawURL string) []string {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	var hosts []string
	for _, h := range strings.Split(rest, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPorts[scheme])
		}
		hosts = append(hosts, h)
	}
	return hosts
}

// defaultPorts are the usual ports of the schemes of this module's
// backends.
var defaultPorts = map[string]string{
	"redis": "6379", "rediss": "6379", "redlock": "6379", "redlocks": "6379",
	"redis+sentinel": "26379", "rediss+sentinel": "26379",
	"zookeeper": "2181", "zk": "2181", "etcd": "2379", "etcds": "2379",
	"postgres": "5432", "postgresql": "5432",
}
