package redis_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/doctortest"
	"github.com/distlock/locker/internal/testenv"
)

// TestDiagnoseDevServers: the development servers (one server, over
// redigo too, TLS, a Cluster, a Sentinel group) have no failing finding,
// and every server they lead to is checked.
func TestDiagnoseDevServers(t *testing.T) {
	for _, env := range []string{testenv.RedisURL, testenv.RedisTLSURL, testenv.RedisClusterURL, testenv.RedisSentinelURL} {
		t.Run(env, func(t *testing.T) {
			raw := testenv.Get(t, env)
			urls := []string{raw}
			if env == testenv.RedisURL {
				urls = append(urls, raw+"?client=redigo")
			}
			for _, raw := range urls {
				d := doctortest.Diagnose(t, raw)
				if d.Worst() == locker.Fail {
					t.Errorf("a failing finding on the development servers: %s", doctortest.Show(d))
				}
				servers := 0
				for _, f := range d.Findings {
					if f.Check == "reachable" {
						servers++
						for _, check := range []string{"maxmemory-policy", "persistence", "replication", "rtt"} {
							doctortest.Finding(t, d, check, f.Target)
						}
					}
				}
				switch env {
				case testenv.RedisClusterURL:
					if servers < 3 {
						t.Errorf("%d servers checked, want every node of the Cluster: %s", servers, doctortest.Show(d))
					}
					doctortest.Finding(t, d, "cluster", testenv.Hosts(t, raw)[0])
				case testenv.RedisSentinelURL:
					for _, h := range testenv.Hosts(t, raw) {
						doctortest.WantStatus(t, doctortest.Finding(t, d, "sentinel", h), locker.Pass, "as master")
					}
					fallthrough
				default:
					if servers != 1 {
						t.Errorf("%d servers checked, want 1: %s", servers, doctortest.Show(d))
					}
				}
			}
		})
	}
}

// TestDiagnoseEviction: a server that may evict lock keys, which Open
// refuses, fails the eviction check (and so the whole Diagnosis) with
// the fix; allow_eviction=true makes it a warning; a policy that evicts
// on a server without a memory limit, which Open accepts, is a warning.
func TestDiagnoseEviction(t *testing.T) {
	s := testenv.StartRedis(t, "--maxmemory-policy", "allkeys-lru", "--maxmemory", "64mb")
	raw := "redis://" + s.Addr()
	if l, err := locker.Open(context.Background(), raw); err == nil {
		l.Close()
		t.Fatal("Open accepted a server with maxmemory-policy allkeys-lru")
	}
	d := doctortest.Diagnose(t, raw)
	f := doctortest.Finding(t, d, "maxmemory-policy", s.Addr())
	doctortest.WantStatus(t, f, locker.Fail, `"allkeys-lru"`)
	if !strings.Contains(f.Fix, "noeviction") || d.Worst() != locker.Fail {
		t.Errorf("fix %q, worst %v; want a fix naming noeviction, and a failing Diagnosis", f.Fix, d.Worst())
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw+"?allow_eviction=true"), "maxmemory-policy", s.Addr()), locker.Warn, "allow_eviction=true")

	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "maxmemory-policy", "volatile-ttl").Err(); err != nil {
		t.Fatal(err)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw), "maxmemory-policy", s.Addr()), locker.Fail, `"volatile-ttl"`)
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw), "maxmemory-policy", s.Addr()), locker.Warn, "maxmemory is 0")
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw), "maxmemory-policy", s.Addr()), locker.Pass, "noeviction")
}

// TestDiagnoseReplication: a replica warns that it can be promoted and
// lose acknowledged writes, and so does a master with a replica; on the
// way, the persistence check follows appendonly and appendfsync.
func TestDiagnoseReplication(t *testing.T) {
	master := testenv.StartRedis(t)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica := testenv.StartRedis(t, "--replicaof", host, port)
	m := goredis.NewClient(&goredis.Options{Addr: master.Addr()})
	defer m.Close()
	ctx := context.Background()
	testenv.WaitFor(t, 10*time.Second, "the replica connected", func() bool {
		info, _ := m.Info(ctx, "replication").Result()
		return strings.Contains(info, "connected_slaves:1")
	})

	d := doctortest.Diagnose(t, "redis://"+replica.Addr())
	doctortest.WantStatus(t, doctortest.Finding(t, d, "replication", replica.Addr()), locker.Warn, "replica of "+master.Addr())
	if f := doctortest.Finding(t, d, "replication", replica.Addr()); !strings.Contains(f.Detail, "promoted") || !strings.Contains(f.Detail, "lost") {
		t.Errorf("replica's finding %q does not say that a promotion can lose writes", f.Detail)
	}
	d = doctortest.Diagnose(t, "redis://"+master.Addr())
	doctortest.WantStatus(t, doctortest.Finding(t, d, "replication", master.Addr()), locker.Warn, "1 connected replica(s) ("+replica.Addr()+")")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "persistence", master.Addr()), locker.Warn, "AOF is off")

	for _, tc := range []struct {
		fsync  string
		want   locker.Status
		detail string
	}{
		{"everysec", locker.Pass, "appendfsync everysec"},
		{"always", locker.Pass, "appendfsync always"},
		{"no", locker.Warn, "appendfsync is no"},
	} {
		if err := m.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
			t.Fatal(err)
		}
		if err := m.ConfigSet(ctx, "appendfsync", tc.fsync).Err(); err != nil {
			t.Fatal(err)
		}
		doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, "redis://"+master.Addr()), "persistence", master.Addr()), tc.want, tc.detail)
	}
}

