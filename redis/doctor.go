package redis

import (
	"context"
	"fmt"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redisconn"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel"} {
		locker.RegisterDiagnoser(scheme, diagnose)
	}
}

// diagnose is the locker.Diagnoser of this package's URLs. It reads them
// as open does, with open's errors, then checks every server the URL
// leads to (the master that the Sentinels name, every node of a Cluster,
// or the one server) with redisconn.Checkup: reachability, what Open
// would refuse, maxmemory-policy, persistence, replication and round
// trip, plus the TTL against the backend's range, and the Sentinels' and
// the Cluster's own state.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	allow, hosts, co, err := readURL(u)
	if err != nil {
		return nil, err
	}
	if co.Sentinel == nil && len(hosts) > 1 && co.DB != 0 {
		return nil, fmt.Errorf("redis: Redis Cluster has no databases, but the URL selects %d", co.DB)
	}
	if err := co.CheckClient(hosts); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	ttl := u.DefaultTTL()
	c := redisconn.Checkup{Options: co, TTL: ttl, AllowEviction: allow}
	// The driver's range is static: a driver with no client tells it.
	return append([]locker.Finding{locker.TTLFinding(&driver{}, ttl)}, c.Deployment(ctx, hosts)...), nil
}
