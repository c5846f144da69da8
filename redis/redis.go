package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/openhook"
	"github.com/distlock/locker/internal/redisconn"
)

func init() {
	locker.Register("redis", open)
	locker.Register("rediss", open)
	locker.Register("redis+sentinel", open)
	locker.Register("rediss+sentinel", open)
}

// Options configures New and NewRedigo. The zero value is usable.
type Options struct {
	// Config is passed to locker.New.
	Config locker.Config
	// AllowEviction opens the Locker even when the server's
	// maxmemory-policy lets Redis evict lock keys under memory pressure,
	// which silently breaks mutual exclusion. Leave it false unless the
	// server's memory is bounded some other way.
	AllowEviction bool
}

// New returns a Locker over a go-redis v9 client: a *Client for one server
// (or a Sentinel failover client), or a *ClusterClient for Redis Cluster.
// The Locker does not close c. A nil c, or a nil *Client or
// *ClusterClient in it, is an error.
func New(c goredis.UniversalClient, opts *Options) (locker.Locker, error) {
	if redisconn.IsNil(c) {
		return nil, fmt.Errorf("redis: New: the client is %s", redisconn.NilName(c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.OpenTimeout)
	defer cancel()
	return newLocker(ctx, redisconn.NewGoRedis(c, false), "", opts)
}

// NewRedigo returns a Locker over a redigo connection pool. The Locker
// does not close p. A nil p is an error.
func NewRedigo(p *redigo.Pool, opts *Options) (locker.Locker, error) {
	if p == nil {
		return nil, errors.New("redis: NewRedigo: the pool is nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisconn.OpenTimeout)
	defer cancel()
	return newLocker(ctx, redisconn.NewRedigo(p, false), "", opts)
}

// newLocker checks the server and returns the Locker; name says what the
// server is called in messages when the client does not know (a redigo
// pool), "" for nothing.
func newLocker(ctx context.Context, c redisconn.Conn, name string, opts *Options) (locker.Locker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	log := o.Config.ResolvedLogger()
	// A server (every master of a Cluster) that may evict lock keys is
	// refused; one that cannot be reached is an error here.
	if err := redisconn.CheckEviction(ctx, []redisconn.Target{{Conn: c, Name: name}},
		redisconn.EvictionCheck{Backend: "redis", Allow: o.AllowEviction, Log: log}); err != nil {
		return nil, err
	}
	d := newDriver(c, log)
	if err := locker.CheckConfig(d, &o.Config); err != nil {
		d.Close()
		return nil, fmt.Errorf("redis: %w", err)
	}
	return locker.New(d, &o.Config), nil
}

// open handles the URLs of this package (see the package doc, # URLs):
//
//	redis://[user:password@]host:port[/db]            one server, or a Redis Cluster node
//	redis://[user:password@]h1:p1,h2:p2,...           Redis Cluster (go-redis only)
//	redis+sentinel://[user:password@]s1:p1,s2:p2,.../master-name[/db]
//	                                                  the master a Sentinel group names (go-redis only)
//	rediss://..., rediss+sentinel://...               the same over TLS
//
// Parameters: client=goredis|redigo, timeout=DURATION, allow_eviction=BOOL;
// with TLS, cacert=FILE, cert=FILE and key=FILE; with Sentinel,
// sentinel_user and sentinel_password (the Sentinels' own credentials;
// user and password in the URL are the master's).
//
// Before it builds the client, open looks at the servers
// (redisconn.Probe): the database must exist, several hosts must be
// Cluster nodes, a Sentinel must know the master. A single host that is a
// Cluster node gets a Cluster client, as a plain one would be answered
// MOVED for the keys of the other nodes.
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	allow, hosts, co, err := readURL(u)
	if err != nil {
		return nil, err
	}
	co.Dial = openhook.Dial(ctx)
	if co.Sentinel == nil && len(hosts) > 1 && co.DB != 0 {
		return nil, fmt.Errorf("redis: Redis Cluster has no databases, but the URL selects %d", co.DB)
	}
	ctx, cancel := context.WithTimeout(ctx, redisconn.OpenTimeout)
	defer cancel()
	if co, err = redisconn.Probe(ctx, hosts, co); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	c, err := redisconn.Dial(hosts, co)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts := &Options{Config: u.Config, AllowEviction: allow}
	l, err := newLocker(ctx, c, strings.Join(hosts, ","), opts)
	if err != nil {
		c.Close()
		return nil, err
	}
	return l, nil
}

// readURL reads every parameter of a redis URL, as open and diagnose both
// need them: allow_eviction, the hosts and how to connect to them.
func readURL(u *locker.URL) (allowEviction bool, hosts []string, co redisconn.ClientOptions, err error) {
	allowEviction, err = u.BoolParam("allow_eviction", false)
	if err != nil {
		return false, nil, co, err
	}
	hosts, co, err = redisconn.FromRedisURL(u)
	if err != nil {
		return false, nil, co, fmt.Errorf("redis: %w", err)
	}
	return allowEviction, hosts, co, u.CheckParams()
}
