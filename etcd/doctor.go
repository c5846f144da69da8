package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/locker"
)

func init() {
	locker.RegisterDiagnoser("etcd", diagnose)
	locker.RegisterDiagnoser("etcds", diagnose)
}

// rttSamples is how many requests measure a member's round trip.
const rttSamples = 5

// diagnose is the locker.Diagnoser of etcd:// and etcds:// URLs. It reads
// them as open does, with open's errors, then asks the cluster for its
// members and alarms, each member for its status (at the client URL it
// advertises), and the cluster for a lease to learn the shortest lease
// TTL it grants, as New does.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	cfg, hosts, err := clientConfig(u)
	if err != nil {
		return nil, err
	}
	all := strings.Join(hosts, ",")
	if cfg.TLS != nil {
		var d net.Dialer
		if err := checkTLS(ctx, d.DialContext, hosts, cfg.TLS, cfg.DialTimeout); err != nil {
			return []locker.Finding{{Check: "reachable", Status: locker.Fail, Target: all,
				Detail: err.Error(), Fix: "use the scheme and the cacert, cert and key parameters the servers expect"}}, nil
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return []locker.Finding{{Check: "reachable", Status: locker.Fail, Target: all,
			Detail: "cannot build a client: " + err.Error(), Fix: "correct the URL"}}, nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return []locker.Finding{{Check: "reachable", Status: locker.Fail, Target: all,
			Detail: fmt.Sprintf("no endpoint answers a member list: %v: no lock can be acquired or kept", err),
			Fix:    "start the members, or correct the URL's addresses, credentials or TLS settings"}}, nil
	}
	ttl := u.DefaultTTL()
	members := checkMembers(ctx, cfg, ml.Members)
	fs := []locker.Finding{
		memberCount(ml.Members, hosts),
		leader(members),
		leaseTTL(ctx, cli, ttl),
		alarms(ctx, cli, members),
	}
	for _, m := range members {
		fs = append(fs, m.findings(ttl)...)
	}
	return fs, nil
}

