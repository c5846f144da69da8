package main

import (
	"testing"

	"github.com/distlock/locker/internal/testenv"
)

func TestRunMemory(t *testing.T) {
	if err := run("memory://swap-test", "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}

// TestRunRedis runs the same program on a Redis server: only the URL
// differs.
func TestRunRedis(t *testing.T) {
	if err := run(testenv.Get(t, testenv.RedisURL), "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}
