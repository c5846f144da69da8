package freeport

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestPick: ports below the kernel's ephemeral range, distinct, and free
// to listen on.
func TestPick(t *testing.T) {
	lo, hi := candidates()
	seen := map[int]bool{}
	for range 20 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p >= hi || seen[p] {
			t.Fatalf("Pick = %d: want a port in [%d, %d) not returned before (%v)", p, lo, hi, seen)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("listening on the picked port %d: %v", p, err)
		}
		ln.Close()
	}
}

// TestPickSkips: a port something listens on, and one another process
// has claimed, are passed over; with none left Pick says so.
func TestPickSkips(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	listening := busy.Addr().(*net.TCPAddr).Port

	// A second lock file description conflicts with the first as another
	// process's would: flock locks belong to the open file.
	other := listening + 1
	f, ok, err := claim(other)
	if err != nil || !ok {
		t.Fatalf("claim(%d) = %v, %v", other, ok, err)
	}
	defer release(f)
	if _, ok, err := claim(other); ok || err != nil {
		t.Fatalf("a second claim of %d = %v, %v; want refused", other, ok, err)
	}

	free := listening + 2
	if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(free))); err != nil {
		t.Skipf("port %d is in use here: %v", free, err)
	} else {
		ln.Close()
	}
	for range 5 { // from a random start each time
		mu.Lock()
		if f, mine := claimed[free]; mine {
			release(f) // the previous iteration's pick
			delete(claimed, free)
		}
		mu.Unlock()
		p, err := pickFrom(listening, listening+3)
		if err != nil || p != free {
			t.Fatalf("pickFrom(%d, %d) = %d, %v; want %d, the only port neither listened on nor claimed", listening, listening+3, p, err, free)
		}
	}
	if p, err := pickFrom(listening, listening+3); err == nil || !strings.Contains(err.Error(), "in use or claimed") {
		t.Fatalf("pickFrom with every port taken = %d, %v; want an error saying so", p, err)
	}
}
