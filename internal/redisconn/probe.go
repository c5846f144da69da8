package redisconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
)

// OpenTimeout bounds the checks that the backends' New and Open make
// against the servers (Probe, CheckEviction).
const OpenTimeout = 5 * time.Second

// Probe looks at the servers a URL names before a client is built on
// them, so that Open fails with an error naming what is wrong rather than
// the first Acquire failing with a puzzle: a database the server does not
// have, several hosts that are no Redis Cluster, a Sentinel given as a
// server, a master name no Sentinel knows. It returns o, adjusted: a
// single host that is a Cluster node gets o.Cluster, since a plain client
// would be answered MOVED for every key in another node's slots. Errors
// name the problem without a package prefix.
func Probe(ctx context.Context, hosts []string, o ClientOptions) (ClientOptions, error) {
	if err := o.check(hosts); err != nil {
		return o, err
	}
	switch {
	case o.Sentinel != nil:
		return o, probeSentinels(ctx, hosts, o)
	case len(hosts) > 1:
		return o, probeCluster(ctx, hosts, o)
	}
	mode, err := probeServer(ctx, hosts[0], o)
	switch {
	case err != nil:
		return o, err
	case mode == "cluster" && o.DB != 0:
		return o, fmt.Errorf("%s is a Redis Cluster node, and a Cluster has database 0 only, but the URL selects %d", hosts[0], o.DB)
	case mode == "cluster":
		o.Cluster = true
	case mode == "sentinel":
		return o, fmt.Errorf("%s is a Redis Sentinel, not a data server: use redis+sentinel://%s/master-name", hosts[0], hosts[0])
	}
	return o, nil
}

// probeServer returns the server's redis_mode (standalone, cluster or
// sentinel) and checks that it has database o.DB.
func probeServer(ctx context.Context, addr string, o ClientOptions) (string, error) {
	s, err := openSession(ctx, addr, o, false)
	if err != nil {
		return "", err
	}
	defer s.close()
	info, err := s.do(ctx, "INFO", "server")
	if err != nil {
		return "", s.fail(err)
	}
	mode := infoField(info, "redis_mode")
	if o.DB == 0 || mode == "cluster" || mode == "sentinel" {
		return mode, nil
	}
	if _, err := s.do(ctx, "SELECT", o.DB); err != nil {
		// CONFIG may be refused (managed services): the SELECT error is
		// all there is to say then.
		if n := configValue(s.do(ctx, "CONFIG", "GET", "databases")); n > 0 {
			return "", fmt.Errorf("database %d does not exist on %s: it has %d (0 to %d): %w", o.DB, addr, n, n-1, err)
		}
		return "", fmt.Errorf("database %d does not exist on %s: %w", o.DB, addr, err)
	}
	return mode, nil
}

// probeCluster checks that the hosts are Redis Cluster nodes. A host that
// does not answer is left to the cluster client, as long as one does.
func probeCluster(ctx context.Context, hosts []string, o ClientOptions) error {
	modes := make([]string, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { modes[i], errs[i] = probeServer(ctx, h, o) })
	}
	wg.Wait()
	var plain []string
	answered := false
	for i, h := range hosts {
		if errs[i] == nil {
			answered = true
			if modes[i] != "cluster" {
				plain = append(plain, fmt.Sprintf("%s (redis_mode %s)", h, modes[i]))
			}
		}
	}
	if len(plain) > 0 {
		return fmt.Errorf("several hosts in a redis:// URL mean a Redis Cluster, but %s %s not a Cluster node: for independent masters use redlock://%s, for one server give one host",
			strings.Join(plain, ", "), map[bool]string{true: "is", false: "are"}[len(plain) == 1], strings.Join(hosts, ","))
	}
	if !answered {
		return errors.Join(errs...)
	}
	return nil
}

