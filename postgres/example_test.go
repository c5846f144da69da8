package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker"
	"github.com/distlock/locker/postgres"
)

// A Locker over the pool an application already has: its locks are rows
// in the lock tables of the application's database (schema "locker",
// created by New when missing and the role may; otherwise an
// administrator runs postgres.SchemaSQL once).
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close() // the Locker does not close a pool it was given
	l, err := postgres.New(pool, &postgres.Options{Config: locker.Config{Prefix: "billing/"}})
	if err != nil {
		log.Fatal(err) // the server is unreachable, or the tables cannot be made
	}
	defer l.Close()

	lk, err := l.Acquire(ctx, "invoice/42", locker.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", lk.Key())
	_, err = l.TryAcquire(ctx, "invoice/42")
	fmt.Println("a second try while held:", errors.Is(err, locker.ErrNotAcquired))
	fence, _ := lk.Fence() // minted on the server, increasing with each holder
	h, err := locker.Inspect(ctx, l, "invoice/42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the server names the holder:", h.Token == lk.Token(), "and its fence:", h.Fence == fence)
	if err := lk.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// holding invoice/42
	// a second try while held: true
	// the server names the holder: true and its fence: true
	// released
}
