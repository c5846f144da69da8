package redisconn

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distlock/locker"
)

// Deployment checks what a redis:// URL names (hosts and c.Options as
// FromRedisURL read them): the master that the Sentinels name, every node
// of a Redis Cluster, or the one server. Then, when every server answered,
// what Open would refuse about the URL (Probe: a database the server does
// not have, several hosts that are no Cluster), and each server's own
// findings (Findings).
func (c Checkup) Deployment(ctx context.Context, hosts []string) []locker.Finding {
	var fs []locker.Finding
	targets := hosts
	if c.Options.Sentinel != nil {
		c.Kind = KindSentinel
		master, sf := c.sentinels(ctx, hosts)
		fs = append(fs, sf...)
		if master == "" {
			return fs
		}
		targets = []string{master}
	}
	nodes := c.Inspect(ctx, targets)
	if c.Options.Sentinel == nil && slices.ContainsFunc(nodes, func(n *Node) bool { return n.Mode == "cluster" }) {
		c.Kind = KindCluster
		cf, more := c.cluster(ctx, nodes)
		fs = append(fs, cf...)
		nodes = append(nodes, c.Inspect(ctx, more)...)
	}
	if !slices.ContainsFunc(nodes, func(n *Node) bool { return n.Err != nil }) {
		// An unreachable server is reported once, by its own findings.
		pctx, cancel := context.WithTimeout(ctx, OpenTimeout)
		o, err := Probe(pctx, hosts, c.Options)
		cancel()
		if err == nil {
			err = o.check(hosts) // client=redigo on a Cluster node
		}
		if err != nil {
			fs = append(fs, locker.Finding{
				Check: "open", Status: locker.Fail, Target: strings.Join(hosts, ","),
				Detail: "Open refuses this URL: " + err.Error(),
				Fix:    "correct the URL, or the servers, as the error says",
			})
		}
	}
	for _, n := range nodes {
		fs = append(fs, c.Findings(n)...)
	}
	return fs
}

// CheckClient reports what the URL's client library cannot do with hosts
// (client=redigo with Sentinels or a Cluster, an unknown client), with
// the error Probe gives.
func (o ClientOptions) CheckClient(hosts []string) error { return o.check(hosts) }

// sentinels asks every Sentinel for the master's address and returns the
// one most of them give, or "" if none does.
func (c Checkup) sentinels(ctx context.Context, hosts []string) (string, []locker.Finding) {
	name := c.Options.Sentinel.Master
	addrs, errs := c.askSentinels(ctx, hosts)
	var fs []locker.Finding
	votes := map[string][]string{} // master address: the Sentinels that name it
	for i, h := range hosts {
		fs = append(fs, sentinelFinding(h, name, addrs[i], errs[i]))
		if errs[i] == nil && addrs[i] != "" {
			votes[addrs[i]] = append(votes[addrs[i]], h)
		}
	}
	if len(votes) == 0 {
		return "", append(fs, locker.Finding{
			Check: "sentinel", Status: locker.Fail, Target: strings.Join(hosts, ","),
			Detail: fmt.Sprintf("no Sentinel gives the address of master %q: no lock can be taken", name),
			Fix:    "start the Sentinels, and check the URL's hosts and master name",
		})
	}
	masters := make([]string, 0, len(votes))
	for a := range votes {
		masters = append(masters, a)
	}
	slices.SortFunc(masters, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(votes[b]), len(votes[a])), strings.Compare(a, b))
	})
	if len(masters) > 1 {
		var parts []string
		for _, m := range masters {
			parts = append(parts, fmt.Sprintf("%s (by %s)", m, strings.Join(votes[m], ", ")))
		}
		fs = append(fs, locker.Finding{
			Check: "sentinel", Status: locker.Warn, Target: strings.Join(hosts, ","),
			Detail: fmt.Sprintf("the Sentinels disagree on master %q: %s; a failover is under way, or they are split, and clients that ask different Sentinels write their locks to different masters", name, strings.Join(parts, "; ")),
			Fix:    "check that the Sentinels reach each other and the servers; checked here: " + masters[0],
		})
	}
	return masters[0], fs
}

