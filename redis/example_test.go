package redis_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/redis"
)

// A Locker over a go-redis client the application already has (a single
// server, a Sentinel failover client or a Cluster client). Build it with
// ContextTimeoutEnabled so that the Locker's context deadlines hold.
func ExampleNew() {
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer c.Close() // the Locker does not close a client it was given
	l, err := redis.New(c, &redis.Options{Config: locker.Config{Prefix: "billing/", Defaults: []locker.Option{locker.WithTTL(10 * time.Second)}}})
	if err != nil {
		log.Fatal(err) // the server is unreachable, or may evict lock keys
	}
	defer l.Close()
	lk, err := l.Acquire(context.Background(), "invoice/42")
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Release(context.Background())
}

// An application that wants go-redis's own lines (a failed dial, a
// Sentinel master switch) in its structured log, next to the Locker's,
// routes them once at start-up: go-redis has one logger for the whole
// process, so the library never does it on its own.
func ExampleRouteClientLogs() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	redis.RouteClientLogs(logger)
	l, err := locker.Open(context.Background(), "redis://127.0.0.1:6379", locker.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
}
