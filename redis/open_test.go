package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// acquireRelease opens raw, takes a lock, checks that a second Locker on
// the same URL finds it held, and releases it.
func acquireRelease(t *testing.T, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := locker.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer l.Close()
	other, err := locker.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer other.Close()
	key := fmt.Sprintf("open-test/%s/%d", t.Name(), time.Now().UnixNano())
	lk, err := l.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := other.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	// A waiter is woken by the release notice (pub/sub on this client too).
	got := make(chan error, 1)
	go func() {
		lk, err := other.Acquire(ctx, key)
		if err == nil {
			err = lk.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second): // the lock's TTL is 30 s
		t.Fatal("the waiter was not woken by the release")
	}
}

// withPath returns raw with its path set to path.
func withPath(t *testing.T, raw, path string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = path
	return u.String()
}

// TestOpenSentinel: redis+sentinel:// finds the master through the
// Sentinels, with or without a database; what cannot work fails Open.
func TestOpenSentinel(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisSentinelURL)
	t.Run("db0", func(t *testing.T) { acquireRelease(t, raw) })
	t.Run("db3", func(t *testing.T) { acquireRelease(t, raw+"/3") })
	sentinels := hostOf(t, raw)
	first := strings.Split(sentinels, ",")[0]
	single := hostOf(t, testenv.Get(t, testenv.RedisURL))
	testenv.WantOpenErrors(t, [][2]string{
		{raw + "?client=redigo", "client=redigo does not support Redis Sentinel"},
		{raw + "/99", "database 99 does not exist"},
		{withPath(t, raw, "/no-such-master"), `knows no master named "no-such-master"`},
		{withPath(t, raw, ""), "URL names no master"},
		{withPath(t, raw, "/locker/x"), `"/x" is not a database number`},
		{"redis+sentinel://" + single + "/locker", single + " is not a Redis Sentinel"},
		{"redis://" + first, first + " is a Redis Sentinel, not a data server: use redis+sentinel://"},
		{raw + "?cacert=/nonexistent", "need TLS: use rediss://"},
	})
}

// tlsURL returns the TLS server's URL with its query replaced by q
// (values relative to the certificate directory).
func tlsURL(t *testing.T, q map[string]string) string {
	t.Helper()
	dir := testenv.Get(t, testenv.RedisTLSDir)
	raw := "rediss://" + hostOf(t, testenv.Get(t, testenv.RedisTLSURL))
	v := url.Values{}
	for k, f := range q {
		if !strings.HasPrefix(f, "/") && f != "" {
			f = filepath.Join(dir, f)
		}
		v.Set(k, f)
	}
	if len(v) > 0 {
		raw += "?" + v.Encode()
	}
	return raw
}

// TestOpenTLS: rediss:// with the test CA and a client certificate (the
// server requires one), on both client libraries; and each way of getting
// TLS wrong fails Open with an error that names it.
func TestOpenTLS(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisTLSURL)
	for _, client := range []string{"goredis", "redigo"} {
		t.Run(client, func(t *testing.T) { acquireRelease(t, raw+"&client="+client) })
	}
	dir := testenv.Get(t, testenv.RedisTLSDir)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := map[string]string{"cacert": "ca.crt", "cert": "client.crt", "key": "client.key"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range full {
			m[kk] = vv
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	plain := hostOf(t, testenv.Get(t, testenv.RedisURL))
	tlsHost := hostOf(t, raw)
	for _, client := range []string{"goredis", "redigo"} {
		t.Run("errors/"+client, func(t *testing.T) {
			c := "&client=" + client
			testenv.WantOpenErrors(t, [][2]string{
				{tlsURL(t, with("cacert", "missing.crt")) + c, "cacert: open " + filepath.Join(dir, "missing.crt") + ": no such file"},
				{tlsURL(t, with("cacert", notPEM)) + c, "cacert " + notPEM + " holds no PEM certificate"},
				{tlsURL(t, with("key", "")) + c, "parameters cert and key go together"},
				{tlsURL(t, with("cert", "")) + c, "parameters cert and key go together"},
				{tlsURL(t, with("key", "missing.key")) + c, "client certificate (cert " + filepath.Join(dir, "client.crt") + ", key " + filepath.Join(dir, "missing.key") + ")"},
				// Without the test CA the server's certificate is unknown.
				{tlsURL(t, with("cacert", "")) + c, "certificate signed by unknown authority"},
				// The server requires a client certificate: its alert says
				// so, or, when the connection is reset before it is read,
				// DialTLS does.
				{tlsURL(t, map[string]string{"cacert": "ca.crt"}) + c, "certificate"},
				// TLS parameters on a scheme without TLS.
				{"redis://" + plain + "?cacert=" + filepath.Join(dir, "ca.crt") + c, "parameters cacert, cert and key need TLS: use rediss://"},
				// A plain-text client against the TLS server.
				{"redis://" + tlsHost + "?client=" + client, "if it expects TLS, use rediss://"},
			})
		})
		// A TLS client against a plain-text server: a plain-text Redis never
		// answers a TLS hello, so only an explicit check makes this prompt.
		t.Run("plain-server/"+client, func(t *testing.T) {
			start := time.Now()
			testenv.WantOpenErrors(t, [][2]string{
				{"rediss://" + plain + "?client=" + client, "TLS handshake with " + plain + " failed: the server answers in plain text"},
			})
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Open took %v, want it to fail promptly", d)
			}
		})
	}
}