// probeSentinels asks the Sentinels for the master's address, then checks
// the master as a single server.
func probeSentinels(ctx context.Context, hosts []string, o ClientOptions) error {
	so := o
	so.Username, so.Password = o.Sentinel.Username, o.Sentinel.Password
	var errs, unknown []string
	for _, h := range hosts {
		addr, err := askSentinel(ctx, h, so, o.Sentinel.Master)
		switch {
		case err != nil:
			errs = append(errs, err.Error())
		case addr == "":
			unknown = append(unknown, h)
		default:
			mode, err := probeServer(ctx, addr, o)
			if err != nil {
				return fmt.Errorf("master %q at %s (from Sentinel %s): %w", o.Sentinel.Master, addr, h, err)
			}
			if mode != "standalone" {
				return fmt.Errorf("master %q at %s (from Sentinel %s) is not a standalone server (redis_mode %s)", o.Sentinel.Master, addr, h, mode)
			}
			return nil
		}
	}
	if len(unknown) > 0 {
		errs = append(errs, fmt.Sprintf("Sentinel %s knows no master named %q", strings.Join(unknown, ", "), o.Sentinel.Master))
	}
	return fmt.Errorf("no Sentinel gave the address of master %q: %s", o.Sentinel.Master, strings.Join(errs, "; "))
}

// askSentinel returns the address the Sentinel at h has for master, or ""
// when it knows no such master.
func askSentinel(ctx context.Context, h string, o ClientOptions, master string) (string, error) {
	s, err := openSession(ctx, h, o, true)
	if err != nil {
		return "", err
	}
	defer s.close()
	v, err := s.do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", master)
	if err != nil {
		if IsServerError(err) && strings.Contains(strings.ToLower(err.Error()), "unknown") {
			return "", fmt.Errorf("%s is not a Redis Sentinel (%v)", h, err)
		}
		return "", s.fail(err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", nil
	}
	return net.JoinHostPort(text(a[0]), text(a[1])), nil
}

// session is one connection of the URL's client library, to database 0.
type session struct {
	addr  string
	plain bool // no TLS
	do    func(ctx context.Context, args ...any) (any, error)
	close func()
}

func openSession(ctx context.Context, addr string, o ClientOptions, sentinel bool) (*session, error) {
	s := &session{addr: addr, plain: o.tlsConfig() == nil}
	dialer := o.dialer()
	if o.Client == "redigo" {
		c, err := redigo.DialContext(ctx, "tcp", addr, o.redigoOptions(dialer)...)
		if err != nil {
			return nil, s.fail(err)
		}
		s.do = func(ctx context.Context, args ...any) (any, error) {
			return redigo.DoContext(c, ctx, args[0].(string), args[1:]...)
		}
		s.close = func() { c.Close() }
		return s, nil
	}
	opts := &goredis.Options{
		Addr: addr, Username: o.Username, Password: o.Password, Dialer: dialer,
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true,
		// Above 1: go-redis starts a goroutine that redials every second
		// (until the pool is closed) once PoolSize dials in a row failed.
		PoolSize: 4,
	}
	if sentinel {
		// A Sentinel accepts HELLO but not the CLIENT SETINFO that go-redis
		// sends after it on a data server.
		opts.DisableIdentity = true
	}
	cl := goredis.NewClient(opts)
	cn := cl.Conn()
	s.do = func(ctx context.Context, args ...any) (any, error) {
		v, err := cn.Do(ctx, args...).Result()
		if errors.Is(err, goredis.Nil) {
			return nil, nil
		}
		return v, err
	}
	s.close = func() { cn.Close(); cl.Close() }
	return s, nil
}

// fail describes an error of the connection itself: the server refused a
// command it needs (authentication), or could not be reached.
func (s *session) fail(err error) error {
	if IsServerError(err) {
		return fmt.Errorf("server %s refuses the connection: %w", s.addr, err)
	}
	if s.plain && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		return fmt.Errorf("server %s unreachable: %w (it closed the connection: if it expects TLS, use rediss://)", s.addr, err)
	}
	return fmt.Errorf("server %s unreachable: %w", s.addr, err)
}

// infoField returns the value of field in an INFO reply.
func infoField(info any, field string) string {
	for _, line := range strings.Split(text(info), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprint(v)
}

// configValue reads the number in a CONFIG GET reply of one setting: a
// map in RESP3 (go-redis), a name and value pair in RESP2 (redigo).
func configValue(v any, err error) int {
	var s string
	switch v := v.(type) {
	case map[any]any:
		for _, x := range v {
			s = text(x)
		}
	case []any:
		if len(v) == 2 {
			s = text(v[1])
		}
	}
	n, cerr := strconv.Atoi(s)
	if err != nil || cerr != nil {
		return 0
	}
	return n
}
