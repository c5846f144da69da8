package zookeeper

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/zkclient"
)

func init() {
	locker.RegisterDiagnoser("zookeeper", diagnose)
	locker.RegisterDiagnoser("zk", diagnose)
}

// pingSamples is how many pings measure a server's round trip.
const pingSamples = 5

// diagnose is the locker.Diagnoser of zookeeper:// and zk:// URLs. It
// reads them as open does, with open's errors, then asks every server the
// URL names for a session (which also learns its session timeout range,
// as probeRange does), pings over it, and reads the four-letter words
// srvr and mntr for the server's role and the ensemble's size, and conf
// for its limit on connections per client address.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	if err := u.CheckParams(); err != nil {
		return nil, err
	}
	servers, err := u.HostPorts("2181")
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	if _, err := cleanBase(u.Path); err != nil {
		return nil, err
	}
	if u.User != nil {
		if _, ok := u.User.Password(); u.User.Username() == "" || !ok {
			return nil, errors.New("zookeeper: credentials must be user:password (digest authentication)")
		}
	}
	ttl := u.DefaultTTL()
	checked := make([]*serverCheck, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, openTimeout)
			defer cancel()
			checked[i] = checkServer(ctx, s)
		})
	}
	wg.Wait()
	fs := []locker.Finding{ensemble(checked), quorum(checked), fourLetterWords(checked)}
	for _, c := range checked {
		fs = append(fs, c.findings(ttl)...)
	}
	return fs, nil
}

// serverCheck is what diagnose learned from one server.
type serverCheck struct {
	addr string
	err  error // no session: unreachable, or not serving
	rng  sessionRange
	rtt  time.Duration // median of pingSamples pings
	// From srvr and mntr; fourErr says why they are missing.
	mode, version string
	voters        int // zk_quorum_size: the ensemble's voting members; 0 if unknown
	fourErr       error
	// From conf: maxClientCnxns, -1 when the server did not tell;
	// confErr says why.
	maxCnxns int
	confErr  error
}

func checkServer(ctx context.Context, addr string) *serverCheck {
	c := &serverCheck{addr: addr}
	c.rng.server = addr
	c.rng.min, c.rtt, c.err = pingSession(ctx, addr)
	if c.err == nil {
		var p zkclient.Probed
		p, c.err = zkclient.Probe(ctx, addr, math.MaxInt64, 0)
		c.rng.max = p.Granted
	}
	if c.err != nil {
		return c
	}
	srvr, err := fourLetter(ctx, addr, "srvr")
	if err == nil {
		c.mode, c.version = lineValue(srvr, "Mode: "), lineValue(srvr, "Zookeeper version: ")
		// "3.8.0-<commit>, built on <date>": the release is enough.
		c.version, _, _ = strings.Cut(c.version, ",")
		c.version, _, _ = strings.Cut(c.version, "-")
		var mntr string
		if mntr, err = fourLetter(ctx, addr, "mntr"); err == nil {
			c.voters, _ = strconv.Atoi(lineValue(mntr, "zk_quorum_size\t"))
		}
	}
	c.fourErr = err
	c.maxCnxns, c.confErr = maxClientCnxns(ctx, addr)
	return c
}

// maxClientCnxns reads the server's maxClientCnxns from conf: -1 and why
// when it cannot.
func maxClientCnxns(ctx context.Context, addr string) (int, error) {
	conf, err := fourLetter(ctx, addr, "conf")
	if err != nil {
		return -1, err
	}
	v := lineValue(conf, "maxClientCnxns=")
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1, fmt.Errorf("conf: no maxClientCnxns in its answer (%q)", v)
	}
	return n, nil
}

// pingSession opens a session asking for the shortest timeout (so that
// the server grants its minSessionTimeout), measures the round trip of
// pingSamples pings over it, and closes it.
func pingSession(ctx context.Context, server string) (granted, rtt time.Duration, err error) {
	p, err := zkclient.Probe(ctx, server, 0, pingSamples)
	if err != nil {
		return 0, 0, err
	}
	slices.Sort(p.RTTs)
	return p.Granted, p.RTTs[len(p.RTTs)/2], nil
}

