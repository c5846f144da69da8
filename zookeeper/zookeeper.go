package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
)

func init() {
	locker.Register("zookeeper", open)
	locker.Register("zk", open)
}

// Options configures New. The zero value is not usable: SessionTimeout is
// required.
type Options struct {
	// Config is passed to locker.New. New puts WithTTL(SessionTimeout)
	// before its Defaults.
	Config locker.Config
	// SessionTimeout is the timeout of the session of the connection given
	// to New, as the server granted it (within its minSessionTimeout and
	// maxSessionTimeout). Required: the client library does not expose it.
	// It is the TTL of every lock of the Locker, and New refuses a value
	// the server cannot have granted.
	SessionTimeout time.Duration
	// Path is the node under which locks live, created as needed.
	// Default: /locker.
	Path string
	// ACL is set on every node the Locker creates. Default: open to all
	// (gozk.WorldACL(gozk.PermAll)). Note that ZooKeeper checks the permission
	// to delete a node on its parent: the key nodes' ACL is what keeps
	// other clients from deleting lock nodes.
	ACL []gozk.ACL
}

// openTimeout bounds what New and Open check against the servers.
const openTimeout = 5 * time.Second

// New returns a Locker whose locks live in the session of c, a connection
// the caller opened (and adds credentials to, if its ACLs need them).
// Every lock's TTL is the session's timeout (Options.SessionTimeout);
// other TTLs fail with ErrInvalidTTL. Locks are refreshed, released and
// lost with that session. The Locker does not close c.
//
// Locks opened by URL instead get a session per distinct TTL, opened and
// closed by the Locker, and a server-reported session expiry closes Lost
// at once; with New, a session expiry is noticed by the next refresh.
func New(c *gozk.Conn, opts *Options) (locker.Locker, error) {
	if c == nil {
		return nil, errors.New("zookeeper: New: the connection is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	timeout := o.SessionTimeout.Truncate(time.Millisecond)
	if timeout <= 0 {
		return nil, errors.New("zookeeper: Options.SessionTimeout is required: the timeout of c's session, as the server granted it")
	}
	base, err := cleanBase(o.Path)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	// The server's range tells whether c's session can have this timeout,
	// and its tick, how late the server may expire a session.
	for c.State() != gozk.StateHasSession {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("zookeeper: the connection has no session after %v (state %v)", openTimeout, c.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	rng, err := probeRange(ctx, []string{c.Server()})
	if err != nil {
		return nil, fmt.Errorf("zookeeper: server unreachable: %w", err)
	}
	if timeout < rng.min || timeout > rng.max {
		return nil, fmt.Errorf("%w: Options.SessionTimeout is %v, but the server grants session timeouts %s, so c's session cannot have it", locker.ErrInvalidTTL, timeout, rng)
	}
	d := newDriver(o.Config.ResolvedLogger())
	d.base = base
	d.acl = o.ACL
	if d.acl == nil {
		d.acl = gozk.WorldACL(gozk.PermAll)
	}
	s := d.newSession(timeout, false)
	s.conn = c
	close(s.ready)
	close(s.connected)
	d.fixed = s
	d.caps = capabilities(rng, false)
	d.caps.MinTTL, d.caps.MaxTTL = timeout, timeout
	cfg := o.Config
	cfg.Defaults = append([]locker.Option{locker.WithTTL(timeout)}, cfg.Defaults...)
	if err := locker.CheckConfig(d, &cfg); err != nil {
		d.Close()
		return nil, fmt.Errorf("zookeeper: %w (a Locker over a given connection has its session timeout, %v, as its only TTL)", err, timeout)
	}
	return locker.New(d, &cfg), nil
}

// maxValueLen is the longest value a hold carries in its node's data:
// 64 KiB, well within the 1 MiB that a server's jute.maxbuffer allows a
// request by default (a move sends the value twice in one transaction),
// and small enough that an Inspect reading many holders, or a server
// keeping many such nodes in memory, stays cheap.
const maxValueLen = 64 << 10

// capabilities are what a driver over servers with session range r
// guarantees.
func capabilities(r sessionRange, lossSignal bool) backend.Capabilities {
	return backend.Capabilities{
		Name:          "zookeeper",
		Fencing:       true,
		FIFO:          true,
		Shared:        true,
		Permits:       true,
		WakeOnRelease: true,
		LossSignal:    lossSignal,
		MaxValueLen:   maxValueLen,
		MinTTL:        r.min,
		MaxTTL:        r.max,
		// The leader expires sessions in rounds, once per tick: up to a
		// tick after the timeout. A follower reports its clients' activity
		// to the leader every half tick, so the leader may see the last of
		// it half a tick late. Then the expiry is committed by a quorum and
		// the next waiter woken and served. The tick is not visible to
		// clients; minSessionTimeout is two ticks unless configured
		// otherwise.
		ExpirySlack: 3*(r.min/2)/2 + 250*time.Millisecond,
	}
}

// open handles zookeeper:// and zk:// URLs:
//
//	zookeeper://[user:password@]host[:port][,host[:port]...][/path]
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	if err := u.CheckParams(); err != nil {
		return nil, err
	}
	servers, err := u.HostPorts("2181")
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	base, err := cleanBase(u.Path)
	if err != nil {
		return nil, err
	}
	d := newDriver(u.Config.ResolvedLogger())
	d.servers = servers
	d.base = base
	d.acl = gozk.WorldACL(gozk.PermAll)
	if u.User != nil {
		user := u.User.Username()
		pass, ok := u.User.Password()
		if user == "" || !ok {
			return nil, errors.New("zookeeper: credentials must be user:password (digest authentication)")
		}
		d.auth = []byte(user + ":" + pass)
		// Others may read the queue, but only holders of the credentials
		// may queue, and delete nodes (which ZooKeeper checks on the parent).
		d.acl = append(gozk.DigestACL(gozk.PermAll, user, pass), gozk.WorldACL(gozk.PermRead)...)
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	rng, err := probeRange(ctx, servers)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: server unreachable: %w", err)
	}
	d.caps = capabilities(rng, true)
	return locker.New(d, &u.Config), nil
}
