package main

import "testing"

func TestRunMemory(t *testing.T) {
	if err := run("memory://swap-test", "examples/swap", 4, 25); err != nil {
		t.Fatal(err)
	}
}
