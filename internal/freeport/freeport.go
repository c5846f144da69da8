// Package freeport picks loopback ports for servers that a process starts
// itself and may restart on the same port: lockctl chaos's servers and
// clusters, and the tests' private servers.
//
// A port the kernel gives for "127.0.0.1:0" comes from its ephemeral
// range, the range it also takes the local ports of outgoing connections
// from. Between the moment the picker closes its probe and the moment the
// server listens, or while a server on the port is down to be restarted,
// any connection the machine opens may be given that port, and the server
// then cannot listen there ("address already in use"). So Pick chooses
// below the ephemeral range, where the kernel assigns no port on its own,
// and claims each port it returns for the rest of the process's life with
// a lock file (flock), so that two processes that pick through this
// package (lockctl chaos beside the tests) never get the same port. The
// lock files, empty, one per port ever picked (at most 4096), stay in
// $TMPDIR/locker-ports-UID: removing one another process may be locking
// would let two processes hold "the same" file.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range Pick chooses from.
// The servers of scripts/services.sh listen further down (22181-27113),
// and the ports they come back on after a test restarts them stay clear.
const span = 4096

var (
	mu      sync.Mutex
	claimed = map[int]*os.File{} // the ports this process picked, with their lock files
)

// Pick returns a port on 127.0.0.1 that nothing listens on now, that no
// other Pick of this process or of another one running returned, and that
// the kernel does not hand out to connections. The port stays this
// process's until it exits.
func Pick() (int, error) {
	lo, hi := candidates()
	return pickFrom(lo, hi)
}

// pickFrom is Pick among the ports [lo, hi), starting at a random one.
func pickFrom(lo, hi int) (int, error) {
	mu.Lock()
	defer mu.Unlock()
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		port := lo + (start+i)%n
		if _, mine := claimed[port]; mine {
			continue
		}
		f, ok, err := claim(port)
		if err != nil {
			return 0, fmt.Errorf("freeport: %w", err)
		}
		if !ok {
			continue // another process's
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			release(f)
			continue // in use by something else
		}
		ln.Close()
		claimed[port] = f
		return port, nil
	}
	return 0, fmt.Errorf("freeport: every port from %d to %d is in use or claimed", lo, hi-1)
}

// candidates returns the ports [lo, hi) Pick chooses from: the span below
// the kernel's ephemeral range (Linux: ip_local_port_range), else below
// 49152, where the dynamic ports of RFC 6335 start (macOS, BSDs).
func candidates() (lo, hi int) {
	hi = 49152
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(data)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 1024+span/4 {
				hi = v
			}
		}
	}
	return max(1024, hi-span), hi
}

// dir is where the lock files are, one per port, per user; made once.
var dir = sync.OnceValues(func() (string, error) {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("locker-ports-%d", os.Getuid()))
	return d, os.MkdirAll(d, 0o700)
})