// errNotAllowed is a four-letter word the server does not allow.
var errNotAllowed = errors.New("not in the server's 4lw.commands.whitelist")

// fourLetter sends a four-letter word on a connection of its own and
// returns the whole reply.
func fourLetter(ctx context.Context, server, word string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, word); err != nil {
		return "", err
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	out := b.String()
	switch {
	case sc.Err() != nil:
		return "", fmt.Errorf("%s: %w", word, sc.Err())
	case strings.Contains(out, "not in the whitelist"):
		return "", fmt.Errorf("%s: %w", word, errNotAllowed)
	case strings.Contains(out, "not currently serving"):
		return "", fmt.Errorf("%s: %s", word, strings.TrimSpace(out))
	}
	return out, nil
}

// lineValue returns what follows prefix on a line of out.
func lineValue(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func allAddrs(checked []*serverCheck) string {
	addrs := make([]string, len(checked))
	for i, c := range checked {
		addrs[i] = c.addr
	}
	return strings.Join(addrs, ",")
}

// ensemble judges the ensemble's size, from the servers' own account
// (mntr's zk_quorum_size, or srvr's standalone mode), against the URL.
func ensemble(checked []*serverCheck) locker.Finding {
	f := locker.Finding{Check: "ensemble", Target: allAddrs(checked)}
	size, leader := 0, ""
	for _, c := range checked {
		switch {
		case c.mode == "standalone":
			size = 1
		case c.voters > 0 && size == 0:
			size = c.voters
		}
		if c.mode == "leader" {
			leader = c.addr
		}
	}
	switch {
	case !slices.ContainsFunc(checked, func(c *serverCheck) bool { return c.err == nil }):
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("the URL names %d server(s), and none answers: the ensemble's size is unknown", len(checked))
		f.Fix = "see the reachable findings"
		return f
	case size == 0:
		f.Status = locker.Warn
		f.Detail = fmt.Sprintf("the URL names %d server(s), but none told the ensemble's size (srvr and mntr)", len(checked))
		f.Fix = "add srvr and mntr to 4lw.commands.whitelist in zoo.cfg, so that the ensemble can be checked"
		return f
	}
	detail := fmt.Sprintf("the ensemble has %d voting member(s); the URL names %d", size, len(checked))
	if leader != "" {
		detail += "; the leader is " + leader
	}
	return locker.SizeFinding(f.Check, f.Target, detail, size, len(checked), "server")
}

// quorum judges how many of the servers the URL names grant a session. A
// server grants sessions only while it is part of a quorum, so one that
// answers shows the ensemble serving.
func quorum(checked []*serverCheck) locker.Finding {
	up := 0
	for _, c := range checked {
		if c.err == nil {
			up++
		}
	}
	need := len(checked)/2 + 1
	f := locker.Finding{Check: "quorum", Target: allAddrs(checked),
		Detail: fmt.Sprintf("%d of the %d server(s) the URL names grant sessions; a majority is %d", up, len(checked), need)}
	switch {
	case up == 0:
		f.Status = locker.Fail
		f.Detail += ": no lock can be acquired, and held ones are lost when their sessions expire"
		f.Fix = "start the servers, or restore the ensemble's quorum; check the URL's addresses"
	case up < need:
		f.Status = locker.Warn
		f.Detail += ": fewer than a majority of them, though the ensemble has a quorum (a server grants sessions only while it is part of one); clients have that many fewer servers to fail over to"
		f.Fix = "bring the unreachable servers back (see their reachable findings)"
	default:
		f.Detail += "; a server grants sessions only while it is part of a quorum, so the ensemble has one"
	}
	return f
}

// fourLetterWords reports whether the servers answer srvr and mntr, which
// the ensemble and role checks need.
func fourLetterWords(checked []*serverCheck) locker.Finding {
	f := locker.Finding{Check: "four-letter-words", Target: allAddrs(checked)}
	var missing []string
	for _, c := range checked {
		if c.err == nil && c.fourErr != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", c.addr, c.fourErr))
		}
	}
	switch {
	case !slices.ContainsFunc(checked, func(c *serverCheck) bool { return c.err == nil }):
		f.Detail = "no server grants a session: none was asked"
		return f
	case len(missing) == 0:
		f.Detail = "the servers that grant sessions answer srvr and mntr"
		return f
	}
	f.Status = locker.Warn
	f.Detail = "no answer to srvr or mntr from " + strings.Join(missing, ", ") + ": their role and the ensemble's size are not checked"
	f.Fix = "add srvr and mntr to 4lw.commands.whitelist in zoo.cfg"
	return f
}