// clientConfig reads u as open does, with open's errors, and returns the
// client configuration and the URL's endpoints.
func clientConfig(u *locker.URL) (clientv3.Config, []string, error) {
	var cfg clientv3.Config
	dialTimeout, err := u.DurationParam("dial_timeout", defaultDialTimeout)
	if err != nil {
		return cfg, nil, err
	}
	if dialTimeout <= 0 {
		return cfg, nil, fmt.Errorf("invalid query parameter dial_timeout=%v: must be positive", dialTimeout)
	}
	caFile, _ := u.Param("cacert")
	certFile, _ := u.Param("cert")
	keyFile, _ := u.Param("key")
	if err := u.CheckParams(); err != nil {
		return cfg, nil, err
	}
	hosts, err := u.HostPorts("2379")
	if err != nil {
		return cfg, nil, fmt.Errorf("etcd: %w", err)
	}
	var tlsConf *tls.Config
	if u.Scheme == "etcds" {
		if tlsConf, err = tlsConfig(caFile, certFile, keyFile); err != nil {
			return cfg, nil, err
		}
	} else if caFile != "" || certFile != "" || keyFile != "" {
		return cfg, nil, errors.New("etcd: parameters cacert, cert and key need the etcds:// scheme")
	}
	cfg = clientv3.Config{
		Endpoints:   hosts,
		DialTimeout: dialTimeout,
		TLS:         tlsConf,
		Logger:      zap.NewNop(),
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	return cfg, hosts, nil
}

// memberCheck is what diagnose learned from one member.
type memberCheck struct {
	m      *etcdserverpb.Member
	target string // host:port of its first client URL, or its name
	err    error
	status *clientv3.StatusResponse
	rtt    time.Duration // median of rttSamples member lists
}

// checkMembers asks every member, all at once, at the client URL it
// advertises, for its status, and measures its round trip on a client of
// its own.
func checkMembers(ctx context.Context, cfg clientv3.Config, ms []*etcdserverpb.Member) []*memberCheck {
	ms = slices.SortedFunc(slices.Values(ms), func(a, b *etcdserverpb.Member) int { return strings.Compare(a.Name, b.Name) })
	out := make([]*memberCheck, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		out[i] = &memberCheck{m: m, target: m.Name}
		if len(m.ClientURLs) == 0 {
			out[i].err = errors.New("it advertises no client URL: it has not started, or was added and never joined")
			continue
		}
		if pu, err := url.Parse(m.ClientURLs[0]); err == nil && pu.Host != "" {
			out[i].target = pu.Host
		}
		wg.Go(func() { out[i].check(ctx, cfg) })
	}
	wg.Wait()
	return out
}

func (c *memberCheck) check(ctx context.Context, cfg clientv3.Config) {
	cfg.Endpoints = c.m.ClientURLs[:1]
	cli, err := clientv3.New(cfg)
	if err != nil {
		c.err = err
		return
	}
	defer cli.Close()
	if c.status, err = cli.Status(ctx, c.m.ClientURLs[0]); err != nil {
		c.err = err
		return
	}
	// A member list is one round trip that every member answers from its
	// own state, and needs no permission on any key.
	rtts := make([]time.Duration, rttSamples)
	for i := range rtts {
		start := time.Now()
		if _, err := cli.MemberList(ctx); err != nil {
			c.err = err
			return
		}
		rtts[i] = time.Since(start)
	}
	slices.Sort(rtts)
	c.rtt = rtts[len(rtts)/2]
}

// memberCount judges how many failures the voting members tolerate, and
// whether the URL lets clients reach them all.
func memberCount(ms []*etcdserverpb.Member, hosts []string) locker.Finding {
	voters := 0
	var names []string
	for _, m := range ms {
		if !m.IsLearner {
			voters++
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return locker.SizeFinding("members", strings.Join(hosts, ","),
		fmt.Sprintf("%d voting member(s) (%s) of %d; the URL names %d endpoint(s)", voters, strings.Join(names, ", "), len(ms), len(hosts)),
		voters, len(hosts), "member")
}

// leader judges whether the members that answer agree on a leader:
// without one, no write (acquire, refresh, release) succeeds.
func leader(members []*memberCheck) locker.Finding {
	f := locker.Finding{Check: "leader"}
	seen := map[uint64][]string{}
	var ids []uint64
	for _, m := range members {
		if m.err != nil {
			continue
		}
		id := m.status.Leader
		if seen[id] == nil {
			ids = append(ids, id)
		}
		seen[id] = append(seen[id], m.m.Name)
	}
	name := func(id uint64) string {
		for _, m := range members {
			if m.m.ID == id {
				return fmt.Sprintf("%s (%x)", m.m.Name, id)
			}
		}
		return fmt.Sprintf("%x (not a member)", id)
	}
	switch {
	case len(ids) == 0:
		f.Status = locker.Fail
		f.Detail = "no member answers with its status: the leader is unknown"
		f.Fix = "see the members' reachable findings"
	case len(ids) == 1 && ids[0] != 0:
		f.Detail = "the members that answer agree that the leader is " + name(ids[0])
	case len(ids) == 1:
		f.Status = locker.Fail
		f.Detail = "no member knows a leader: every write (acquire, refresh, release) fails until one is elected, and held locks expire"
		f.Fix = "restore a majority of the members, so that they elect a leader"
	default:
		var parts []string
		for _, id := range ids {
			parts = append(parts, fmt.Sprintf("%s by %s", name(id), strings.Join(seen[id], ", ")))
		}
		f.Status = locker.Warn
		f.Detail = "the members disagree on the leader (an election is under way, or a member is cut off): " + strings.Join(parts, "; ")
		f.Fix = "run the check again; if it persists, check the network between the members"
	}
	return f
}

// leaseTTL learns the shortest lease the cluster grants, as New does
// (probeMinTTL), and judges the TTL against it: a lock lives as long as
// its lease, counted in whole seconds.
func leaseTTL(ctx context.Context, cli *clientv3.Client, ttl time.Duration) locker.Finding {
	f := locker.Finding{Check: "lease-ttl"}
	minTTL, err := probeMinTTL(ctx, cli)
	if err != nil {
		f.Status = locker.Fail
		f.Detail = "cannot grant a lease: " + err.Error() + ": no lock can be acquired"
		f.Fix = "check the alarms, the members' health and, with authentication, the user's permissions"
		return f
	}
	lease := time.Duration(leaseSeconds(ttl)) * time.Second
	if ttl < minTTL {
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("the TTL %v is below the shortest lease the cluster grants, %v (one and a half election timeouts, in whole seconds): every acquisition with this TTL fails with ErrInvalidTTL", ttl, minTTL)
		f.Fix = fmt.Sprintf("choose a TTL of at least %v (?ttl=), or lower the members' --election-timeout", minTTL)
		return f
	}
	f.Detail = fmt.Sprintf("the shortest lease the cluster grants is %v; the TTL %v gets a lease of %v", minTTL, ttl, lease)
	if lease != ttl {
		f.Detail += " (leases count whole seconds): a crashed holder blocks others that much longer"
	}
	return f
}

// alarms reports the cluster's alarms: NOSPACE makes it refuse every
// write, CORRUPT means a member's data cannot be trusted.
func alarms(ctx context.Context, cli *clientv3.Client, members []*memberCheck) locker.Finding {
	f := locker.Finding{Check: "alarms"}
	resp, err := cli.AlarmList(ctx)
	if err != nil {
		f.Status = locker.Warn
		f.Detail = "cannot list the alarms: " + err.Error()
		f.Fix = "with authentication, give the user the root role to read the alarms"
		return f
	}
	if len(resp.Alarms) == 0 {
		f.Detail = "no alarm raised"
		return f
	}
	var parts []string
	for _, a := range resp.Alarms {
		who := fmt.Sprintf("%x", a.MemberID)
		for _, m := range members {
			if m.m.ID == a.MemberID {
				who = m.m.Name
			}
		}
		parts = append(parts, a.Alarm.String()+" on "+who)
	}
	f.Status = locker.Fail
	f.Detail = "alarms raised: " + strings.Join(parts, ", ") + ": with NOSPACE the cluster refuses every write, so no lock can be acquired or refreshed; with CORRUPT a member's data cannot be trusted"
	f.Fix = "NOSPACE: compact and defragment, raise --quota-backend-bytes, then etcdctl alarm disarm; CORRUPT: replace the member"
	return f
}

// findings judges one member: whether it answers, with what status, and
// its round trip.
func (c *memberCheck) findings(ttl time.Duration) []locker.Finding {
	f := locker.Finding{Check: "reachable", Target: c.target}
	if c.err != nil {
		f.Status = locker.Fail
		f.Detail = fmt.Sprintf("member %s (%x) does not answer at %s: %v: one more member down can stop all locking", c.m.Name, c.m.ID, strings.Join(c.m.ClientURLs, ","), c.err)
		f.Fix = "start the member, or check that the client URL it advertises is reachable from here"
		return []locker.Finding{f}
	}
	s := c.status
	role := "follower"
	switch {
	case s.Header != nil && s.Header.MemberId == s.Leader:
		role = "leader"
	case s.IsLearner:
		role = "learner (no vote)"
	}
	f.Detail = fmt.Sprintf("member %s answers: etcd %s, %s, raft term %d, database %d bytes", c.m.Name, s.Version, role, s.RaftTerm, s.DbSize)
	if len(s.Errors) > 0 {
		f.Status = locker.Warn
		f.Detail += "; it reports: " + strings.Join(s.Errors, "; ")
		f.Fix = "see the member's log"
	}
	return []locker.Finding{f,
		locker.RTTFinding(c.target, c.rtt, ttl, fmt.Sprintf("median of %d member lists", rttSamples))}
}
