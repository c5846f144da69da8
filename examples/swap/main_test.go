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

// TestRunRedlock runs it on five independent Redis masters. Redlock has no
// fencing tokens, so only mutual exclusion is checked.
func TestRunRedlock(t *testing.T) {
	if err := run(testenv.Get(t, testenv.RedlockURL), "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}

func TestRunZooKeeper(t *testing.T) {
	if err := run(testenv.Get(t, testenv.ZooKeeperURL), "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}

func TestRunEtcd(t *testing.T) {
	if err := run(testenv.Get(t, testenv.EtcdURL), "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}
