package redlock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/openhook"
	"github.com/distlock/locker/internal/redisconn"
)

func init() {
	locker.Register("redlock", open)
	locker.Register("redlocks", open)
}

// Options configures New and NewRedigo. The zero value is usable.
type Options struct {
	// Config is passed to locker.New.
	Config locker.Config
	// NodeTimeout bounds each node's part of a round (acquire, refresh,
	// release), from when it is sent, so that a dead or slow node costs
	// this much, not the TTL. Keep it well below the TTLs you use.
	// Default 100ms.
	NodeTimeout time.Duration
	// DriftFactor and MinDrift make the clock-drift allowance subtracted
	// from the TTL: TTL x DriftFactor + MinDrift. Defaults 0.01 and 2ms,
	// as on the Redis distlock page.
	DriftFactor float64
	MinDrift    time.Duration
	// RetryDelay is the longest random delay before a waiter tries again
	// after a split vote, and the first bound of the growing one after a
	// round that no majority answered. Default 20ms.
	RetryDelay time.Duration
	// AllowEviction opens the Locker even when a node's maxmemory-policy
	// lets Redis evict lock keys under memory pressure.
	AllowEviction bool
	// AllowFewNodes opens the Locker over one or two nodes. Redlock needs
	// three to tolerate a failure: with two, either one down leaves no
	// majority; with one, it is a single Redis server at Redlock's cost.
	// Default false: fewer than three nodes is an error, as a URL that
	// lost a host by mistake would otherwise go unnoticed.
	AllowFewNodes bool
}

// checkNodes refuses fewer than three nodes unless allowed.
func checkNodes(n int, allow bool) error {
	if n >= 3 || allow {
		return nil
	}
	return fmt.Errorf("redlock: %d node(s) given, fewer than the 3 that tolerate one failure (with %d, a single node down stops all locking); "+
		"list at least 3 independent masters, or set allow_few_nodes=true (Options.AllowFewNodes) if this is intended", n, n)
}

const (
	defaultNodeTimeout = 100 * time.Millisecond
	defaultDriftFactor = 0.01
	defaultMinDrift    = 2 * time.Millisecond
	defaultRetryDelay  = 20 * time.Millisecond
)

func (o *Options) settings() (settings, error) {
	s := settings{nodeTimeout: o.NodeTimeout, driftFactor: o.DriftFactor, minDrift: o.MinDrift, retryDelay: o.RetryDelay}
	if s.nodeTimeout == 0 {
		s.nodeTimeout = defaultNodeTimeout
	}
	if s.driftFactor == 0 {
		s.driftFactor = defaultDriftFactor
	}
	if s.minDrift == 0 {
		s.minDrift = defaultMinDrift
	}
	if s.retryDelay == 0 {
		s.retryDelay = defaultRetryDelay
	}
	switch {
	case s.nodeTimeout < 0:
		return s, fmt.Errorf("redlock: NodeTimeout must be positive, got %v", s.nodeTimeout)
	case s.driftFactor < 0 || s.driftFactor >= 1:
		return s, fmt.Errorf("redlock: DriftFactor must be in [0, 1), got %v", s.driftFactor)
	case s.minDrift < 0:
		return s, fmt.Errorf("redlock: MinDrift must not be negative, got %v", s.minDrift)
	case s.retryDelay < 0:
		return s, fmt.Errorf("redlock: RetryDelay must be positive, got %v", s.retryDelay)
	}
	return s, nil
}

