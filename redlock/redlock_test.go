package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedlockURL)))
}

// nodes starts n private redis-servers and returns them with a redlock URL
// naming them all.
func nodes(t *testing.T, n int) ([]*testenv.Redis, string) {
	t.Helper()
	var srv []*testenv.Redis
	var hosts []string
	for range n {
		s := testenv.StartRedis(t)
		srv = append(srv, s)
		hosts = append(hosts, s.Addr())
	}
	return srv, "redlock://" + strings.Join(hosts, ",")
}

func mustOpen(t *testing.T, url string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// proxiedNodes starts n private redis-servers, each behind a proxy, and
// returns them with a function that opens a Locker on the proxies. A
// node that is down then fails a request at once, by itself: the proxy
// accepts the connection and closes it, finding no server, and the
// clients do not retry. (A client dialing a stopped server directly
// retries with a backoff and, after enough failed dials, refuses to dial
// for up to a second after the server is back.) The nodes that are up
// have a node timeout that they meet however loaded the machine: nothing
// in the tests with nodes down depends on how long anything takes.
func proxiedNodes(t *testing.T, n int) ([]*testenv.Redis, func() locker.Locker) {
	t.Helper()
	srv, _ := nodes(t, n)
	var addrs []string
	for _, s := range srv {
		addrs = append(addrs, testenv.Proxy(t, s.Addr()).Addr())
	}
	return srv, func() locker.Locker {
		t.Helper()
		return newLocker(t, addrs, time.Minute)
	}
}

// TestMinorityDown stops two of five nodes: locks are still acquired,
// exclusive and released; a restarted node (empty) rejoins.
func TestMinorityDown(t *testing.T) {
	srv, open := proxiedNodes(t, 5)
	a, b := open(), open()
	ctx := context.Background()
	srv[0].Stop()
	srv[3].Stop()
	for i := range 3 {
		lk, err := a.Acquire(ctx, "k", locker.WithTTL(5*time.Second))
		if err != nil {
			t.Fatalf("round %d: Acquire with 3 of 5 nodes up: %v", i, err)
		}
		if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("round %d: second client's TryAcquire on a held key: %v, want ErrNotAcquired", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("round %d: Release with 3 of 5 nodes up: %v", i, err)
		}
		lk, err = b.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: TryAcquire after release: %v", i, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv[0].Start()
	srv[3].Start()
	lk, err := a.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the nodes came back: %v", err)
	}
	defer lk.Release(ctx)
}

// TestMajorityDown stops three of five nodes: TryAcquire fails at once,
// with an error naming the missing majority; Acquire tries again until
// its context ends, and then fails with the same, wrapped with the
// context's error; one still waiting when the nodes are restarted gets
// the lock.
func TestMajorityDown(t *testing.T) {
	srv, _ := nodes(t, 5)
	var addrs []string
	for _, s := range srv {
		addrs = append(addrs, testenv.Proxy(t, s.Addr()).Addr())
	}
	var logs logBuffer
	l, err := locker.Open(context.Background(), "redlock://"+strings.Join(addrs, ","), locker.WithLogger(logs.logger()))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, s := range srv[:3] {
		s.Stop()
	}
	wantNoMajority := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s succeeded with 2 of 5 nodes up", op)
		}
		if errors.Is(err, locker.ErrNotAcquired) || !strings.Contains(err.Error(), "only 2 of 5 nodes answered, 3 needed") {
			t.Fatalf("%s: %v; want it to say only 2 of 5 nodes answered", op, err)
		}
		for _, a := range addrs[:3] {
			if !strings.Contains(err.Error(), a+": ") {
				t.Fatalf("%s: %v; want it to name the node down %s", op, err, a)
			}
		}
	}
	_, err = l.TryAcquire(context.Background(), "k")
	wantNoMajority("TryAcquire", err)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire: %v; want it to fail by itself", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = l.Acquire(ctx, "k")
	cancel()
	wantNoMajority("Acquire", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire: %v; want it to try again until its context ended", err)
	}
	t.Logf("Acquire with 3 of 5 nodes down: %v", err)

	// The nodes come back while an Acquire waits: it gets the lock.
	calls := scriptCalls(t, srv[3].Addr())
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		lk, err := l.Acquire(ctx, "k")
		if err == nil {
			err = lk.Release(context.Background())
		}
		got <- err
	}()
	// The nodes stay down until a round of it failed: it reached a node
	// that is up, and was undone there.
	testenv.WaitFor(t, 30*time.Second, "a failed round of the waiting Acquire", func() bool {
		return scriptCalls(t, srv[3].Addr()) >= calls+2
	})
	for _, s := range srv[:3] {
		s.Start()
	}
	if err := <-got; err != nil {
		t.Fatalf("Acquire while the nodes came back: %v", err)
	}
}

// scriptCalls is how many scripts the server at addr has run.
func scriptCalls(t *testing.T, addr string) int {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cmd := range []string{"evalsha", "eval"} {
		_, rest, ok := strings.Cut(info, "cmdstat_"+cmd+":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		k, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("commandstats of %s: %q", addr, info)
		}
		n += k
	}
	return n
}

