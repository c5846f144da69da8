package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// rawTestBackends are the backends with servers, and the variable that
// names each one's test server.
var rawTestBackends = []struct{ backend, env string }{
	{"redis", envRedis},
	{"redlock", envRedlock},
	{"zookeeper", envZK},
	{"etcd", envEtcd},
	{"postgres", envPostgres},
}

// rawTestNames are the raw designs each backend offers.
var rawTestNames = map[string][]string{
	"redis": {"raw"}, "redlock": {"raw"}, "zookeeper": {"raw"}, "etcd": {"raw"},
	"postgres": {"raw", "raw-advisory"},
}

// rawTestKey is a key no other test run uses, so runs cannot disturb each
// other through keys left on the shared servers.
func rawTestKey(t *testing.T) string {
	return fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// rawTestOpen opens a client of d, closed when the test ends, which fails
// the test if Close does.
func rawTestOpen(t *testing.T, d Design) Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.Open(ctx)
	if err != nil {
		t.Fatalf("%s/%s: Open: %v", d.Backend, d.Name, err)
	}
	t.Cleanup(func() { rawTestClose(t, d, c) })
	return c
}

// rawTestClose closes c, failing the test if Close fails or hangs.
func rawTestClose(t *testing.T, d Design, c Client) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s/%s: Close: %v", d.Backend, d.Name, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s/%s: Close did not return within 5s", d.Backend, d.Name)
	}
}

// rawTestDesigns are the raw designs of backend, checked for their
// names and fields.
func rawTestDesigns(t *testing.T, backend, env string) []Design {
	t.Helper()
	ds, err := RawDesigns(backend, serverURL(t, env))
	if err != nil {
		t.Fatalf("RawDesigns(%s): %v", backend, err)
	}
	var names []string
	for _, d := range ds {
		names = append(names, d.Name)
		if d.Backend != backend || d.Kind != KindRaw || d.Waits || d.Open == nil {
			t.Fatalf("RawDesigns(%s) = %+v, want Backend %s, Kind raw, Waits false, an Open", backend, d, backend)
		}
	}
	if want := rawTestNames[backend]; !slices.Equal(names, want) {
		t.Fatalf("RawDesigns(%s) names = %v, want %v", backend, names, want)
	}
	return ds
}

