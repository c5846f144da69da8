package redisconn

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
)

// Checkup looks at Redis servers for what silently breaks locks: the
// checks behind the redis and redlock backends' locker.Diagnoser. It
// connects as Probe does (the URL's client library, TLS and credentials)
// and only reads: PING, TIME, INFO and CONFIG GET.
type Checkup struct {
	// Options are the URL's connection settings.
	Options ClientOptions
	// TTL is the TTL the round trips are judged against.
	TTL time.Duration
	// AllowEviction turns a policy that can evict lock keys from a
	// failure into a warning: the URL accepted the risk.
	AllowEviction bool
	// Kind is the deployment, for the advice on replication: KindSingle,
	// KindCluster, KindSentinel or KindRedlock.
	Kind Kind
}

// Kind is the shape of a Redis deployment, which decides what to advise
// about replication.
type Kind int

// The deployments a Checkup knows.
const (
	KindSingle   Kind = iota // one server named by a redis:// URL
	KindCluster              // a Redis Cluster
	KindSentinel             // the master that Sentinels name
	KindRedlock              // one of Redlock's independent masters
)

// pingSamples is how many PINGs measure a server's round trip, and
// timeSamples how many TIME calls measure its clock: the one with the
// shortest round trip is the most precise.
const (
	pingSamples = 5
	timeSamples = 3
)

// Node is what a Checkup learned from one server.
type Node struct {
	Addr string
	// Err says why the server could not be checked: it could not be
	// reached, or refused the connection (authentication).
	Err error
	// Version, Mode (standalone, cluster, sentinel) and RunID come from
	// INFO server; RunID tells two addresses of one server apart.
	Version, Mode, RunID string
	// RTT is the median round trip of pingSamples PINGs.
	RTT time.Duration
	// Offset is how far the server's clock (TIME) is ahead of this
	// process's, within ±Uncertainty; ClockErr is set when TIME failed.
	Offset, Uncertainty time.Duration
	ClockErr            error

	info                                       string
	policy, maxmemory, appendonly, fsync, save string
	configErr                                  error // CONFIG GET refused
}

// Inspect checks the servers at addrs, all at once, and returns what it
// learned of each, in the order of addrs. Each server gets OpenTimeout.
func (c Checkup) Inspect(ctx context.Context, addrs []string) []*Node {
	nodes := make([]*Node, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
			defer cancel()
			nodes[i] = c.inspect(ctx, a)
		})
	}
	wg.Wait()
	return nodes
}

func (c Checkup) inspect(ctx context.Context, addr string) *Node {
	n := &Node{Addr: addr}
	s, err := openSession(ctx, addr, c.Options, false)
	if err != nil {
		n.Err = err
		return n
	}
	defer s.close()
	// The first PING dials and authenticates: it is no round trip.
	if _, err := s.do(ctx, "PING"); err != nil {
		n.Err = s.fail(err)
		return n
	}
	if n.RTT, err = medianRTT(ctx, s); err != nil {
		n.Err = s.fail(err)
		return n
	}
	info, err := s.do(ctx, "INFO")
	if err != nil {
		n.Err = s.fail(err)
		return n
	}
	n.info = text(info)
	n.Version, n.Mode, n.RunID = n.field("redis_version"), n.field("redis_mode"), n.field("run_id")
	n.Offset, n.Uncertainty, n.ClockErr = clockOffset(ctx, s)
	n.readConfig(ctx, s)
	return n
}