// TestMajorityUnresponsive puts three of five nodes behind proxies that
// hold back every reply, as a hung or partitioned server would. Open
// fails, naming them. On a Locker opened before they hung, Acquire must
// give up on them after its per-node timeouts, round after round until
// its context ends, and fail with an error that names them. The replies are held
// until the test ends, so no answer from those nodes can come in time,
// however slow the machine.
func TestMajorityUnresponsive(t *testing.T) {
	srv, _ := nodes(t, 5)
	var hosts, hung []string
	var proxies []*conformance.Proxy
	for i, s := range srv {
		if i >= 3 {
			hosts = append(hosts, s.Addr())
			continue
		}
		p := testenv.Proxy(t, s.Addr())
		proxies = append(proxies, p)
		hosts = append(hosts, p.Addr())
		hung = append(hung, p.Addr())
	}
	const nodeTimeout = 50 * time.Millisecond
	url := "redlock://" + strings.Join(hosts, ",") + "?node_timeout=" + nodeTimeout.String()
	l := mustOpen(t, url)
	for _, p := range proxies {
		p.HoldReplies(true)
	}
	if other, err := locker.Open(context.Background(), url); err == nil {
		other.Close()
		t.Errorf("Open with 3 of 5 nodes hung succeeded; want an error naming them")
	} else {
		for _, h := range hung {
			if !strings.Contains(err.Error(), h+": ") {
				t.Errorf("Open with 3 of 5 nodes hung: %v; want it to name %s", err, h)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := l.Acquire(ctx, "k")
	took := time.Since(start)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with 3 of 5 nodes hung: %v after %v; want it to try until its context ended", err, took)
	}
	// How many of the two live nodes made it within 50ms depends on the
	// machine; that the three hung ones did not, does not.
	if !strings.Contains(err.Error(), "of 5 nodes answered, 3 needed") {
		t.Fatalf("Acquire: %v; want it to say a majority did not answer", err)
	}
	for _, h := range hung {
		// "addr: no answer within 50ms", or the client's own deadline
		// error when it gave up at the same moment.
		i := strings.Index(err.Error(), h+": ")
		if i < 0 {
			t.Fatalf("Acquire: %v; want it to name the hung node %s", err, h)
		}
		what, _, _ := strings.Cut(err.Error()[i+len(h)+2:], ";")
		if !strings.Contains(what, "no answer within 50ms") && !strings.Contains(what, "deadline exceeded") && !strings.Contains(what, "timeout") {
			t.Errorf("Acquire: hung node %s failed with %q; want the per-node timeout", h, what)
		}
	}
	t.Logf("Acquire with 3 of 5 nodes hung failed after %v: %v", took, err)
}

func TestOpenErrors(t *testing.T) {
	testenv.WantOpenErrors(t, [][2]string{
		{"redlock://", "URL has no host"},
		{"redlock://127.0.0.1,127.0.0.1:6379", "listed twice"}, // a host without a port gets 6379
		{"redlock://127.0.0.1:1,127.0.0.1:1", "listed twice"},
		{"redlock://127.0.0.1:1?node_timeout=-1s", "NodeTimeout must be positive"},
		{"redlock://127.0.0.1:1?drift_factor=2", "DriftFactor must be in [0, 1)"},
		{"redlock://127.0.0.1:1?drift_factor=x", "drift_factor \"x\" is not a number"},
		{"redlock://127.0.0.1:1?client=memcached", "unknown client"},
		{"redlock://127.0.0.1:1?bogus=1", "bogus"},
		{"redlock://127.0.0.1:1/x", "not a database number"},
	})
}

// TestEviction: nodes whose maxmemory-policy can evict lock keys are
// refused unless allowed, and the error names every one of them with its
// policy, not only the first found.
func TestEviction(t *testing.T) {
	_, url := nodes(t, 3)
	bad1 := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	bad2 := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
	url += "," + bad1.Addr() + "," + bad2.Addr()
	for _, client := range []string{"goredis", "redigo"} {
		l, err := locker.Open(context.Background(), url+"?client="+client)
		if err == nil {
			l.Close()
			t.Fatalf("%s: Open succeeded with two nodes whose maxmemory-policy can evict", client)
		}
		for _, want := range []string{fmt.Sprintf("%q on %s", "allkeys-lru", bad1.Addr()), fmt.Sprintf("%q on %s", "volatile-ttl", bad2.Addr()), "allow_eviction=true"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: Open: %v; want it to name %s", client, err, want)
			}
		}
		mustOpen(t, url+"?allow_eviction=true&client="+client)
	}
}

// TestRedigo runs the suite through redigo pools.
func TestRedigo(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedlockURL)+"?client=redigo"))
}

// TestOpenTLS: redlocks:// takes cacert, cert and key as rediss:// does
// (here one node, the test TLS server, which requires a client
// certificate), on both client libraries; the parameters on redlock://
// and a plain-text node given as redlocks:// fail Open, saying so.
func TestOpenTLS(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisTLSURL)
	_, query, _ := strings.Cut(raw, "?")
	tlsNode := testenv.Hosts(t, raw)[0]
	ctx := context.Background()
	for _, client := range []string{"goredis", "redigo"} {
		t.Run(client, func(t *testing.T) {
			l, err := locker.Open(ctx, "redlocks://"+tlsNode+"?"+query+"&allow_few_nodes=true&client="+client)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lk, err := l.Acquire(ctx, "tls")
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	plainNode := testenv.Hosts(t, testenv.Get(t, testenv.RedlockURL))[0]
	testenv.WantOpenErrors(t, [][2]string{
		{"redlock://" + tlsNode + "?" + query + "&allow_few_nodes=true", "use redlocks:// instead of redlock://"},
		{"redlocks://" + plainNode + "?allow_few_nodes=true", "plain text"},
	})
}
