package gocronlocker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"

	_ "github.com/distlock/locker/etcd"
	_ "github.com/distlock/locker/memory"
	_ "github.com/distlock/locker/redis"
	_ "github.com/distlock/locker/redlock"
	_ "github.com/distlock/locker/zookeeper"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend is one backend the end-to-end tests run on.
type backend struct {
	name string
	env  string // the LOCKER_TEST_* variable with its server's URL; "" for memory
}

var backends = []backend{
	{"memory", ""},
	{"redis", testenv.RedisURL},
	{"redlock", testenv.RedlockURL},
	{"zookeeper", testenv.ZooKeeperURL},
	{"etcd", testenv.EtcdURL},
}

// serverTTL is the TTL of the tests' locks on a server: etcd's smallest
// lease (2s by default), within ZooKeeper's session range.
const serverTTL = 2 * time.Second

// unique numbers the stores and key prefixes of the tests, so that no two
// tests, and no two runs against the shared servers, meet.
var unique atomic.Int64

// openLockers opens n Lockers on b, as n processes of one deployment
// would: clients of their own over one store (memory: one named store;
// a server: keys under a prefix of this call's own). It skips the test,
// or fails it under LOCKER_REQUIRE_SERVERS=1, when b's server is not
// configured.
func openLockers(t *testing.T, b backend, n int) ([]locker.Locker, time.Duration) {
	t.Helper()
	id := fmt.Sprintf("gocronlocker-%d-%d", time.Now().UnixNano(), unique.Add(1))
	raw, ttl := "memory://"+id+"?ttl=1s", time.Second
	if b.env != "" {
		base := testenv.Get(t, b.env)
		q := url.Values{"ttl": {serverTTL.String()}, "prefix": {id + "/"}}
		raw, ttl = base+"?"+q.Encode(), serverTTL
		if strings.Contains(base, "?") {
			raw = base + "&" + q.Encode()
		}
	}
	ls := make([]locker.Locker, n)
	for i := range ls {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := locker.Open(ctx, raw)
		cancel()
		if err != nil {
			t.Fatalf("open %s instance %d: %v", b.name, i, err)
		}
		t.Cleanup(func() { l.Close() })
		ls[i] = l
	}
	return ls, ttl
}

// testLogger logs to t, for as long as the test runs.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// waitFor waits until cond holds, looking again each time changed says
// something changed (and every 50 ms besides), and fails the test if it
// does not hold within d; what says what was awaited.
func waitFor(t *testing.T, changed <-chan struct{}, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-changed:
		case <-tick.C:
		case <-deadline.C:
			if !cond() {
				t.Fatalf("%s: not within %v", what, d)
			}
			return
		}
	}
}

// notify sends on ch without blocking: ch has a buffer of one, so a
// waiter learns that something changed since it last looked.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
