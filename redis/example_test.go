package redis_test

import (
	"context"
	"log"
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