// TestOpenChecks: Open refuses a database the server does not have and
// several hosts that are not a Redis Cluster, and opens a single Cluster
// node as a Cluster.
func TestOpenChecks(t *testing.T) {
	single := testenv.Get(t, testenv.RedisURL)
	redlockHosts := hostOf(t, testenv.Get(t, testenv.RedlockURL))
	clusterNode := strings.Split(hostOf(t, testenv.Get(t, testenv.RedisClusterURL)), ",")[0]
	testenv.WantOpenErrors(t, [][2]string{
		{single + "/99", "database 99 does not exist on " + hostOf(t, single) + ": it has 16 (0 to 15)"},
		{single + "/16?client=redigo", "database 16 does not exist on " + hostOf(t, single) + ": it has 16 (0 to 15)"},
		{"redis://" + redlockHosts, "not a Cluster node: for independent masters use redlock://" + redlockHosts + ", for one server give one host"},
		{"redis://" + redlockHosts + "?client=redigo", "does not support Redis Cluster"},
		{"redis://" + clusterNode + "/2", clusterNode + " is a Redis Cluster node, and a Cluster has database 0 only"},
		{"redis://" + clusterNode + "?client=redigo", "client=redigo does not support Redis Cluster (" + clusterNode + " is a Cluster node"},
	})
	t.Run("db15", func(t *testing.T) { acquireRelease(t, single+"/15") })
	// One node of a three-master Cluster: keys of every slot work, which
	// a plain client (answered MOVED for the other nodes' slots) cannot do.
	t.Run("cluster-node", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := locker.Open(ctx, "redis://"+clusterNode)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for i := range 30 {
			lk, err := l.TryAcquire(ctx, fmt.Sprintf("cluster-node/%d/%d", time.Now().UnixNano(), i))
			if err != nil {
				t.Fatalf("TryAcquire on a Cluster opened by one node: %v", err)
			}
			if err := lk.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestPasswordNeverPrinted: Opens that fail, each with a password in the
// URL (the user's, or the Sentinels' own), never print it.
func TestPasswordNeverPrinted(t *testing.T) {
	const secret = "s3cr3t-pw"
	single := hostOf(t, testenv.Get(t, testenv.RedisURL))
	sentinel := testenv.Get(t, testenv.RedisSentinelURL)
	sentinelHosts := hostOf(t, sentinel)
	tlsHost := hostOf(t, testenv.Get(t, testenv.RedisTLSURL))
	closed := "127.0.0.1:1"
	urls := []string{
		"redis://user:" + secret + "@" + single,
		"redis://:" + secret + "@" + single + "/99",
		"redis://user:" + secret + "@" + closed,
		"redis://user:" + secret + "@" + single + "?colour=red",
		"redis://user:" + secret + "@" + single + "?client=redigo",
		"rediss://user:" + secret + "@" + single,
		"rediss://user:" + secret + "@" + tlsHost + "?cacert=/nonexistent",
		"redis://user:" + secret + "@" + closed + "," + single,
		"redis+sentinel://user:" + secret + "@" + sentinelHosts + "/locker",
		"redis+sentinel://user:" + secret + "@" + sentinelHosts + "/nobody",
		"redis+sentinel://" + sentinelHosts + "/nobody?sentinel_user=u&sentinel_password=" + secret,
		"redis+sentinel://" + sentinelHosts + "/locker?sentinel_password=" + secret + "&colour=red",
		"redis+sentinel://" + closed + "/locker?sentinel_password=" + secret,
		"redis+sentinel://" + sentinelHosts + "/locker?sentinel_password=" + secret + "&client=redigo",
	}
	for _, raw := range urls {
		l, err := locker.Open(context.Background(), raw)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) succeeded, want an error", raw)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open of a URL with a password: the error prints it: %v", err)
		}
	}
}