func medianRTT(ctx context.Context, s *session) (time.Duration, error) {
	rtts := make([]time.Duration, pingSamples)
	for i := range rtts {
		start := time.Now()
		if _, err := s.do(ctx, "PING"); err != nil {
			return 0, err
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// clockOffset estimates how far the server's clock is ahead of ours from
// the TIME call with the shortest round trip: the server read its clock
// somewhere within that round trip, so the estimate, taken at its middle,
// is within half of it.
func clockOffset(ctx context.Context, s *session) (offset, uncertainty time.Duration, err error) {
	best := time.Duration(-1)
	for range timeSamples {
		t0 := time.Now()
		v, err := s.do(ctx, "TIME")
		rtt := time.Since(t0)
		if err != nil {
			return 0, 0, err
		}
		server, err := parseTime(v)
		if err != nil {
			return 0, 0, err
		}
		if best < 0 || rtt < best {
			best = rtt
			mid := t0.Add(rtt / 2).Round(0) // wall clock: the server's is one
			offset = server.Sub(mid)
		}
	}
	return offset, best / 2, nil
}

// parseTime reads a TIME reply: seconds and microseconds.
func parseTime(v any) (time.Time, error) {
	a, ok := v.([]any)
	if ok && len(a) == 2 {
		sec, err1 := strconv.ParseInt(text(a[0]), 10, 64)
		usec, err2 := strconv.ParseInt(text(a[1]), 10, 64)
		if err1 == nil && err2 == nil {
			return time.Unix(sec, usec*1000), nil
		}
	}
	return time.Time{}, fmt.Errorf("unexpected TIME reply %v", v)
}

// readConfig reads the settings the checks judge. A server that refuses
// CONFIG (managed services often do) leaves configErr, and the checks
// fall back on INFO where it says enough.
func (n *Node) readConfig(ctx context.Context, s *session) {
	for _, kv := range []struct {
		name string
		into *string
	}{
		{"maxmemory-policy", &n.policy}, {"maxmemory", &n.maxmemory},
		{"appendonly", &n.appendonly}, {"appendfsync", &n.fsync}, {"save", &n.save},
	} {
		v, err := s.do(ctx, "CONFIG", "GET", kv.name)
		if err != nil {
			n.configErr = err
			return
		}
		*kv.into = configString(v)
	}
}

// configString reads the value in a CONFIG GET reply of one setting: a map
// in RESP3 (go-redis), a name and value pair in RESP2 (redigo).
func configString(v any) string {
	switch v := v.(type) {
	case map[any]any:
		for _, x := range v {
			return text(x)
		}
	case []any:
		if len(v) == 2 {
			return text(v[1])
		}
	}
	return ""
}

// field returns a field of the server's INFO.
func (n *Node) field(name string) string { return infoField(n.info, name) }

// Findings judges the node: whether it answered, and if so its eviction
// policy, persistence, replication and round trip.
func (c Checkup) Findings(n *Node) []locker.Finding {
	if n.Err != nil {
		return []locker.Finding{{
			Check: "reachable", Status: locker.Fail, Target: n.Addr,
			Detail: n.Err.Error() + ": no lock can be taken or kept on it",
			Fix:    "start the server, or correct its address, credentials or TLS settings in the URL",
		}}
	}
	return []locker.Finding{
		{Check: "reachable", Status: locker.Pass, Target: n.Addr,
			Detail: fmt.Sprintf("Redis %s answers (redis_mode %s, role %s)", n.Version, n.Mode, strings.Replace(n.field("role"), "slave", "replica", 1))},
		c.eviction(n),
		c.persistence(n),
		c.replication(n),
		locker.RTTFinding(n.Addr, n.RTT, c.TTL, fmt.Sprintf("median of %d PINGs", pingSamples)),
	}
}

// eviction judges maxmemory-policy as CheckEviction does, with one step
// more: a policy that evicts, on a server with no memory limit, evicts
// nothing today, which Open accepts, but the limit is one CONFIG SET away.
func (c Checkup) eviction(n *Node) locker.Finding {
	f := locker.Finding{Check: "maxmemory-policy", Target: n.Addr}
	fix := "set maxmemory-policy noeviction (in redis.conf, and at once with CONFIG SET maxmemory-policy noeviction): a full server then refuses new locks instead of dropping held ones"
	switch {
	case n.configErr != nil:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("cannot read maxmemory-policy (%v): if it is not noeviction, lock keys may be evicted under memory pressure", n.configErr)
		f.Fix = "make sure maxmemory-policy is noeviction (ask the provider if CONFIG is not allowed)"
	case n.policy == "noeviction":
		f.Detail = "maxmemory-policy is noeviction: a full server refuses writes rather than evict lock keys"
	case n.maxmemory == "0":
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("maxmemory-policy is %q but maxmemory is 0 (no limit), so nothing is evicted today; once a memory limit is set, Redis may evict lock keys (they all carry a TTL) under memory pressure, and a second client would acquire a held lock", n.policy)
		f.Fix = fix
	default:
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("maxmemory-policy is %q (maxmemory %s): under memory pressure Redis may evict lock keys (they all carry a TTL), and a second client would acquire a held lock", n.policy, n.maxmemory)
		f.Fix = fix + "; or accept the risk with allow_eviction=true in the URL"
		if c.AllowEviction {
			f.Status = locker.Warn
			f.Detail += "; the URL accepts this risk (allow_eviction=true)"
			f.Fix = fix
		}
	}
	return f
}

// persistence judges what a restart of the server does to the locks it
// holds.
func (c Checkup) persistence(n *Node) locker.Finding {
	f := locker.Finding{Check: "persistence", Target: n.Addr}
	aof, fsync := n.appendonly == "yes", n.fsync
	if n.configErr != nil {
		aof, fsync = n.field("aof_enabled") == "1", "unknown (CONFIG refused)"
	}
	fix := "set appendonly yes with appendfsync everysec (or always); or keep a crashed server down for at least the longest TTL before it serves again (a delayed restart), so that every lock it held has expired"
	switch {
	case !aof:
		snapshots := "RDB snapshots: none"
		if n.save != "" {
			snapshots = fmt.Sprintf("RDB snapshots: save %q", n.save)
		} else if n.configErr != nil {
			snapshots = "RDB snapshots: unknown"
		}
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("AOF is off (%s): a restart loses every lock taken since the last snapshot, and the restarted server hands those locks to new clients while their holders still believe they hold them (a lock released by a restart)", snapshots)
		f.Fix = fix
	case fsync == "always":
		f.Detail = "AOF is on with appendfsync always: a restart keeps every acknowledged lock"
	case fsync == "everysec":
		f.Detail = "AOF is on with appendfsync everysec: a restart keeps the locks; a crash of the machine itself may lose the last second of them"
	default:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("AOF is on but appendfsync is %s: the operating system writes the log when it likes (often every 30s), so a crash of the machine loses the locks taken since, and the restarted server hands them out again", fsync)
		f.Fix = fix
	}
	return f
}

// replication judges what a failover can do to the locks: replication is
// asynchronous, so a promoted replica may lack the newest lock writes.
func (c Checkup) replication(n *Node) locker.Finding {
	f := locker.Finding{Check: "replication", Target: n.Addr}
	role := n.field("role")
	if role == "slave" || role == "replica" {
		master := n.field("master_host") + ":" + n.field("master_port")
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("this server is a replica of %s (link %s): a replica can be promoted by Sentinel or a failover; writes acknowledged by the old master but not yet copied are lost, so a held lock can vanish and be acquired by a second client", master, n.field("master_link_status"))
		switch c.Kind {
		case KindSingle:
			f.Detail += "; while it is a replica it refuses the lock writes (READONLY)"
			f.Fix = "point the URL at the master, or at the Sentinels (redis+sentinel://) so that clients follow a failover"
		case KindRedlock:
			f.Detail += "; Redlock counts it as an independent master, which it is not"
			f.Fix = "give Redlock independent masters without replicas, made durable by AOF instead of failover"
		default:
			f.Fix = replicationFix
		}
		return f
	}
	replicas, _ := strconv.Atoi(n.field("connected_slaves"))
	if replicas == 0 {
		f.Detail = "a master without replicas: no failover can drop acknowledged lock writes"
		return f
	}
	f.Status = locker.Warn
	f.Detail = fmt.Sprintf("a master with %d connected replica(s) (%s): replication is asynchronous, so a failover can promote a replica that has not received the newest lock writes, and a held lock vanishes and is acquired by a second client", replicas, strings.Join(n.replicas(replicas), ", "))
	f.Fix = replicationFix
	if c.Kind == KindRedlock {
		f.Fix = "give Redlock independent masters without replicas, made durable by AOF instead of failover"
	}
	return f
}

const replicationFix = "pass Lock.Fence() to the protected resource and have it reject smaller fences, so that a lock lost in a failover cannot corrupt data (min-replicas-to-write and WAIT narrow the window but do not close it); or, for locks that must survive a failover, use etcd or ZooKeeper"

// replicas returns the addresses of the master's first n replicas.
func (n *Node) replicas(count int) []string {
	var out []string
	for i := range count {
		var ip, port string
		for _, kv := range strings.Split(n.field("slave"+strconv.Itoa(i)), ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if ip != "" {
			out = append(out, ip+":"+port)
		}
	}
	return out
}
