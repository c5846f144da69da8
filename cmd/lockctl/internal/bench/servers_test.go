package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServerVersions: prepare fills Backend.Servers with what the test
// servers say of their version: the release alone for one server, and
// for Redlock the count of nodes that run it.
func TestServerVersions(t *testing.T) {
	release := `\d+\.\d+\.\d+`
	want := map[string]string{
		"redis":     `^Redis ` + release + `$`,
		"redlock":   `^%d x Redis ` + release + `$`,
		"zookeeper": `^ZooKeeper ` + release + `$`,
		"etcd":      `^etcd ` + release + `$`,
		"postgres":  `^PostgreSQL \d+(\.\d+)+$`, // 15.8, 17.2: a major and a minor
	}
	for _, b := range rawTestBackends {
		t.Run(b.backend, func(t *testing.T) {
			url := serverURL(t, b.env)
			pattern := want[b.backend]
			if b.backend == "redlock" {
				pattern = fmt.Sprintf(pattern, len(hostsOf(url)))
			}
			if got := serverTestPrepare(t, url).Servers; !regexp.MustCompile(pattern).MatchString(got) {
				t.Errorf("Servers = %q, want a match for %s", got, pattern)
			}
		})
	}
	t.Run("memory", func(t *testing.T) {
		if got := serverTestPrepare(t, "memory://").Servers; got != "in-process" {
			t.Errorf("Servers = %q, want in-process", got)
		}
	})
}

// serverTestPrepare prepares the deployment at url, as a run does, and
// returns its Backend.
func serverTestPrepare(t *testing.T, url string) Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, _, _, _, cleanup, err := prepare(ctx, url, 0, &Runner{})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	cleanup()
	return b
}

// TestServerVersionsUnknown: a server that does not answer, or answers
// without a version, leaves the version unknown, and costs no more than
// serverTimeout.
func TestServerVersionsUnknown(t *testing.T) {
	silent := serverTestListen(t, "")
	refused := serverTestListen(t, "srvr is not executed because it is not in the whitelist.\n")
	for _, tc := range []struct{ name, backend, url string }{
		{"redis", "redis", "redis://" + silent},
		{"redlock", "redlock", "redlock://" + silent + "," + silent},
		{"zookeeper", "zookeeper", "zookeeper://" + silent},
		{"zookeeper-refused", "zookeeper", "zookeeper://" + refused},
		{"etcd", "etcd", "etcd://" + silent},
		{"postgres", "postgres", "postgres://" + silent + "/locker?sslmode=disable"},
		{"postgres-several", "postgres", "postgres://" + silent + "," + silent + "/locker"},
		{"redis-tls", "redis", "rediss://" + silent}, // not read by the raw designs
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			if got := ServerVersions(context.Background(), tc.backend, tc.url); got != "" {
				t.Errorf("ServerVersions(%s) = %q, want empty", tc.backend, got)
			}
			if took := time.Since(start); took > serverTimeout+time.Second {
				t.Errorf("ServerVersions(%s) took %v, want at most about %v", tc.backend, took, serverTimeout)
			}
		})
	}
}

// TestServerZK: the release is read from srvr's version line, without
// the commit and build date.
func TestServerZK(t *testing.T) {
	srvr := "Zookeeper version: 3.8.0-5a02a05eddb59aee6ac762f7ea82e92a68eb9c0f, built on 2022-02-25 08:49 UTC\n" +
		"Latency min/avg/max: 0/0.4/12\nMode: standalone\nNode count: 5\n"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := serverZK(ctx, serverTestListen(t, srvr)); got != "ZooKeeper 3.8.0" {
		t.Errorf("serverZK = %q, want ZooKeeper 3.8.0", got)
	}
}

func TestServerSummary(t *testing.T) {
	for _, tc := range []struct {
		versions []string
		want     string
	}{
		{[]string{"Redis 7.0.15"}, "Redis 7.0.15"},
		{[]string{""}, ""},
		{[]string{"", "", ""}, ""},
		{[]string{"Redis 7.0.15", "Redis 7.0.15", "Redis 7.0.15"}, "3 x Redis 7.0.15"},
		{[]string{"Redis 7.0.15", "", "Redis 7.2.4", "Redis 7.0.15"}, "2 x Redis 7.0.15, 1 x Redis 7.2.4, 1 x unknown"},
	} {
		if got := serverSummary(tc.versions); got != tc.want {
			t.Errorf("serverSummary(%q) = %q, want %q", tc.versions, got, tc.want)
		}
	}
}

// serverTestListen is a server at the address it returns that reads what
// it is sent and answers reply, then closes; with no reply, it answers
// nothing and holds the connection until the test ends.
func serverTestListen(t *testing.T, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { serverTestServe(c, reply, done) })
		}
	})
	return ln.Addr().String()
}

// serverTestServe answers one connection as serverTestListen says.
func serverTestServe(c net.Conn, reply string, done <-chan struct{}) {
	defer c.Close()
	if reply == "" {
		<-done
		return
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	c.Read(make([]byte, 64)) // the four-letter word
	io.Copy(c, strings.NewReader(reply))
}
