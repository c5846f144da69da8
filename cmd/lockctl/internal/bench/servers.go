package bench

// What the servers of a deployment say of their version, for the
// report's Backend.Servers. Each server is asked directly, as the raw
// designs connect (raw.go), on the --url as given, not through the
// proxies of --rtt. Not knowing is no failure: a server that does not
// answer in time, a URL the raw designs cannot read (TLS, Sentinel,
// Redis Cluster), or an answer without a version leaves it unknown.

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// serverTimeout bounds the questions to a deployment's servers: they
// are asked at once, so a deployment costs at most this much.
const serverTimeout = 2 * time.Second

// ServerVersions asks the servers of the deployment of backend (the
// Backend.Name) at rawURL for their version, as Backend.Servers gives
// it: "Redis 7.0.15", "5 x Redis 7.0.15", "ZooKeeper 3.8.0", "etcd
// 3.6.16", "PostgreSQL 15.8", "in-process" for memory; empty when no
// server told.
func ServerVersions(ctx context.Context, backend, rawURL string) string {
	if backend == "memory" {
		return "in-process"
	}
	ctx, cancel := context.WithTimeout(ctx, serverTimeout)
	defer cancel()
	if backend == "postgres" {
		return serverPostgres(ctx, rawURL)
	}
	t, err := rawParseURL(backend, rawURL)
	if err != nil {
		return ""
	}
	var ask func(ctx context.Context, host string) string
	switch backend {
	case "redis", "redlock":
		ask = func(ctx context.Context, host string) string { return serverRedis(ctx, t, host) }
	case "zookeeper":
		ask = serverZK
	case "etcd":
		cli, err := serverEtcdClient(ctx, t)
		if err != nil {
			return ""
		}
		defer cli.Close()
		ask = func(ctx context.Context, host string) string { return serverEtcd(ctx, cli, host) }
	default:
		return ""
	}
	return serverSummary(serverAskAll(ctx, t.hosts, ask))
}

// serverAskAll asks every host at once and returns each one's version,
// empty where it did not tell, once all have answered.
func serverAskAll(ctx context.Context, hosts []string, ask func(ctx context.Context, host string) string) []string {
	versions := make([]string, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { versions[i] = ask(ctx, h) })
	}
	wg.Wait()
	return versions
}

// serverSummary says what versions (one per server, empty if unknown)
// a deployment runs: the version alone for one server; for several,
// how many run each, in the order first met, the unknown last: "5 x
// Redis 7.0.15", "2 x Redis 7.0.15, 1 x unknown". It is empty when no
// server told.
func serverSummary(versions []string) string {
	if len(versions) == 1 {
		return versions[0]
	}
	count := map[string]int{}
	var order []string
	for _, v := range versions {
		if count[v] == 0 && v != "" {
			order = append(order, v)
		}
		count[v]++
	}
	if len(order) == 0 {
		return ""
	}
	if count[""] > 0 {
		order = append(order, "")
	}
	parts := make([]string, len(order))
	for i, v := range order {
		parts[i] = fmt.Sprintf("%d x %s", count[v], renderOr(v, "unknown"))
	}
	return strings.Join(parts, ", ")
}

// serverRedis asks the Redis server at host: INFO server's
// redis_version, or valkey_version from a Valkey server, which gives
// redis_version too but as the Redis release it is compatible with.
func serverRedis(ctx context.Context, t *rawTarget, host string) string {
	rdb := rawRedisClient(t, host)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	if v := serverField(info, "valkey_version:"); v != "" {
		return "Valkey " + v
	}
	if v := serverField(info, "redis_version:"); v != "" {
		return "Redis " + v
	}
	return ""
}

// serverZK asks the ZooKeeper server at host with the four-letter word
// srvr, whose line "Zookeeper version: 3.8.0-<commit>, built on <date>"
// gives the release.
func serverZK(ctx context.Context, host string) string {
	out, err := serverFourLetter(ctx, host, "srvr")
	if err != nil {
		return ""
	}
	v := serverField(out, "Zookeeper version:")
	v, _, _ = strings.Cut(v, ",")
	v, _, _ = strings.Cut(v, "-")
	if v == "" {
		return ""
	}
	return "ZooKeeper " + v
}

// serverFourLetter sends a ZooKeeper four-letter word on a connection of
// its own, bounded by ctx, and returns the whole reply. A word the
// server does not allow (4lw.commands.whitelist) is answered with a
// line saying so, which holds no version.
func serverFourLetter(ctx context.Context, host, word string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// serverEtcdClient makes a client of the etcd endpoints. clientv3.New
// waits for a connection only to authenticate, which ctx bounds, as it
// bounds everything the client does.
func serverEtcdClient(ctx context.Context, t *rawTarget) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints: t.hosts, Username: t.user, Password: t.password,
		Context:     ctx,
		DialTimeout: serverTimeout,
		Logger:      zap.NewNop(),
	})
}

// serverEtcd asks the etcd member at host for its status, which has its
// version.
func serverEtcd(ctx context.Context, cli *clientv3.Client, host string) string {
	st, err := cli.Status(ctx, host)
	if err != nil || st.Version == "" {
		return ""
	}
	return "etcd " + st.Version
}

// serverField returns what follows prefix at the start of a line of
// out, spaces and the line's end trimmed; empty if no line has it.
func serverField(out, prefix string) string {
	for line := range strings.Lines(out) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