// rawTestDesign is the raw design of backend named name.
func rawTestDesign(t *testing.T, backend, env, name string) Design {
	t.Helper()
	for _, d := range rawTestDesigns(t, backend, env) {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("RawDesigns(%s) has no design %s", backend, name)
	return Design{}
}

// rawTestLeaks fails the test if goroutines it started outlive it. Call
// it first, so that its check runs after the test's Cleanups (Close).
func rawTestLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func rawMustLock(t *testing.T, c Client, key string, ttl time.Duration) Unlock {
	t.Helper()
	u, err := c.Lock(context.Background(), key, ttl)
	if err != nil {
		t.Fatalf("Lock(%q): %v", key, err)
	}
	return u
}

func rawWantBusy(t *testing.T, c Client, key, who string) {
	t.Helper()
	if _, err := c.Lock(context.Background(), key, 10*time.Second); !errors.Is(err, ErrBusy) {
		t.Fatalf("%s: Lock of a held key = %v, want ErrBusy", who, err)
	}
}

// TestRawExclusion: a held key is busy for everyone, its holder
// included; Unlock frees it; a stale Unlock (of a lock already released
// and taken by another) reports it and leaves the new holder's lock
// alone.
func TestRawExclusion(t *testing.T) {
	for _, b := range rawTestBackends {
		for _, name := range rawTestNames[b.backend] {
			t.Run(b.backend+"/"+name, func(t *testing.T) { rawTestExclusion(t, rawTestDesign(t, b.backend, b.env, name)) })
		}
	}
}

func rawTestExclusion(t *testing.T, d Design) {
	rawTestLeaks(t)
	c1, c2 := rawTestOpen(t, d), rawTestOpen(t, d)
	key, ctx := rawTestKey(t), context.Background()

	u1 := rawMustLock(t, c1, key, 10*time.Second)
	rawWantBusy(t, c2, key, "another client")
	rawWantBusy(t, c1, key, "the holder")
	if err := u1(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	u2 := rawMustLock(t, c2, key, 10*time.Second)
	if err := u1(ctx); !errors.Is(err, rawErrNotHeld) {
		t.Fatalf("stale Unlock = %v, want rawErrNotHeld", err)
	}
	rawWantBusy(t, c1, key, "after a stale Unlock")
	if err := u2(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if u := rawMustLock(t, c1, "other-"+key, 10*time.Second); u(ctx) != nil {
		t.Fatal("Unlock of another key failed")
	}
}

// TestRawRedisTTL: the Redis designs set the TTL, so a lock whose holder
// never releases it frees itself, and its holder's late Unlock cannot
// delete the next holder's lock.
func TestRawRedisTTL(t *testing.T) {
	for _, b := range rawTestBackends[:2] {
		t.Run(b.backend, func(t *testing.T) {
			rawTestLeaks(t)
			d := rawTestDesign(t, b.backend, b.env, "raw")
			c1, c2 := rawTestOpen(t, d), rawTestOpen(t, d)
			key, ctx := rawTestKey(t), context.Background()

			// A TTL that a stall of the machine does not run out before
			// the first check.
			u1 := rawMustLock(t, c1, key, time.Second)
			rawWantBusy(t, c2, key, "before the TTL")
			time.Sleep(1200 * time.Millisecond)
			u2 := rawMustLock(t, c2, key, 10*time.Second)
			if err := u1(ctx); !errors.Is(err, rawErrNotHeld) {
				t.Fatalf("Unlock after the TTL = %v, want rawErrNotHeld", err)
			}
			rawWantBusy(t, c1, key, "after the expired holder's Unlock")
			if err := u2(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if _, err := c1.Lock(ctx, key, 0); err == nil || !strings.Contains(err.Error(), "ttl") {
				t.Fatalf("Lock with ttl 0 = %v, want an error about the ttl", err)
			}
		})
	}
}

// TestRawSessionRelease: on etcd and ZooKeeper a lock lives as long as
// its client's lease or session, so closing the client frees it at once;
// a PostgreSQL advisory lock lives as long as its session, which the
// server ends just after Close has said goodbye: soon, if not at once.
func TestRawSessionRelease(t *testing.T) {
	for _, b := range []struct{ backend, env, design string }{
		{"zookeeper", envZK, "raw"}, {"etcd", envEtcd, "raw"}, {"postgres", envPostgres, "raw-advisory"},
	} {
		t.Run(b.backend+"/"+b.design, func(t *testing.T) {
			rawTestLeaks(t)
			d := rawTestDesign(t, b.backend, b.env, b.design)
			c2 := rawTestOpen(t, d)
			key := rawTestKey(t)

			c1, err := d.Open(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rawMustLock(t, c1, key, 10*time.Second)
			rawWantBusy(t, c2, key, "while the holder lives")
			if err := c1.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			var u Unlock
			for deadline := time.Now().Add(10 * time.Second); u == nil; {
				if u, err = c2.Lock(context.Background(), key, 10*time.Second); err != nil && (!errors.Is(err, ErrBusy) || time.Now().After(deadline)) {
					t.Fatalf("Lock after the holder closed: %v", err)
				}
				if b.backend != "postgres" && u == nil {
					t.Fatal("Lock after the holder closed: busy, want the key freed with the session")
				}
				time.Sleep(time.Millisecond)
			}
			if err := u(context.Background()); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
		})
	}
}

// TestRawZKQueue: a busy attempt leaves the queue as it found it: the
// holder's node alone, not a dead entry per attempt.
func TestRawZKQueue(t *testing.T) {
	rawTestLeaks(t)
	zkURL := serverURL(t, envZK)
	d := rawTestDesign(t, "zookeeper", envZK, "raw")
	c1, c2 := rawTestOpen(t, d), rawTestOpen(t, d)
	key := rawTestKey(t)
	u := rawMustLock(t, c1, key, time.Second)
	for range 3 {
		rawWantBusy(t, c2, key, "another client")
	}

	target, err := rawParseURL("zookeeper", zkURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := rawZKConnect(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	children, _, err := conn.Children(rawZKRoot(target, "raw") + "/" + rawZKName(key))
	if err != nil || len(children) != 1 {
		t.Fatalf("queue after 3 busy attempts: %v, %v; want the holder's node only", children, err)
	}
	if err := u(context.Background()); err != nil {
		t.Fatal(err)
	}
	children, _, err = conn.Children(rawZKRoot(target, "raw") + "/" + rawZKName(key))
	if err != nil || len(children) != 0 {
		t.Fatalf("queue after Unlock: %v, %v; want it empty", children, err)
	}
}

// TestRawRedlockQuorum: the fan-out takes a key that a minority of the
// nodes hold for someone else, refuses one that a majority hold, and
// after a refusal leaves nothing of its own on the free nodes.
func TestRawRedlockQuorum(t *testing.T) {
	rawTestLeaks(t)
	redlockURL := serverURL(t, envRedlock)
	d := rawTestDesign(t, "redlock", envRedlock, "raw")
	c := rawTestOpen(t, d)
	target, err := rawParseURL("redlock", redlockURL)
	if err != nil {
		t.Fatal(err)
	}
	if len(target.hosts) < 3 {
		t.Fatalf("%s names %d nodes, the test needs 3 or more", envRedlock, len(target.hosts))
	}
	nodes := make([]*goredis.Client, len(target.hosts))
	for i, h := range target.hosts {
		nodes[i] = rawRedisClient(target, h)
		defer nodes[i].Close()
	}
	ctx, quorum := context.Background(), len(nodes)/2+1

	// occupy sets key on the first n nodes under someone else's token.
	occupy := func(key string, n int) {
		for _, rdb := range nodes[:n] {
			if err := rdb.Set(ctx, rawNamespace("raw")+key, "someone-else", 10*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	minority := rawTestKey(t) + "/minority"
	occupy(minority, quorum-1)
	if err := rawMustLock(t, c, minority, 10*time.Second)(ctx); err != nil {
		t.Fatalf("Unlock of a lock held on a bare majority: %v", err)
	}

	majority := rawTestKey(t) + "/majority"
	occupy(majority, quorum)
	rawWantBusy(t, c, majority, "a key a majority holds")
	for i, rdb := range nodes[quorum:] {
		if n, err := rdb.Exists(ctx, rawNamespace("raw")+majority).Result(); err != nil || n != 0 {
			t.Errorf("free node %d after a refused round: exists=%d, %v; want the round's SET undone", quorum+i, n, err)
		}
	}
}

// rawTestBadURLs are inputs that RawDesigns and PeerDesigns refuse, with
// a word the error must contain.
var rawTestBadURLs = []struct{ backend, url, want string }{
	{"mysql", "mysql://127.0.0.1:3306", `unknown backend "mysql"`},
	{"", "redis://127.0.0.1:6379", "unknown backend"},
	{"redis", "127.0.0.1:6379", "no scheme"},
	{"redis", "", "no scheme"},
	{"redis", "etcd://127.0.0.1:2379", `scheme "etcd"`},
	{"redis", "rediss://127.0.0.1:6379", `scheme "rediss"`},
	{"redis", "redis+sentinel://127.0.0.1:26379/m", `scheme "redis+sentinel"`},
	{"redis", "redis://127.0.0.1:1,127.0.0.1:2", "several hosts"},
	{"redis", "redis://127.0.0.1:6379/abc", `database "abc"`},
	{"redis", "redis://127.0.0.1:99999", "port"},
	{"redis", "redis://:secret@", "no host"},
	{"redlock", "redlock://h1:1,,h2:2", `host ""`},
	{"redlock", "redlock://h1:x,h2:2", "port"},
	{"zookeeper", "zookeeper://[::1/root", "host"},
	{"zookeeper", "zookeeper://127.0.0.1:2181/a//b", "empty node name"},
	{"etcd", "etcds://127.0.0.1:2379", `scheme "etcds"`},
	{"etcd", "etcd://user:secret@h1:%zz", "host"},
	{"postgres", "redis://127.0.0.1:6379", `scheme "redis"`},
	{"postgres", "postgres://user:secret@h1:99999/db", "port"},
}

// TestRawPeerBadInput: a URL or backend the designs cannot use is an
// error naming the problem, from both RawDesigns and PeerDesigns, and no
// password in the URL appears in it. memory has no designs and no error.
func TestRawPeerBadInput(t *testing.T) {
	for name, f := range map[string]func(string, string) ([]Design, error){"RawDesigns": RawDesigns, "PeerDesigns": PeerDesigns} {
		for _, tc := range rawTestBadURLs {
			ds, err := f(tc.backend, tc.url)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s(%q, %q) = %v, %v; want an error containing %q", name, tc.backend, tc.url, ds, err, tc.want)
				continue
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("%s(%q, %q): error %q shows the password", name, tc.backend, tc.url, err)
			}
		}
		if ds, err := f("memory", "memory://"); ds != nil || err != nil {
			t.Errorf("%s(memory) = %v, %v; want nil, nil", name, ds, err)
		}
		for _, ok := range []struct{ backend, url string }{
			{"redis", "redis://user:pw@localhost/2?ttl=5s"},
			{"redlock", "redlock://a,b:7000,[::1]:7001"},
			{"zookeeper", "zk://h1,h2:2182/chroot/sub"},
			{"etcd", "ETCD://h1:2379,h2:2379/prefix"},
		} {
			if ds, err := f(ok.backend, ok.url); err != nil || len(ds) == 0 {
				t.Errorf("%s(%q, %q) = %v, %v; want designs", name, ok.backend, ok.url, ds, err)
			}
		}
	}
}

// TestRawPeerUnreachable: Open on a server that is not there fails
// within the context's deadline, with an error, on every backend.
func TestRawPeerUnreachable(t *testing.T) {
	rawTestLeaks(t)
	urls := map[string]string{
		"redis": "redis://127.0.0.1:1", "redlock": "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
		"zookeeper": "zookeeper://127.0.0.1:1", "etcd": "etcd://127.0.0.1:1",
		"postgres": "postgres://127.0.0.1:1/locker?sslmode=disable",
	}
	for backend, u := range urls {
		raw, err := RawDesigns(backend, u)
		if err != nil {
			t.Fatal(err)
		}
		peers, err := PeerDesigns(backend, u)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append(raw, peers...) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			start := time.Now()
			c, err := d.Open(ctx)
			cancel()
			if err == nil {
				c.Close()
				t.Errorf("%s/%s: Open of an unreachable server succeeded", backend, d.Name)
			} else if took := time.Since(start); took > 3*time.Second {
				t.Errorf("%s/%s: Open took %v to fail", backend, d.Name, took)
			}
		}
	}
}

// TestRawParseURL: what the designs read of a URL.
func TestRawParseURL(t *testing.T) {
	tg, err := rawParseURL("redlock", "redlock://u:p@a,b:7000,[::1]:7001/3?client=redigo")
	if err != nil {
		t.Fatal(err)
	}
	db, _ := tg.redisDB()
	if got := strings.Join(tg.hosts, " "); got != "a:6379 b:7000 [::1]:7001" || tg.user != "u" || tg.password != "p" || db != 3 {
		t.Errorf("redlock URL read as %+v, db %d", tg, db)
	}
	tg, err = rawParseURL("zookeeper", "zk://h/chroot/sub")
	if err != nil {
		t.Fatal(err)
	}
	if got := rawZKRoot(tg, "raw"); got != "/chroot/sub/lockctl-bench/raw" || tg.hosts[0] != "h:2181" {
		t.Errorf("zookeeper root %q, hosts %v", got, tg.hosts)
	}
	tg, err = rawParseURL("etcd", "etcd://h/app")
	if err != nil {
		t.Fatal(err)
	}
	if got := rawEtcdPrefix(tg, "raw"); got != "app/lockctl-bench/raw/" || tg.hosts[0] != "h:2379" {
		t.Errorf("etcd prefix %q, hosts %v", got, tg.hosts)
	}
	for _, key := range []string{".", "..", "", "a/b", "sp ace", "ünï", "\x00"} {
		if n := rawZKName(key); strings.ContainsAny(n, "/ \x00") || n == "." || n == ".." || !strings.HasPrefix(n, "k-") {
			t.Errorf("rawZKName(%q) = %q, not one safe node name", key, n)
		}
	}
}