// askSentinels asks every Sentinel in hosts, at once, for the address of
// the master the URL names.
func (c Checkup) askSentinels(ctx context.Context, hosts []string) ([]string, []error) {
	so := c.Options
	so.Username, so.Password = c.Options.Sentinel.Username, c.Options.Sentinel.Password
	addrs := make([]string, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
			defer cancel()
			addrs[i], errs[i] = askSentinel(ctx, h, so, c.Options.Sentinel.Master)
		})
	}
	wg.Wait()
	return addrs, errs
}

// sentinelFinding judges one Sentinel's answer: addr, the master it
// names, or err.
func sentinelFinding(h, name, addr string, err error) locker.Finding {
	f := locker.Finding{Check: "sentinel", Target: h}
	switch {
	case err != nil:
		f.Status = locker.Warn
		f.Detail = err.Error() + ": it takes no part in agreeing on a failover, and clients cannot learn the master from it"
		f.Fix = "start the Sentinel, or correct its address or the sentinel_user and sentinel_password parameters"
	case addr == "":
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("this Sentinel knows no master named %q", name)
		f.Fix = "correct the master name in the URL's path, or have the Sentinel monitor it"
	default:
		f.Detail = fmt.Sprintf("names %s as master %q", addr, name)
	}
	return f
}

// cluster reads the Cluster's state and membership from the first node
// that answered, and returns the addresses of the nodes not among nodes.
func (c Checkup) cluster(ctx context.Context, nodes []*Node) ([]locker.Finding, []string) {
	i := slices.IndexFunc(nodes, func(n *Node) bool { return n.Err == nil && n.Mode == "cluster" })
	seed := nodes[i].Addr
	ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	f := locker.Finding{Check: "cluster", Target: seed}
	state, members, err := clusterView(ctx, seed, c.Options)
	if err != nil {
		f.Status = locker.Fail
		f.Detail = "cannot read the Cluster's state: " + err.Error()
		f.Fix = "check that the node answers CLUSTER INFO and CLUSTER NODES"
		return []locker.Finding{f}, nil
	}
	var masters, replicas int
	var failing, more []string
	for _, m := range members {
		if m.master {
			masters++
		} else {
			replicas++
		}
		if m.failing {
			failing = append(failing, m.addr+" ("+m.flags+")")
		}
		if !slices.ContainsFunc(nodes, func(n *Node) bool { return n.Addr == m.addr }) {
			more = append(more, m.addr)
		}
	}
	f.Detail = fmt.Sprintf("cluster_state %s, %d master(s), %d replica(s), as %s sees it", state, masters, replicas, seed)
	switch {
	case state != "ok":
		f.Status = locker.Fail
		f.Detail += ": some hash slots are not served, and locks on their keys can be neither taken nor kept"
		f.Fix = "restore the failed nodes, or reassign their slots (redis-cli --cluster fix)"
	case len(failing) > 0:
		f.Status = locker.Warn
		f.Detail += "; nodes flagged as failing: " + strings.Join(failing, ", ")
		f.Fix = "restore the failing nodes, or remove them (CLUSTER FORGET)"
	}
	return []locker.Finding{f}, more
}

// clusterMember is one line of CLUSTER NODES.
type clusterMember struct {
	addr, flags     string
	master, failing bool
}

// clusterView returns cluster_state from CLUSTER INFO and the members that
// CLUSTER NODES lists with an address.
func clusterView(ctx context.Context, addr string, o ClientOptions) (string, []clusterMember, error) {
	s, err := openSession(ctx, addr, o, false)
	if err != nil {
		return "", nil, err
	}
	defer s.close()
	info, err := s.do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return "", nil, s.fail(err)
	}
	list, err := s.do(ctx, "CLUSTER", "NODES")
	if err != nil {
		return "", nil, s.fail(err)
	}
	var members []clusterMember
	// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slots>...
	for _, line := range strings.Split(text(list), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		a, _, _ := strings.Cut(f[1], "@")
		if strings.HasPrefix(a, ":") || strings.Contains(f[2], "noaddr") {
			continue // a node whose address is not known
		}
		flags := strings.Split(f[2], ",")
		members = append(members, clusterMember{
			addr: a, flags: f[2],
			master:  slices.Contains(flags, "master"),
			failing: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?"),
		})
	}
	return infoField(info, "cluster_state"), members, nil
}
