// Command quickstart is the README's quick start: it takes a lock on the
// backend $LOCKER_URL names (memory:// when unset), works while holding
// it, and releases it.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/distlock/locker"
	_ "github.com/distlock/locker/etcd"      // etcd://, etcds://
	_ "github.com/distlock/locker/memory"    // memory://
	_ "github.com/distlock/locker/postgres"  // postgres://, postgresql://
	_ "github.com/distlock/locker/redis"     // redis://, rediss://
	_ "github.com/distlock/locker/redlock"   // redlock://
	_ "github.com/distlock/locker/zookeeper" // zookeeper://, zk://
)

func main() {
	ctx := context.Background()
	url := os.Getenv("LOCKER_URL") // e.g. redis://127.0.0.1:6379
	if url == "" {
		url = "memory://"
	}
	l, err := locker.Open(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	err = locker.Do(ctx, l, "invoices/2026-11", func(ctx context.Context, lock locker.Lock) error {
		fence, ok := lock.Fence() // pass it to the resource, which rejects older fences
		fmt.Println("holding", lock.Key(), "until", lock.Until().Format(time.TimeOnly), "fence", fence, ok)
		// ... work; ctx is cancelled if the lock is lost ...
		return nil
	}, locker.WithTTL(30*time.Second))
	if err != nil {
		log.Print(err)
	}
}
