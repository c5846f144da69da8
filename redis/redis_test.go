package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformanceGoRedis(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedisURL)))
}

func TestConformanceRedigo(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.RedisURL)+"?client=redigo"))
}

// TestConformanceWakeList runs the suite on the alternative wake-up design
// (per-key list and BLPOP) that the benchmarks compare with pub/sub.
func TestConformanceWakeList(t *testing.T) {
	addr := hostOf(t, testenv.Get(t, testenv.RedisURL))
	conformance.Run(t, conformance.Harness{NewClient: func(ctx context.Context) (conformance.Client, error) {
		p, err := conformance.NewProxy(addr)
		if err != nil {
			return conformance.Client{}, err
		}
		c := goredis.NewClient(&goredis.Options{Addr: p.Addr()})
		l, err := redis.NewWakeList(c, nil)
		if err != nil {
			c.Close()
			p.Close()
			return conformance.Client{}, err
		}
		return conformance.Client{Locker: l, Crash: p.Cut, Cleanup: func() { c.Close(); p.Close() }}, nil
	}})
}

// TestConformanceCluster runs the suite against a three-master Redis
// Cluster. Each client reaches every node through its own proxy: go-redis
// learns node addresses from the cluster itself, so its dialer maps each
// node's address to that client's proxy for it, and Crash can cut the
// client off from the whole cluster.
func TestConformanceCluster(t *testing.T) {
	nodes := strings.Split(hostOf(t, testenv.Get(t, testenv.RedisClusterURL)), ",")
	conformance.Run(t, conformance.Harness{NewClient: func(ctx context.Context) (conformance.Client, error) {
		proxies := map[string]*conformance.Proxy{}
		closeAll := func() {
			for _, p := range proxies {
				p.Close()
			}
		}
		for _, n := range nodes {
			p, err := conformance.NewProxy(n)
			if err != nil {
				closeAll()
				return conformance.Client{}, err
			}
			proxies[n] = p
		}
		var d net.Dialer
		c := goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: nodes,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				p, ok := proxies[addr]
				if !ok {
					return nil, fmt.Errorf("no proxy for cluster node %s", addr)
				}
				return d.DialContext(ctx, network, p.Addr())
			},
		})
		l, err := redis.New(c, nil)
		if err != nil {
			c.Close()
			closeAll()
			return conformance.Client{}, err
		}
		return conformance.Client{
			Locker: l,
			Crash: func() {
				for _, p := range proxies {
					p.Cut()
				}
			},
			Cleanup: func() { c.Close(); closeAll() },
		}, nil
	}})
}

func hostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestFenceSurvivesDataLoss restarts the server without persistence, which
// loses the fence counter along with the lock: the next fence must still
// be larger, because the acquire script floors it at the server clock.
func TestFenceSurvivesDataLoss(t *testing.T) {
	s := testenv.StartRedis(t)
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	l, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var last uint64
	for round := range 3 {
		for range 3 {
			lk, err := l.Acquire(ctx, "fenced")
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			f, ok := lk.Fence()
			if !ok || f <= last {
				t.Fatalf("round %d: fence %d (ok=%v) after %d: must strictly increase", round, f, ok, last)
			}
			last = f
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := c.Exists(ctx, redis.LockKey("fenced")+":fence").Result(); err != nil || n != 1 {
			t.Fatalf("fence counter missing before restart: %v %v", n, err)
		}
		s.Stop()
		s.Start()
		if n, _ := c.Exists(ctx, redis.LockKey("fenced")+":fence").Result(); n != 0 {
			t.Fatalf("the restart kept the counter; this test needs a server without persistence")
		}
	}
}

// TestEvictionPolicy: a server that may evict keys under memory pressure is
// refused unless the user accepts the risk.
func TestEvictionPolicy(t *testing.T) {
	s := testenv.StartRedis(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	ctx := context.Background()
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()

	_, err := redis.New(c, nil)
	if err == nil || !strings.Contains(err.Error(), `maxmemory-policy is "volatile-lru"`) {
		t.Fatalf("New on a volatile-lru server: got %v, want an error naming the policy", err)
	}
	if _, err := locker.Open(ctx, "redis://"+s.Addr()); err == nil || !strings.Contains(err.Error(), "allow_eviction=true") {
		t.Fatalf("Open on a volatile-lru server: got %v, want an error naming the opt-out", err)
	}
	for _, open := range []func() (locker.Locker, error){
		func() (locker.Locker, error) { return redis.New(c, &redis.Options{AllowEviction: true}) },
		func() (locker.Locker, error) { return locker.Open(ctx, "redis://"+s.Addr()+"?allow_eviction=true") },
	} {
		l, err := open()
		if err != nil {
			t.Fatalf("with the opt-out: %v", err)
		}
		l.Close()
	}
	// Without a memory limit nothing is evicted, whatever the policy says.
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	l, err := redis.New(c, nil)
	if err != nil {
		t.Fatalf("volatile-lru without maxmemory: %v", err)
	}
	l.Close()
}

// TestConfigUnavailable: where CONFIG is disabled (as on managed Redis) the
// Locker opens and says once, through the logger, what it could not check.
func TestConfigUnavailable(t *testing.T) {
	s := testenv.StartRedis(t, "--rename-command", "CONFIG", "")
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	l, err := redis.New(c, &redis.Options{Config: locker.Config{Logger: log}})
	if err != nil {
		t.Fatalf("New without CONFIG: %v", err)
	}
	defer l.Close()
	if n := strings.Count(buf.String(), "cannot read maxmemory-policy"); n != 1 {
		t.Fatalf("want one warning about maxmemory-policy, got %d in %q", n, buf.String())
	}
	lk, err := l.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLostReplyCleanup: an acquire whose reply never arrives (the caller's
// deadline passes while the reply is on its way) must not leave an orphan
// lock behind.
func TestLostReplyCleanup(t *testing.T) {
	addr := hostOf(t, testenv.Get(t, testenv.RedisURL))
	p := testenv.Proxy(t, addr)
	ctx := context.Background()
	// As locker.Open builds its client: context deadlines bound reads.
	gc := goredis.NewClient(&goredis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	defer gc.Close()
	slow, err := redis.New(gc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	other, err := locker.Open(ctx, testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	raw := goredis.NewClient(&goredis.Options{Addr: addr})
	defer raw.Close()
	key := fmt.Sprintf("lost-reply/%d", time.Now().UnixNano())
	exists := func() bool {
		n, err := raw.Exists(ctx, redis.LockKey(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	// Open two connections first, by two blocking pops at once: the
	// acquire times out on one and the cleanup goes out on the other. A new
	// connection would wait for its handshake's replies.
	pops := make(chan error, 2)
	for range 2 {
		go func() { pops <- gc.BLPop(ctx, time.Second, key+"/none").Err() }()
	}
	for range 2 {
		if err := <-pops; !errors.Is(err, goredis.Nil) {
			t.Fatalf("BLPOP of an empty list: %v", err)
		}
	}
	if n := gc.PoolStats().IdleConns; n < 2 {
		t.Fatalf("%d idle connections after two concurrent pops, want 2", n)
	}

	// The proxy holds the server's replies back. The lock is taken on the
	// server, the caller's deadline passes, and the cleanup (whose reply is
	// held too) must delete the lock before TryAcquire returns.
	p.HoldReplies(true)
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		lk, err := slow.TryAcquire(actx, key, locker.WithTTL(time.Minute))
		if err == nil {
			lk.Release(ctx)
		}
		errc <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the server takes the lock", exists)
	testenv.WaitFor(t, 10*time.Second, "the cleanup deletes the lock", func() bool { return !exists() })
	p.HoldReplies(false)
	if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire whose reply was held past its deadline: %v, want a deadline error", err)
	}
	lk, err := other.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("the lost acquire left the key taken: %v", err)
	}
	lk.Release(ctx)
}

// TestRetriedAcquireFindsItsLock: an acquire retried by the client library
// after a lost reply finds its own lock and succeeds with the same fence,
// instead of reporting the key busy and leaving an orphan.
func TestRetriedAcquireFindsItsLock(t *testing.T) {
	// Run the acquire script twice with one token, as a retry does.
	c := goredis.NewClient(&goredis.Options{Addr: hostOf(t, testenv.Get(t, testenv.RedisURL))})
	defer c.Close()
	l, err := redis.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	key := fmt.Sprintf("retried/%d", time.Now().UnixNano())
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)
	f, _ := lk.Fence()
	token, err := c.Get(ctx, redis.LockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Eval(ctx, redis.AcquireScript(), []string{redis.LockKey(key), redis.LockKey(key) + ":fence"},
		token, 30000, 86400000).Result()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := v.([]any)
	if len(got) != 2 || got[0] != int64(1) || got[1] != int64(f) {
		t.Fatalf("acquire retried with the holder's token returned %v, want [1 %d]", v, f)
	}
	// Another token still finds the key busy.
	v, err = c.Eval(ctx, redis.AcquireScript(), []string{redis.LockKey(key), redis.LockKey(key) + ":fence"},
		"someone else", 30000, 86400000).Result()
	if got, _ := v.([]any); err != nil || len(got) != 2 || got[0] != int64(0) {
		t.Fatalf("acquire with another token returned %v, %v; want [0 pttl]", v, err)
	}
}

func TestOpenErrors(t *testing.T) {
	testenv.WantOpenErrors(t, [][2]string{
		{"redis://", "no host"},
		{"redis://127.0.0.1", "no port"},
		{"redis://127.0.0.1:6379/x", "not a database number"},
		{"redis://127.0.0.1:6379?client=jedis", `unknown client "jedis"`},
		{"redis://127.0.0.1:6379?colour=red", `"colour"`},
		{"redis://127.0.0.1:6379?allow_eviction=maybe", "allow_eviction"},
		{"redis://127.0.0.1:1,127.0.0.1:2?client=redigo", "does not support Redis Cluster"},
		{"redis://127.0.0.1:1,127.0.0.1:2/3", "no databases"},
	})
}

// TestServerDown: opening a Locker on a server that is not there fails
// promptly with an error that says so, for both client libraries.
func TestServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, client := range []string{"goredis", "redigo"} {
		_, err := locker.Open(context.Background(), "redis://"+addr+"?client="+client)
		if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: Open on a closed port: got %v, want an unreachable error", client, err)
		}
	}
}

// TestRedigoPool: NewRedigo over the user's own pool; the Locker does not
// close it.
func TestRedigoPool(t *testing.T) {
	addr := hostOf(t, testenv.Get(t, testenv.RedisURL))
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) }}
	defer pool.Close()
	l, err := redis.NewRedigo(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := "redigo-pool/" + strconv.FormatInt(time.Now().UnixNano(), 10)
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !testenv.Closed(lk.Lost()) {
		t.Fatal("Close left the lock open")
	}
	c := pool.Get()
	defer c.Close()
	if _, err := c.Do("PING"); err != nil {
		t.Fatalf("the Locker closed the user's pool: %v", err)
	}
	if n, _ := redigo.Int(c.Do("EXISTS", redis.LockKey(key))); n != 0 {
		t.Fatal("Close did not release the held lock")
	}
}