// New returns a Locker over independent Redis masters, one go-redis client
// each (not replicas of one another, and not a Cluster). Three or five
// are usual; an even number tolerates no more failures than one fewer.
// The Locker does not close the clients. Build them with
// ContextTimeoutEnabled: true, so that the per-node timeout bounds their
// calls rather than only the Locker's wait for them.
func New(clients []goredis.UniversalClient, opts *Options) (locker.Locker, error) {
	conns := make([]redisconn.Conn, len(clients))
	addrs := make([]string, len(clients))
	for i, c := range clients {
		if redisconn.IsNil(c) {
			return nil, fmt.Errorf("redlock: New: client %d is %s", i, redisconn.NilName(c))
		}
		conns[i] = redisconn.NewGoRedis(c, false)
		addrs[i] = clientAddr(c, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.OpenTimeout)
	defer cancel()
	return newLocker(ctx, conns, addrs, opts)
}

// NewRedigo is New over redigo connection pools, one per master.
func NewRedigo(pools []*redigo.Pool, opts *Options) (locker.Locker, error) {
	conns := make([]redisconn.Conn, len(pools))
	addrs := make([]string, len(pools))
	for i, p := range pools {
		if p == nil {
			return nil, fmt.Errorf("redlock: NewRedigo: pool %d is nil", i)
		}
		conns[i] = redisconn.NewRedigo(p, false)
		addrs[i] = "node " + strconv.Itoa(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.OpenTimeout)
	defer cancel()
	return newLocker(ctx, conns, addrs, opts)
}

func clientAddr(c goredis.UniversalClient, i int) string {
	if cl, ok := c.(*goredis.Client); ok {
		return cl.Options().Addr
	}
	return "node " + strconv.Itoa(i)
}

func newLocker(ctx context.Context, conns []redisconn.Conn, addrs []string, opts *Options) (locker.Locker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if len(conns) == 0 {
		return nil, fmt.Errorf("redlock: no nodes given")
	}
	set, err := o.settings()
	if err != nil {
		return nil, err
	}
	if err := checkNodes(len(conns), o.AllowFewNodes); err != nil {
		return nil, err
	}
	log := o.Config.ResolvedLogger()
	// A hung node must not hold up the open for long: Redlock is meant to
	// work without it.
	cctx, cancel := context.WithTimeout(ctx, 10*set.nodeTimeout)
	defer cancel()
	// Nodes that may evict lock keys are refused, as the redis package
	// refuses its server. A node that cannot be reached is only logged
	// while a majority answers: Redlock is meant to work with a minority
	// of nodes down. Without a majority no lock can be taken, and Open
	// fails as the other backends do when they cannot reach their servers,
	// instead of the first Acquire.
	targets := make([]redisconn.Target, len(conns))
	for i, c := range conns {
		targets[i] = redisconn.Target{Conn: c, Name: addrs[i]}
	}
	if err := redisconn.CheckEviction(cctx, targets, redisconn.EvictionCheck{
		Backend: "redlock", Allow: o.AllowEviction, Quorum: len(conns)/2 + 1, Log: log,
	}); err != nil {
		return nil, err
	}
	nodes := make([]*node, len(conns))
	for i, c := range conns {
		nodes[i] = newNode(addrs[i], c, log)
	}
	d := newDriver(nodes, set, log)
	if err := locker.CheckConfig(d, &o.Config); err != nil {
		d.Close()
		return nil, fmt.Errorf("redlock: %w", err)
	}
	return locker.New(d, &o.Config), nil
}

// open handles redlock:// and redlocks:// (TLS) URLs:
//
//	redlock://[user:password@]h1:p1,h2:p2,h3:p3[/db][?client=redigo][&node_timeout=50ms]
//	    [&drift_factor=0.01][&min_drift=2ms][&retry_delay=20ms][&allow_eviction=true][&timeout=1s]
//	    [&allow_few_nodes=true]
//	redlocks://...[?cacert=ca.pem][&cert=client.pem&key=client-key.pem]
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	o, hosts, co, err := readURL(u)
	if err != nil {
		return nil, err
	}
	co.Dial = openhook.Dial(ctx)
	if _, err := o.settings(); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			return nil, fmt.Errorf("redlock: host %s is listed twice: the nodes must be independent", h)
		}
		seen[h] = true
	}
	conns := make([]redisconn.Conn, 0, len(hosts))
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for _, h := range hosts {
		c, err := dial(h, co)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("redlock: %w", err)
		}
		conns = append(conns, c)
	}
	ctx, cancel := context.WithTimeout(ctx, redisconn.OpenTimeout)
	defer cancel()
	l, err := newLocker(ctx, conns, hosts, &o)
	if err != nil {
		closeAll()
		return nil, err
	}
	return l, nil
}

// readURL reads every parameter of a redlock URL, as open and diagnose
// both need them: the options, the nodes and how to connect to them.
func readURL(u *locker.URL) (Options, []string, redisconn.ClientOptions, error) {
	o, err := optionsFromURL(u)
	if err != nil {
		return Options{}, nil, redisconn.ClientOptions{}, err
	}
	hosts, co, err := redisconn.FromURL(u, u.Scheme == "redlocks")
	if err != nil {
		return Options{}, nil, redisconn.ClientOptions{}, fmt.Errorf("redlock: %w", err)
	}
	if err := u.CheckParams(); err != nil {
		return Options{}, nil, redisconn.ClientOptions{}, err
	}
	return o, hosts, co, nil
}

// optionsFromURL reads the Redlock parameters of u into Options.
func optionsFromURL(u *locker.URL) (Options, error) {
	o := Options{Config: u.Config}
	var err error
	if o.AllowEviction, err = u.BoolParam("allow_eviction", false); err != nil {
		return o, err
	}
	if o.AllowFewNodes, err = u.BoolParam("allow_few_nodes", false); err != nil {
		return o, err
	}
	if o.NodeTimeout, err = u.DurationParam("node_timeout", 0); err != nil {
		return o, err
	}
	if o.MinDrift, err = u.DurationParam("min_drift", 0); err != nil {
		return o, err
	}
	if o.RetryDelay, err = u.DurationParam("retry_delay", 0); err != nil {
		return o, err
	}
	if v, ok := u.Param("drift_factor"); ok {
		if o.DriftFactor, err = strconv.ParseFloat(v, 64); err != nil {
			return o, fmt.Errorf("redlock: drift_factor %q is not a number", v)
		}
	}
	return o, nil
}

// dial returns an owned client for one node, built as redisconn.Dial
// builds it, but failing fast (ClientOptions.FailFast): a node that
// refuses connections fails at once instead of costing the whole node
// timeout in every round, and a retried SET NX whose first attempt landed
// cannot read as another holder's lock.
func dial(host string, co redisconn.ClientOptions) (redisconn.Conn, error) {
	co.FailFast = true
	return redisconn.Dial([]string{host}, co)
}
