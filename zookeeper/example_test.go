package zookeeper_test

import (
	"context"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/zookeeper"
)

// A Locker over a go-zookeeper connection the application already has. Its
// session timeout is then the only TTL its locks can have (a Locker opened
// by URL opens a session per TTL instead).
func ExampleNew() {
	c, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // the Locker does not close a connection it was given
	l, err := zookeeper.New(c, &zookeeper.Options{Path: "/myapp/locks", Config: locker.Config{Prefix: "orders/"}})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lk, err := l.Acquire(context.Background(), "42")
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Release(context.Background())
}