// findings judges one server: whether it grants sessions, whether its
// session timeouts admit the TTL, and its round trip.
func (c *serverCheck) findings(ttl time.Duration) []locker.Finding {
	if c.err != nil {
		return []locker.Finding{{
			Check: "reachable", Status: locker.Fail, Target: c.addr,
			Detail: fmt.Sprintf("no session: %v: clients connected to it fail over to the other servers, if the URL names any", c.err),
			Fix:    "start the server, or correct its address in the URL",
		}}
	}
	reach := locker.Finding{Check: "reachable", Target: c.addr, Detail: "grants sessions"}
	if c.mode != "" {
		reach.Detail += fmt.Sprintf(" (mode %s, ZooKeeper %s)", c.mode, c.version)
	}
	timeout := locker.Finding{Check: "session-timeout", Target: c.addr}
	if ttl < c.rng.min || ttl > c.rng.max {
		timeout.Status = locker.Fail
		timeout.Detail = fmt.Sprintf("the TTL %v is outside the session timeouts the server grants, %s: a lock's TTL is its session's timeout, so every acquisition with this TTL fails with ErrInvalidTTL", ttl, c.rng)
		timeout.Fix = fmt.Sprintf("choose a TTL from %v to %v (?ttl=), or widen minSessionTimeout and maxSessionTimeout in zoo.cfg to admit %v", c.rng.min, c.rng.max, ttl)
	} else {
		timeout.Detail = fmt.Sprintf("the TTL %v is within the session timeouts the server grants, %s", ttl, c.rng)
	}
	return []locker.Finding{reach, timeout, c.connectionLimit(),
		locker.RTTFinding(c.addr, c.rtt, ttl, fmt.Sprintf("median of %d pings on a session", pingSamples))}
}

// connectionLimit reports the server's maxClientCnxns, which no client
// can see otherwise: past it, the server accepts a connection from that
// address and closes it at once, and the client only learns that its
// session request got no answer. It passes whatever the limit: a refused
// connection is an error the application sees, not a lock silently broken.
func (c *serverCheck) connectionLimit() locker.Finding {
	f := locker.Finding{Check: "connection-limit", Target: c.addr}
	switch {
	case errors.Is(c.confErr, errNotAllowed):
		f.Detail = "unknown: the server does not allow the four-letter word conf (4lw.commands.whitelist), which tells its maxClientCnxns; " +
			"ZooKeeper's default is 60 connections per client address, past which it closes new ones at once (add conf to the whitelist to have it checked)"
	case c.confErr != nil:
		f.Detail = fmt.Sprintf("unknown: %v", c.confErr)
	case c.maxCnxns == 0:
		f.Detail = "maxClientCnxns is 0: no limit on connections per client address"
	default:
		f.Detail = fmt.Sprintf("maxClientCnxns is %d: the server closes at once any connection past %d from one client address "+
			"(the client sees no answer to its session request); each Locker holds one connection per TTL its locks use, "+
			"so processes behind one address (a NAT, a container host) and tools that open many clients (lockctl bench and chaos) can reach it", c.maxCnxns, c.maxCnxns)
	}
	return f
}
