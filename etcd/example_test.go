package etcd_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
	"github.com/distlock/locker/etcd"
)

// A Locker over an etcd client the application already has; its locks live
// under Namespace, one shared lease per TTL.
func ExampleNew() {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // the Locker does not close a client it was given
	l, err := etcd.New(c, &etcd.Options{Namespace: "/myapp/locks", Config: locker.Config{Prefix: "orders/"}})
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
