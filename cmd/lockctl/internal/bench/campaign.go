package bench

// The campaigners of the failover scenario: each a process of its own
// ("lockctl bench-campaigner"), so that a leader dies as processes do,
// by SIGKILL, and its lease or session must expire on the servers before
// another campaigner can lead. A campaigner writes one line per step on
// its standard output:
//
//	campaigning     connected; it campaigns now
//	leading         it leads: a new leader's first action
//	lost REASON     it led, and no longer does
//	error REASON    it could not campaign
//
// It runs until it is killed, or until its standard input ends, when it
// resigns and exits.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/go-zookeeper/zk"
	"go.etcd.io/etcd/client/v3/concurrency"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/locker"
)

// The election designs of the failover scenario besides the Locker's
// (Design names, as the results give them).
const (
	// ElectionEtcd is etcd's concurrency.Election, on a Session whose
	// lease has the scenario's TTL.
	ElectionEtcd = "concurrency.Election"
	// ElectionZK is the election a go-zookeeper user builds from zk.Lock:
	// whoever holds the lock leads; its session timeout is the TTL.
	ElectionZK = "zk.Lock"
)

// electionDesigns are the designs the failover scenario runs on backend:
// the Locker's Election, and the peer election where the backend has one.
func electionDesigns(backend string) []Design {
	ds := []Design{{Backend: backend, Name: KindLocker, Kind: KindLocker}}
	switch backend {
	case "etcd":
		ds = append(ds, Design{Backend: backend, Name: ElectionEtcd, Kind: KindPeer})
	case "zookeeper":
		ds = append(ds, Design{Backend: backend, Name: ElectionZK, Kind: KindPeer})
	}
	return ds
}

// campaigner is one design's side of a campaign.
type campaigner interface {
	// campaign blocks until it leads the election name, or ctx ends; lost
	// then says why, once, should the leadership end.
	campaign(ctx context.Context, name string, value []byte) (lost <-chan error, err error)
	// resign gives up the leadership, if it leads.
	resign(ctx context.Context) error
	close() error
}

// Campaign is a campaigner process's work: it campaigns for name on the
// deployment at rawURL as design (KindLocker, ElectionEtcd or
// ElectionZK) with ttl, writing the lines the package's doc lists to
// out, until in ends or ctx does.
func Campaign(ctx context.Context, design, rawURL, name string, ttl time.Duration, in io.Reader, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, in) // the end of input ends the campaign
		cancel()
	}()
	c, err := openCampaigner(ctx, design, rawURL, ttl)
	if err != nil {
		fmt.Fprintf(out, "error %v\n", err)
		return err
	}
	defer c.close()
	host, _ := os.Hostname()
	fmt.Fprintln(out, "campaigning")
	lost, err := c.campaign(ctx, name, fmt.Appendf(nil, "%s:%d", host, os.Getpid()))
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil:
		fmt.Fprintf(out, "error %v\n", err)
		return err
	}
	fmt.Fprintln(out, "leading")
	select {
	case why := <-lost:
		fmt.Fprintf(out, "lost %v\n", why)
		return why
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.resign(rctx)
	}
}

// openCampaigner connects a campaigner of design to the deployment.
func openCampaigner(ctx context.Context, design, rawURL string, ttl time.Duration) (campaigner, error) {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch design {
	case KindLocker:
		l, err := locker.Open(octx, rawURL)
		if err != nil {
			return nil, err
		}
		return &lockerCampaigner{l: l, ttl: ttl}, nil
	case ElectionEtcd:
		return openEtcdCampaigner(octx, rawURL, ttl)
	case ElectionZK:
		return openZKCampaigner(octx, rawURL, ttl)
	}
	return nil, fmt.Errorf("bench: unknown election design %q (want %s, %s or %s)", design, KindLocker, ElectionEtcd, ElectionZK)
}

// lockerCampaigner campaigns with this library's Election.
type lockerCampaigner struct {
	l   locker.Locker
	ttl time.Duration
	e   *locker.Election
}

func (c *lockerCampaigner) campaign(ctx context.Context, name string, value []byte) (<-chan error, error) {
	if c.l.Capabilities().MaxValueLen == 0 {
		value = nil // a backend that stores no values leads without one
	}
	c.e = locker.NewElection(c.l, name, locker.WithTTL(c.ttl))
	lead, err := c.e.Campaign(ctx, value)
	if err != nil {
		return nil, err
	}
	lost := make(chan error, 1)
	go func() {
		<-lead.Lost()
		lost <- lead.Err()
	}()
	return lost, nil
}

