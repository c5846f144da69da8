package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestServersAnswer checks every server scripts/services.sh starts at the
// protocol level, so a broken set-up fails here with a plain message rather
// than as a confusing backend failure.
func TestServersAnswer(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		for _, addr := range hosts(t, Get(t, RedisURL)) {
			if got := roundTrip(t, addr, "PING\r\n", "\r\n"); got != "+PONG" {
				t.Errorf("redis at %s answered PING with %q", addr, got)
			}
		}
	})
	t.Run("redlock", func(t *testing.T) {
		hs := hosts(t, Get(t, RedlockURL))
		if len(hs) != 5 {
			t.Fatalf("%s has %d hosts, want 5", RedlockURL, len(hs))
		}
		for _, addr := range hs {
			if got := roundTrip(t, addr, "PING\r\n", "\r\n"); got != "+PONG" {
				t.Errorf("redlock node %s answered PING with %q", addr, got)
			}
		}
	})
	t.Run("redis-cluster", func(t *testing.T) {
		for _, addr := range hosts(t, Get(t, RedisClusterURL)) {
			got := roundTrip(t, addr, "CLUSTER INFO\r\n", "\r\n")
			if !strings.Contains(got, "cluster_state:ok") {
				t.Errorf("cluster node %s: CLUSTER INFO says %q", addr, got)
			}
		}
	})
	t.Run("redis-sentinel", func(t *testing.T) {
		for _, addr := range hosts(t, Get(t, RedisSentinelURL)) {
			got := roundTrip(t, addr, "SENTINEL GET-MASTER-ADDR-BY-NAME locker\r\n", "\r\n")
			if got != "*2" {
				t.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME locker answered %q, want an address", addr, got)
			}
		}
	})
	t.Run("redis-tls", func(t *testing.T) {
		dir := Get(t, RedisTLSDir)
		for _, addr := range hosts(t, Get(t, RedisTLSURL)) {
			pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key"))
			if err != nil {
				t.Fatal(err)
			}
			ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(ca)
			d := tls.Dialer{Config: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatalf("TLS redis at %s: %v", addr, err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err = io.WriteString(c, "PING\r\n"); err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
				t.Errorf("TLS redis at %s answered PING with %q, %v", addr, line, err)
			}
		}
	})
	t.Run("zookeeper", func(t *testing.T) {
		for _, addr := range hosts(t, Get(t, ZooKeeperURL)) {
			if got := roundTrip(t, addr, "ruok", ""); got != "imok" {
				t.Errorf("zookeeper at %s answered ruok with %q", addr, got)
			}
		}
	})
	t.Run("etcd", func(t *testing.T) {
		for _, addr := range hosts(t, Get(t, EtcdURL)) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/health", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("etcd at %s: %v", addr, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"health":"true"`) {
				t.Errorf("etcd at %s: /health says %s", addr, body)
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		for _, c := range []struct {
			name, user string
			recovery   bool
		}{
			{PostgresURL, "locker", false},
			{PostgresAdminURL, "postgres", false},
			{PostgresReplicaURL, "locker", true},
		} {
			user, recovery := pgQuery(t, Get(t, c.name))
			if user != c.user || recovery != c.recovery {
				t.Errorf("%s: connected as %q, in recovery %v; want %q, %v", c.name, user, recovery, c.user, c.recovery)
			}
		}
	})
}

// pgQuery connects to the PostgreSQL server at dsn and tells as whom, and
// whether that server is in recovery (a replica).
func pgQuery(t *testing.T, dsn string) (user string, recovery bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("postgres at %s: %v", dsn, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT current_user, pg_is_in_recovery()").Scan(&user, &recovery); err != nil {
		t.Fatalf("postgres at %s: %v", dsn, err)
	}
	return user, recovery
}

func hosts(t *testing.T, raw string) []string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("bad server URL %q: %v", raw, err)
	}
	return strings.Split(u.Host, ",")
}

// roundTrip sends req and reads the answer up to delim, or to EOF when delim
// is empty.
func roundTrip(t *testing.T, addr, req, delim string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write to %s: %v", addr, err)
	}
	if delim == "" {
		if tc, ok := c.(*net.TCPConn); ok && !strings.Contains(req, "\r\n") {
			_ = tc.CloseWrite()
		}
		b, err := io.ReadAll(c)
		if err != nil && len(b) == 0 {
			t.Fatalf("read from %s: %v", addr, err)
		}
		return strings.TrimSpace(string(b))
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString(delim[len(delim)-1])
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	line = strings.TrimSuffix(line, delim)
	if n, err := strconv.Atoi(strings.TrimPrefix(line, "$")); err == nil && strings.HasPrefix(line, "$") && n >= 0 {
		// A RESP bulk string: the body follows the length line.
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatalf("read from %s: %v", addr, err)
		}
		return string(body)
	}
	return line
}
