package redis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redisconn"
)

func init() {
	locker.Register("redis", open)
	locker.Register("rediss", open)
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

// openTimeout bounds the checks New makes against the server.
const openTimeout = 5 * time.Second

// New returns a Locker over a go-redis v9 client: a *Client for one server
// (or a Sentinel failover client), or a *ClusterClient for Redis Cluster.
// The Locker does not close c.
func New(c goredis.UniversalClient, opts *Options) (locker.Locker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return newLocker(ctx, redisconn.NewGoRedis(c, false), "", opts, wakePubSub)
}

// NewRedigo returns a Locker over a redigo connection pool. The Locker
// does not close p.
func NewRedigo(p *redigo.Pool, opts *Options) (locker.Locker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return newLocker(ctx, redisconn.NewRedigo(p, false), "", opts, wakePubSub)
}

// newLocker checks the server and returns the Locker; name says what the
// server is called in messages when the client does not know (a redigo
// pool), "" for nothing.
func newLocker(ctx context.Context, c redisconn.Conn, name string, opts *Options, mode wakeMode) (locker.Locker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	log := o.Config.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// A server (every master of a Cluster) that may evict lock keys is
	// refused; one that cannot be reached is an error here.
	if err := redisconn.CheckEviction(ctx, []redisconn.Target{{Conn: c, Name: name}},
		redisconn.EvictionCheck{Backend: "redis", Allow: o.AllowEviction, Log: log}); err != nil {
		return nil, err
	}
	d := newDriver(c, log, mode)
	if mode == wakeList {
		return locker.New(listDriver{d}, &o.Config), nil
	}
	return locker.New(pubsubDriver{d}, &o.Config), nil
}

// open handles redis:// and rediss:// URLs:
//
//	redis://[user:password@]host:port[/db][?client=goredis|redigo][&allow_eviction=true]
//	redis://host1:port1,host2:port2,...   (Redis Cluster, go-redis only)
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	allow, err := u.BoolParam("allow_eviction", false)
	if err != nil {
		return nil, err
	}
	hosts, co, err := redisconn.FromURL(u, u.Scheme == "rediss")
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if err := u.CheckParams(); err != nil {
		return nil, err
	}
	if len(hosts) > 1 && co.DB != 0 {
		return nil, fmt.Errorf("redis: Redis Cluster has no databases, but the URL selects %d", co.DB)
	}
	c, err := redisconn.Dial(hosts, co)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts := &Options{Config: u.Config, AllowEviction: allow}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	l, err := newLocker(ctx, c, strings.Join(hosts, ","), opts, wakePubSub)
	if err != nil {
		c.Close()
		return nil, err
	}
	return l, nil
}