// TestDiagnoseNoConfig: a server that refuses CONFIG, as managed services
// do, warns that the policy cannot be read, and the persistence check
// falls back on INFO.
func TestDiagnoseNoConfig(t *testing.T) {
	s := testenv.StartRedis(t, "--rename-command", "CONFIG", "")
	d := doctortest.Diagnose(t, "redis://"+s.Addr())
	doctortest.WantStatus(t, doctortest.Finding(t, d, "maxmemory-policy", s.Addr()), locker.Warn, "cannot read maxmemory-policy")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "persistence", s.Addr()), locker.Warn, "AOF is off (RDB snapshots: unknown)")
}

// TestDiagnoseUnreachable: a server that does not answer is one failing
// finding about it, and what Open would refuse is not reported twice.
func TestDiagnoseUnreachable(t *testing.T) {
	testenv.Get(t, testenv.RedisServer) // the servers-required policy applies
	addr := testenv.ClosedAddr(t)
	d := doctortest.Diagnose(t, "redis://"+addr)
	var about []locker.Finding
	for _, f := range d.Findings {
		if f.Target != "" {
			about = append(about, f)
		}
	}
	if len(about) != 1 {
		t.Fatalf("want one finding about the server: %s", doctortest.Show(d))
	}
	doctortest.WantStatus(t, about[0], locker.Fail, "unreachable")
	if about[0].Check != "reachable" || about[0].Target != addr {
		t.Errorf("finding = %+v, want reachable about %s", about[0], addr)
	}
}

// TestDiagnoseOpenRefuses: what Open refuses about a URL on a server that
// answers (a database it does not have) is a failing finding.
func TestDiagnoseOpenRefuses(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	d := doctortest.Diagnose(t, raw+"/999")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "open", testenv.Hosts(t, raw)[0]), locker.Fail, "database 999 does not exist")
}

// TestDiagnoseTTL: the TTL is judged against the backend's range; one
// that Open refuses fails, and the servers are checked all the same.
func TestDiagnoseTTL(t *testing.T) {
	raw := testenv.Get(t, testenv.RedisURL)
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw), "ttl", ""), locker.Pass, "the TTL 30s is within the backend's range")
	short := raw + "?ttl=2ms"
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	d := doctortest.Diagnose(t, short)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ttl", ""), locker.Fail, "TTL 2ms is below this backend's minimum of 5ms")
	doctortest.Finding(t, d, "reachable", testenv.Hosts(t, raw)[0])
}

// TestDiagnoseURLErrors: a URL that Open refuses before it looks at a
// server gets Open's error from Diagnose, word for word.
func TestDiagnoseURLErrors(t *testing.T) {
	ca := os.DevNull
	for _, raw := range []string{
		"redis://127.0.0.1:1?colour=blue",
		"redis://u:secret@127.0.0.1:1?colour=blue&allow_eviction=true",
		"redis://127.0.0.1:1?allow_eviction=maybe",
		"redis://127.0.0.1:1?timeout=soon",
		"redis://127.0.0.1:1/notadb",
		"redis://127.0.0.1:1,127.0.0.1:2/3",
		"redis://127.0.0.1:1?cacert=" + ca,
		"redis://127.0.0.1:1?client=hiredis",
		"redis+sentinel://127.0.0.1:1",
		"redis+sentinel://127.0.0.1:1/m?client=redigo",
		"redis://127.0.0.1:1,127.0.0.1:2?client=redigo",
		"redis://127.0.0.1:1?ttl=0s",
	} {
		l, openErr := locker.Open(context.Background(), raw)
		if openErr == nil {
			l.Close()
			t.Fatalf("Open(%q) succeeded; the case is wrong", raw)
		}
		d, err := locker.Diagnose(context.Background(), raw)
		if err == nil || err.Error() != openErr.Error() {
			t.Errorf("Diagnose(%q) = %s, %v; want Open's error %v", raw, doctortest.Show(d), err, openErr)
		}
		if strings.Contains(openErr.Error(), "secret") {
			t.Errorf("the error shows the password: %v", openErr)
		}
	}
}
