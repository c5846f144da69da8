package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
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

// TestEvictionPolicyCluster: on a Redis Cluster every master is checked,
// not only the node a CONFIG GET happens to reach. For each master in turn,
// all the others get a policy that can evict lock keys: Open and New must
// refuse the cluster and name every such master with its policy.
func TestEvictionPolicyCluster(t *testing.T) {
	nodes := strings.Split(hostOf(t, testenv.Get(t, testenv.RedisClusterURL)), ",")
	ctx := context.Background()
	clients := map[string]*goredis.Client{}
	for _, n := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: n})
		t.Cleanup(func() { c.Close() })
		clients[n] = c
		// Restore what the shared cluster had, whatever happens below.
		old, err := c.ConfigGet(ctx, "maxmemory*").Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, k := range []string{"maxmemory-policy", "maxmemory"} {
				if err := c.ConfigSet(context.Background(), k, old[k]).Err(); err != nil {
					t.Errorf("restoring %s on %s: %v", k, n, err)
				}
			}
		})
	}
	set := func(n, limit, policy string) {
		t.Helper()
		for k, v := range map[string]string{"maxmemory": limit, "maxmemory-policy": policy} {
			if err := clients[n].ConfigSet(ctx, k, v).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: nodes})
	defer cc.Close()
	url := "redis://" + strings.Join(nodes, ",")
	for i, good := range nodes {
		var bad []string
		for j, n := range nodes {
			if n == good {
				set(n, "0", "noeviction")
				continue
			}
			bad = append(bad, n)
			// The policies differ, so the error must say which is where.
			set(n, "1gb", []string{"volatile-lru", "allkeys-lfu", "volatile-ttl"}[j])
		}
		for name, open := range map[string]func() (locker.Locker, error){
			"Open": func() (locker.Locker, error) { return locker.Open(ctx, url) },
			"New":  func() (locker.Locker, error) { return redis.New(cc, nil) },
		} {
			l, err := open()
			if err == nil {
				l.Close()
				t.Errorf("round %d: %s succeeded with %v evicting (only %s is noeviction)", i, name, bad, good)
				continue
			}
			for _, n := range bad {
				j := slices.Index(nodes, n)
				if want := fmt.Sprintf("%q on %s", []string{"volatile-lru", "allkeys-lfu", "volatile-ttl"}[j], n); !strings.Contains(err.Error(), want) {
					t.Errorf("round %d: %s: %v; want it to name %s", i, name, err, want)
				}
			}
			if strings.Contains(err.Error(), "on "+good) {
				t.Errorf("round %d: %s: %v names %s, whose policy is noeviction", i, name, err, good)
			}
		}
	}
	for _, open := range []func() (locker.Locker, error){
		func() (locker.Locker, error) { return locker.Open(ctx, url+"?allow_eviction=true") },
		func() (locker.Locker, error) { return redis.New(cc, &redis.Options{AllowEviction: true}) },
	} {
		l, err := open()
		if err != nil {
			t.Fatalf("with the opt-out: %v", err)
		}
		l.Close()
	}
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
		{"redis://127.0.0.1:6379,,127.0.0.2", "empty host"},
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

// TestCloseEndsAcquireOwnClient: Close ends an Acquire waiting on a held
// key when the Locker runs on the caller's own client (New, NewRedigo),
// built as users build theirs: go-redis without ContextTimeoutEnabled. The
// waiter returns ErrClosed, unsubscribes, and the caller's client stays
// open; the key is free for the next acquirer once its holder releases it.
func TestCloseEndsAcquireOwnClient(t *testing.T) {
	addr := hostOf(t, testenv.Get(t, testenv.RedisURL))
	ctx := context.Background()
	raw := goredis.NewClient(&goredis.Options{Addr: addr})
	defer raw.Close()
	holder, err := locker.Open(ctx, testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	gc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer gc.Close()
	pool := &redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) }}
	defer pool.Close()
	for name, c := range map[string]struct {
		open func() (locker.Locker, error)
		ping func() error
	}{
		"goredis": {func() (locker.Locker, error) { return redis.New(gc, nil) }, func() error { return gc.Ping(ctx).Err() }},
		"redigo": {func() (locker.Locker, error) { return redis.NewRedigo(pool, nil) }, func() error {
			rc := pool.Get()
			defer rc.Close()
			_, err := rc.Do("PING")
			return err
		}},
	} {
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("close-ends-acquire/%s/%d", name, time.Now().UnixNano())
			channel := redis.LockKey(key) + ":released"
			subscribers := func() int64 {
				m, err := raw.PubSubNumSub(ctx, channel).Result()
				if err != nil {
					t.Fatal(err)
				}
				return m[channel]
			}
			lk, err := holder.Acquire(ctx, key, locker.WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			waiter, err := c.open()
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				lk, err := waiter.Acquire(ctx, key)
				if err == nil {
					lk.Release(ctx)
				}
				errc <- err
			}()
			// Waiting: subscribed to the key's release notices.
			testenv.WaitFor(t, 10*time.Second, "the waiter subscribes", func() bool { return subscribers() == 1 })
			if err := waiter.Close(); err != nil {
				t.Errorf("Close with an Acquire pending: %v", err)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, locker.ErrClosed) {
					t.Errorf("Acquire pending when its Locker closed: %v, want ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the pending Acquire did not return after Close")
			}
			testenv.WaitFor(t, 10*time.Second, "the closed waiter unsubscribes", func() bool { return subscribers() == 0 })
			if err := c.ping(); err != nil {
				t.Errorf("the Locker closed the caller's client: %v", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			next, err := holder.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("after the holder released, with a closed waiter before us: %v", err)
			}
			next.Release(ctx)
		})
	}
}

// TestOpenTTLRange: a default TTL the backend cannot honour fails Open,
// naming the range, rather than every Acquire.
func TestOpenTTLRange(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	testenv.WantOpenErrors(t, [][2]string{{raw + "?ttl=1ms", "below this backend's minimum of 5ms"}})
}
