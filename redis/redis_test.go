package redis_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/freeport"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/redis"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the suite against each kind of deployment the redis
// package opens, all at once (the cases spend their time waiting for
// TTLs): a single server through go-redis and through redigo, a
// three-master Cluster (the harness proxies every node the client learns
// of, so Crash cuts a client off from the whole cluster), the master a
// Sentinel group names (the harness proxies the Sentinels and that
// master), and TLS with client certificates.
func TestConformance(t *testing.T) {
	deployments := []struct{ name, url string }{
		{"go-redis", testenv.Get(t, testenv.RedisURL)},
		{"redigo", testenv.Get(t, testenv.RedisURL) + "?client=redigo"},
		{"cluster", testenv.Get(t, testenv.RedisClusterURL)},
		{"sentinel", testenv.Get(t, testenv.RedisSentinelURL)},
		{"tls", testenv.Get(t, testenv.RedisTLSURL)},
	}
	var wg sync.WaitGroup
	for _, d := range deployments {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(d.name, func(t *testing.T) { conformance.Run(t, conformance.URLHarness(d.url)) })
		}()
	}
	wg.Wait()
}

// TestURLHarnessTLSName checks that harness clients verify a server's
// certificate against the server's name in the URL, not against the
// address of the proxy they reach it through: the private server's
// certificate names localhost and not 127.0.0.1, where every proxy
// listens. Proxies put in the URL (ProxyURL) fail that check.
func TestURLHarnessTLSName(t *testing.T) {
	ctx := context.Background()
	p := testenv.NewPKI(t, "localhost")
	tlsPort, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(tlsPort)
	testenv.StartRedis(t, "--tls-port", port, "--tls-cert-file", p.ServerCert, "--tls-key-file", p.ServerKey,
		"--tls-ca-cert-file", p.CA, "--tls-auth-clients", "no")
	raw := "rediss://localhost:" + port + "?cacert=" + p.CA
	for _, client := range []string{"goredis", "redigo"} {
		t.Run(client, func(t *testing.T) {
			c, err := conformance.URLHarness(raw + "&client=" + client).NewClient(ctx)
			if err != nil {
				t.Fatalf("a harness client of %s: %v", raw, err)
			}
			defer c.Cleanup()
			defer c.Locker.Close()
			lk, err := c.Locker.TryAcquire(ctx, "tls-name")
			if err != nil {
				t.Fatal(err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
			c.Crash()
			if lk, err := c.Locker.TryAcquire(ctx, "tls-name"); err == nil {
				lk.Release(ctx)
				t.Error("TryAcquire after the crash succeeded: the client still reaches the server")
			}
		})
	}
	pu, proxies, err := conformance.ProxyURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	if l, err := locker.Open(ctx, pu); err == nil {
		l.Close()
		t.Errorf("Open(%s) through a proxy at 127.0.0.1 succeeded, though the certificate names only localhost", pu)
	} else if !strings.Contains(err.Error(), "127.0.0.1") || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Open(%s) = %v, want a certificate error naming 127.0.0.1", pu, err)
	}
}

// TestURLHarnessCutsEveryServer checks that a crashed harness client
// reaches no server, not even those it learnt of from others: each node
// of a Cluster (from CLUSTER SLOTS and redirects) and the master a
// Sentinel names. A client that still reached one would take the free
// key there instead of failing to connect.
func TestURLHarnessCutsEveryServer(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("cut-every-server/%d/", time.Now().UnixNano())
	t.Run("cluster", func(t *testing.T) {
		raw := testenv.Get(t, testenv.RedisClusterURL)
		// One key on each master.
		cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: strings.Split(hostOf(t, raw), ",")})
		defer cc.Close()
		byNode := map[string]string{}
		for i := 0; len(byNode) < 3; i++ {
			k := prefix + strconv.Itoa(i)
			m, err := cc.MasterForKey(ctx, redis.LockKey(k))
			if err != nil {
				t.Fatal(err)
			}
			byNode[m.Options().Addr] = k
		}
		wantCutOff(t, raw, slices.Collect(maps.Values(byNode)))
	})
	t.Run("sentinel", func(t *testing.T) {
		wantCutOff(t, testenv.Get(t, testenv.RedisSentinelURL), []string{prefix + "sentinel"})
	})
}

// wantCutOff has a client of conformance.URLHarness(raw) take and release
// keys (so that it is connected to the servers of each), crash, and checks
// that it reaches none of those servers. Nothing is held at the crash, so
// that closing the client takes no release timeout.
func wantCutOff(t *testing.T, raw string, keys []string) {
	t.Helper()
	// go-redis probes a pool whose dials kept failing once a second, and
	// the probe outlives the client by up to a second: wait it out.
	before := goleak.IgnoreCurrent()
	defer testenv.WaitFor(t, 5*time.Second, "the client's goroutines to end", func() bool { return goleak.Find(before) == nil })
	ctx := context.Background()
	c, err := conformance.URLHarness(raw).NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cleanup()
	defer c.Locker.Close()
	if c.Crash == nil {
		t.Fatal("the harness cannot crash a client")
	}
	for _, k := range keys {
		lk, err := c.Locker.TryAcquire(ctx, k, locker.WithTTL(time.Second))
		if err != nil {
			t.Fatalf("TryAcquire(%q) before the crash: %v", k, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatalf("Release(%q) before the crash: %v", k, err)
		}
	}
	c.Crash()
	// In parallel: a cut-off go-redis client takes seconds to give up
	// (dial retries, command retries, the cleanup of a lost reply).
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			lk, err := c.Locker.TryAcquire(cctx, k, locker.WithTTL(time.Second))
			if err == nil {
				lk.Release(ctx)
				t.Errorf("TryAcquire(%q) after the crash succeeded: the client still reaches the server of that key", k)
			}
		})
	}
	wg.Wait()
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
	addr := testenv.ClosedAddr(t)
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