func (c *lockerCampaigner) resign(ctx context.Context) error {
	if c.e == nil {
		return nil
	}
	return c.e.Resign(ctx)
}

func (c *lockerCampaigner) close() error { return c.l.Close() }

// etcdCampaigner campaigns with etcd's concurrency.Election, on a
// Session of its own whose lease has the TTL, in whole seconds.
type etcdCampaigner struct {
	cli     *clientv3.Client
	session *concurrency.Session
	prefix  string
	e       *concurrency.Election
}

func openEtcdCampaigner(ctx context.Context, rawURL string, ttl time.Duration) (*etcdCampaigner, error) {
	t, err := rawParseURL("etcd", rawURL)
	if err != nil {
		return nil, err
	}
	cli, err := rawEtcdClient(ctx, t)
	if err != nil {
		return nil, err
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(etcdLeaseSeconds(ttl)))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("bench: etcd: concurrency session: %w", err)
	}
	return &etcdCampaigner{cli: cli, session: session, prefix: rawEtcdPrefix(t, ElectionEtcd)}, nil
}

// etcdLeaseSeconds is ttl as etcd's leases take it: whole seconds,
// rounded up, at least one.
func etcdLeaseSeconds(ttl time.Duration) int {
	return max(1, int(math.Ceil(ttl.Seconds())))
}

func (c *etcdCampaigner) campaign(ctx context.Context, name string, value []byte) (<-chan error, error) {
	c.e = concurrency.NewElection(c.session, c.prefix+name)
	if err := c.e.Campaign(ctx, string(value)); err != nil {
		return nil, err
	}
	lost := make(chan error, 1)
	go func() {
		<-c.session.Done()
		lost <- errors.New("the session's lease ended")
	}()
	return lost, nil
}

func (c *etcdCampaigner) resign(ctx context.Context) error {
	if c.e == nil {
		return nil
	}
	return c.e.Resign(ctx)
}

func (c *etcdCampaigner) close() error {
	c.session.Close()
	return c.cli.Close()
}

// zkCampaigner is the election a user of go-zookeeper builds from
// zk.Lock: a lock on the election's node, with the value as the lock
// node's data; the holder leads. Its session timeout is the TTL.
type zkCampaigner struct {
	conn   *zk.Conn
	events <-chan zk.Event
	root   string
	lock   *zk.Lock
}

func openZKCampaigner(ctx context.Context, rawURL string, ttl time.Duration) (*zkCampaigner, error) {
	t, err := rawParseURL("zookeeper", rawURL)
	if err != nil {
		return nil, err
	}
	conn, events, err := rawZKSession(ctx, t, ttl)
	if err != nil {
		return nil, err
	}
	c := &zkCampaigner{conn: conn, events: events, root: rawZKRoot(t, "zk.Lock-election")}
	if err := rawZKMkdirAll(conn, c.root); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// campaign runs zk.Lock's LockWithData, which takes no context, in a
// goroutine; when ctx ends first, closing the connection ends it.
func (c *zkCampaigner) campaign(ctx context.Context, name string, value []byte) (<-chan error, error) {
	c.lock = zk.NewLock(c.conn, c.root+"/"+rawZKName(name), rawZKACL)
	result := make(chan error, 1)
	go func() { result <- c.lock.LockWithData(value) }()
	select {
	case err := <-result:
		if err != nil {
			return nil, fmt.Errorf("bench: zk.Lock: %w", err)
		}
	case <-ctx.Done():
		c.conn.Close()
		<-result
		return nil, ctx.Err()
	}
	lost := make(chan error, 1)
	go func() {
		for ev := range c.events {
			if ev.State == zk.StateExpired {
				lost <- errors.New("the session expired")
				return
			}
		}
		lost <- errors.New("the connection closed")
	}()
	return lost, nil
}

func (c *zkCampaigner) resign(context.Context) error {
	if c.lock == nil {
		return nil
	}
	return c.lock.Unlock()
}

func (c *zkCampaigner) close() error {
	c.conn.Close()
	return nil
}
