package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/distlock/locker/conformance"
)

// The Sentinel group of the failover scenario: a master, one replica of
// it, and three Sentinels with a quorum of 2. The replica reaches its
// master through a proxy of the engine's (servers[1]'s replLink), so
// that the scenario can hold replication back: the master is killed
// right after it granted a lock the replica never received.

// sentinelName is the master's name in the Sentinels.
const sentinelName = "chaos"

// sentinelDownAfter is how long the Sentinels wait before they call the
// master down: long enough that a loaded machine does not fail over by
// mistake in the middle of a round.
const sentinelDownAfter = 2 * time.Second

// sentinelGroup starts the group and returns its servers (master,
// replica, the three Sentinels) and the redis+sentinel:// URL that names
// it. The replication proxy is closed when the master is.
func sentinelGroup(ctx context.Context, bin, dir string) (servers []*redisServer, url string, err error) {
	defer func() {
		if err != nil {
			stopServers(servers)
		}
	}()
	master, err := startRedis(ctx, bin, dir, "--save", "", "--appendonly", "no", "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, "", err
	}
	servers = append(servers, master)
	link, err := conformance.NewProxy(master.addr())
	if err != nil {
		return servers, "", err
	}
	master.link = link
	host, port, _ := strings.Cut(link.Addr(), ":")
	replica, err := startRedis(ctx, bin, dir, "--save", "", "--appendonly", "no", "--replicaof", host, port)
	if err != nil {
		return servers, "", err
	}
	servers = append(servers, replica)
	if err := waitSynced(ctx, replica); err != nil {
		return servers, "", err
	}
	var hosts []string
	for range 3 {
		s, err := newRedis(bin, dir)
		if err != nil {
			return servers, "", err
		}
		s.conf = func(s *redisServer) string { return sentinelConf(master) }
		if err := s.start(ctx); err != nil {
			return servers, "", err
		}
		servers = append(servers, s)
		hosts = append(hosts, s.addr())
	}
	return servers, "redis+sentinel://" + strings.Join(hosts, ",") + "/" + sentinelName, nil
}

func sentinelConf(master *redisServer) string {
	return fmt.Sprintf(`protected-mode no
sentinel monitor %[1]s 127.0.0.1 %[2]d 2
sentinel down-after-milliseconds %[1]s %[3]d
sentinel failover-timeout %[1]s 10000
sentinel parallel-syncs %[1]s 1
`, sentinelName, master.port, sentinelDownAfter.Milliseconds())
}

// waitSynced waits until the replica's link to its master is up.
func waitSynced(ctx context.Context, replica *redisServer) error {
	c := replica.client()
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the replica on %s did not sync with its master within 15s", replica.addr())
}

// runFailover: replication is held back, A takes the lock on the master,
// the master is killed; the Sentinels promote the replica, which never
// had A's key, and B takes the lock there. A, which has not refreshed
// yet, still believes it holds the lock and writes: the fence must
// reject it, which needs B's fence above A's though the replica never
// saw A's fence either.
func runFailover(ctx context.Context, r *round, d *deployment) error {
	if d.backend == "postgres" {
		return runFailoverPG(ctx, r, d)
	}
	master := d.servers[0]
	master.link.Cut()
	r.mark("replication from the master held back")
	a, b, err := holder(ctx, r, d, longTTL)
	if err != nil {
		return err
	}
	master.kill()
	at := r.mark("the master killed before its replica had the lock key")
	if err := rival(ctx, r, b, 30*time.Second, at); err != nil {
		return err
	}
	if _, err := r.write(ctx, a, true); err != nil {
		return err
	}
	return r.release(ctx, b)
}
