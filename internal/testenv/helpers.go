package testenv

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
)

// Hosts returns the host:port list of a locker URL such as the ones the
// LOCKER_TEST_* variables hold.
func Hosts(t testing.TB, raw string) []string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(u.Host, ",")
}

// WaitFor polls cond every 10 ms until it holds, and fails the test if it
// still does not after d; what says what was awaited.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Closed reports, without blocking, whether ch is closed.
func Closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// WantOpenErrors checks that locker.Open refuses every URL in cases, each
// a pair {url, fragment}, with an error containing the fragment: the
// error must name the problem.
func WantOpenErrors(t testing.TB, cases [][2]string) {
	t.Helper()
	for _, tc := range cases {
		raw, want := tc[0], tc[1]
		l, err := locker.Open(context.Background(), raw)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded, want an error containing %q", raw, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want an error containing %q", raw, err, want)
		}
	}
}

// Proxy starts a conformance.Proxy to addr and closes it when the test
// ends, after the clients opened later in the test (cleanups run last
// registered first), so that none of them sees it vanish first.
func Proxy(t testing.TB, addr string) *conformance.Proxy {
	t.Helper()
	p, err := conformance.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// ClosedAddrs returns n distinct loopback addresses that refuse
// connections, as the ports of servers that are down do, for the rest of
// the test. Each port stays bound (not listening) until the test ends or
// ListenOn takes it, so that no listener opened meanwhile (a proxy, a
// server of another package) can be given it and answer there.
func ClosedAddrs(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("reserving a closed port: %v", err)
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			syscall.Close(fd)
			t.Fatalf("reserving a closed port: %v", err)
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			syscall.Close(fd)
			t.Fatalf("reserving a closed port: %v", err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
		reserved.Store(addr, fd)
		t.Cleanup(func() { unreserve(addr) })
		addrs = append(addrs, addr)
	}
	return addrs
}

// reserved maps each address ClosedAddrs holds to its socket.
var reserved sync.Map

func unreserve(addr string) {
	if fd, ok := reserved.LoadAndDelete(addr); ok {
		syscall.Close(fd.(int))
	}
}

// ListenOn gives up the reservation of addr, an address from ClosedAddrs,
// and listens there: the server that was down is back. The listener is
// closed when the test ends.
func ListenOn(t testing.TB, addr string) net.Listener {
	t.Helper()
	unreserve(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ClosedAddr returns a loopback address nothing listens on.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	return ClosedAddrs(t, 1)[0]
}

// WantNewError calls newLocker, a backend constructor given bad input,
// and checks its outcome: an error containing want, no Locker beside it,
// and no panic.
func WantNewError(t testing.TB, what string, newLocker func() (locker.Locker, error), want string) {
	t.Helper()
	var l locker.Locker
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("%s panicked: %v", what, p)
			}
		}()
		l, err = newLocker()
	}()
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("%s = %v, want an error containing %q", what, err, want)
	}
	if l != nil {
		t.Errorf("%s returned a Locker with its error", what)
		l.Close()
	}
}

// SyncBuffer is a buffer that goroutines may write (a logger, a process's
// output) while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Len is how many bytes were written so far.
func (s *SyncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
