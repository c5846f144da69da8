package testenv

import (
	"context"
	"net/url"
	"strings"
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
