package redlock_test

import (
	"context"
	"log"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/redlock"
)

// Redlock over independent Redis masters (an odd number, at least three),
// each with its own client.
func ExampleNew() {
	var clients []goredis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		c := goredis.NewClient(&goredis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		clients = append(clients, c)
	}
	l, err := redlock.New(clients, &redlock.Options{Config: locker.Config{Prefix: "jobs/"}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Acquire(context.Background(), "nightly")
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Release(context.Background())
}
