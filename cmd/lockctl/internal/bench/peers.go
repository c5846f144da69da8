package bench

// The peer designs: the lock libraries a Go team would otherwise pick for
// each backend, used as their documentation shows, so that the bench can
// say what the locker library costs or saves against them. Their Lock
// waits for a busy key until it is free or ctx ends (Design.Waits).
//
// Each keeps its keys in its own namespace (rawNamespace) and connects
// as the raw designs do (raw.go).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"
)

// PeerDesigns returns the peer libraries for backend (the Backend.Name)
// on the servers rawURL names: redsync and redislock on redis, redsync on
// redlock, concurrency.Mutex on etcd, zk.Lock on zookeeper, none on
// memory, and none on postgres, where applications lock with the
// server's own primitives (the raw designs) rather than a library. The
// URL is checked here; the servers are first contacted by Design.Open.
func PeerDesigns(backend, rawURL string) ([]Design, error) {
	switch backend {
	case "memory":
		return nil, nil
	case "postgres":
		_, err := rawPGConfig(rawURL)
		return nil, err
	}
	t, err := rawParseURL(backend, rawURL)
	if err != nil {
		return nil, err
	}
	switch backend {
	case "redis":
		return []Design{
			peerDesign(backend, "redsync", func(ctx context.Context) (Client, error) { return peerOpenRedsync(ctx, t) }),
			peerDesign(backend, "redislock", func(ctx context.Context) (Client, error) { return peerOpenRedislock(ctx, t) }),
		}, nil
	case "redlock":
		return []Design{
			peerDesign(backend, "redsync", func(ctx context.Context) (Client, error) { return peerOpenRedsync(ctx, t) }),
		}, nil
	case "etcd":
		return []Design{
			peerDesign(backend, "concurrency.Mutex", func(ctx context.Context) (Client, error) { return peerOpenEtcd(ctx, t) }),
		}, nil
	default: // zookeeper: rawParseURL knows no other backend
		return []Design{
			peerDesign(backend, "zk.Lock", func(ctx context.Context) (Client, error) { return peerOpenZK(ctx, t) }),
		}, nil
	}
}

func peerDesign(backend, name string, open func(context.Context) (Client, error)) Design {
	return Design{Backend: backend, Name: name, Kind: KindPeer, Waits: true, Open: open}
}

// peerCtxErr makes an error that came of ctx ending say so: redsync
// answers ErrFailed when its context ends, and a scenario must be able to
// tell a deadline (errors.Is context.DeadlineExceeded) from a failure.
func peerCtxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// peerRedisClients connects to each of the URL's hosts (one for redis,
// N for redlock) and pings them, so that Open fails on a server it
// cannot reach. The peers are measured with every node up.
func peerRedisClients(ctx context.Context, t *rawTarget) ([]*goredis.Client, error) {
	var clients []*goredis.Client
	for _, h := range t.hosts {
		rdb := rawRedisClient(t, h)
		clients = append(clients, rdb)
		if err := rdb.Ping(ctx).Err(); err != nil {
			peerCloseRedis(clients)
			return nil, fmt.Errorf("bench: %s: %s: %w", t.backend, h, err)
		}
	}
	return clients, nil
}

func peerCloseRedis(clients []*goredis.Client) error {
	var errs []error
	for _, rdb := range clients {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// redsync: one pool per Redis server, a quorum of N/2+1 (1 of 1 on redis).

// peerRedsyncTries makes redsync retry until ctx ends rather than give up
// after its default 32 tries, as the other designs that wait do. Between
// tries it sleeps its default delay, a random 50 to 250 ms: that is what
// a user gets out of the box, and what its handoff latency shows.
const peerRedsyncTries = math.MaxInt

type peerRedsync struct {
	rs      *redsync.Redsync
	clients []*goredis.Client
	ns      string
}

func peerOpenRedsync(ctx context.Context, t *rawTarget) (Client, error) {
	clients, err := peerRedisClients(ctx, t)
	if err != nil {
		return nil, err
	}
	pools := make([]redsyncredis.Pool, len(clients))
	for i, rdb := range clients {
		pools[i] = redsyncgoredis.NewPool(rdb)
	}
	return &peerRedsync{rs: redsync.New(pools...), clients: clients, ns: rawNamespace("redsync")}, nil
}

// Lock makes a Mutex per call: a redsync Mutex holds one acquisition's
// token, so sharing one between concurrent calls would mix them up.
func (c *peerRedsync) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	if err := rawCheckTTL(ttl); err != nil {
		return nil, err
	}
	m := c.rs.NewMutex(c.ns+key, redsync.WithExpiry(ttl), redsync.WithTries(peerRedsyncTries))
	if err := m.LockContext(ctx); err != nil {
		return nil, peerCtxErr(ctx, err)
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if !ok && err == nil {
			err = rawErrNotHeld
		}
		return err
	}, nil
}

func (c *peerRedsync) Close() error { return peerCloseRedis(c.clients) }

// ---------------------------------------------------------------------------
// bsm/redislock: one Redis server.

// peerRedislockBackoff is how often a waiting redislock retries: Obtain
// tries once unless given a RetryStrategy. 10 ms puts a waiter's
// handoff within 10 ms of a release (5 on average), the order of the
// designs that are woken (ZooKeeper and etcd watches), at 100 SETs a
// second per waiter, which one Redis serves easily for the waiters the
// scenarios run. A longer interval would measure our choice, not the
// library.
const peerRedislockBackoff = 10 * time.Millisecond

type peerRedislock struct {
	rdb   *goredis.Client
	locks *redislock.Client
	ns    string
}

func peerOpenRedislock(ctx context.Context, t *rawTarget) (Client, error) {
	clients, err := peerRedisClients(ctx, t)
	if err != nil {
		return nil, err
	}
	return &peerRedislock{rdb: clients[0], locks: redislock.New(clients[0]), ns: rawNamespace("redislock")}, nil
}

// Lock retries until ctx ends. When ctx has no deadline, Obtain gives
// itself one of a TTL from now and fails with context.DeadlineExceeded
// when it passes (not ErrNotObtained): while ctx itself lives, that
// only means the key was still held, and the loop carries on.
func (c *peerRedislock) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	if err := rawCheckTTL(ttl); err != nil {
		return nil, err
	}
	opt := &redislock.Options{RetryStrategy: redislock.LinearBackoff(peerRedislockBackoff)}
	for {
		lock, err := c.locks.Obtain(ctx, c.ns+key, ttl, opt)
		switch {
		case err == nil:
			return lock.Release, nil
		case ctx.Err() != nil:
			return nil, peerCtxErr(ctx, err)
		case !errors.Is(err, redislock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded):
			return nil, err
		}
	}
}

func (c *peerRedislock) Close() error { return c.rdb.Close() }

// ---------------------------------------------------------------------------
// etcd concurrency.Mutex: one Session (a lease kept alive) per client.

// peerEtcdSessionTTL is the session's lease TTL in seconds, as the raw
// design's: the ttl passed to Lock is ignored, as a Session's lease is
// shared by all of the client's locks.
const peerEtcdSessionTTL = rawEtcdLeaseTTL

type peerEtcd struct {
	cli     *clientv3.Client
	session *concurrency.Session
	ns      string
}

func peerOpenEtcd(ctx context.Context, t *rawTarget) (Client, error) {
	p, err := openPeerEtcd(ctx, t, "concurrency.Mutex")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// openPeerEtcd opens a client and its concurrency Session for a peer
// design, its keys under the design's prefix.
func openPeerEtcd(ctx context.Context, t *rawTarget, design string) (*peerEtcd, error) {
	cli, err := rawEtcdClient(ctx, t)
	if err != nil {
		return nil, err
	}
	// The session's context is the client's, not Open's: its keep-alive
	// must outlive Open. rawEtcdClient's call has shown the cluster up.
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(peerEtcdSessionTTL))
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("bench: etcd: concurrency session: %w", err)
	}
	return &peerEtcd{cli: cli, session: session, ns: rawEtcdPrefix(t, design)}, nil
}

// Lock makes a Mutex per call, as a Mutex holds one acquisition. Mutexes
// of one Session share its lease, so concurrency.Mutex is re-entrant per
// Session: two Lock calls for one key on the same Client both succeed.
// Contenders must each Open a Client of their own, as processes would.
func (c *peerEtcd) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	m := concurrency.NewMutex(c.session, c.ns+key)
	if err := m.Lock(ctx); err != nil {
		return nil, peerCtxErr(ctx, err)
	}
	return m.Unlock, nil
}

// Close revokes the session's lease (releasing the client's locks at
// once), bounded so that a cluster that went away cannot hang it, which
// Session.Close could for the lease's whole TTL.
func (c *peerEtcd) Close() error {
	c.session.Orphan()
	return rawEtcdClose(c.cli, c.session.Lease())
}

// ---------------------------------------------------------------------------
// go-zookeeper's zk.Lock: the queue recipe, waiting on its predecessor.

type peerZK struct {
	conn *zk.Conn
	root string
	// waiters counts the goroutines running zk.Lock.Lock, which Close
	// waits for: closing the connection ends them.
	waiters sync.WaitGroup
}

func peerOpenZK(ctx context.Context, t *rawTarget) (Client, error) {
	conn, err := rawZKConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	c := &peerZK{conn: conn, root: rawZKRoot(t, "zk.Lock")}
	if err := rawZKMkdirAll(conn, c.root); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Lock runs zk.Lock.Lock, which takes no context and waits for as long as
// it takes, in a goroutine. When ctx ends first, Lock returns and the
// goroutine is left to it: its node keeps its place in the queue, and
// once it gets the lock it releases it at once. That is the best a user
// of zk.Lock can do too, and it makes the next waiter's handoff a little
// slower, as it would theirs. The ttl is ignored: the lock lives as long
// as the session (rawZKSessionTimeout once the client is gone).
func (c *peerZK) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lock := zk.NewLock(c.conn, c.root+"/"+rawZKName(key), rawZKACL)
	result, abandoned := make(chan error), make(chan struct{})
	c.waiters.Go(func() {
		err := lock.Lock()
		select {
		case result <- err:
		case <-abandoned:
			if err == nil {
				_ = lock.Unlock()
			}
		}
	})
	select {
	case err := <-result:
		if err != nil {
			return nil, fmt.Errorf("bench: zk.Lock: %w", err)
		}
		return func(context.Context) error { return peerZKUnlock(lock) }, nil
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	}
}

// peerZKUnlock releases lock; a node already gone went with its session.
func peerZKUnlock(lock *zk.Lock) error {
	err := lock.Unlock()
	if errors.Is(err, zk.ErrNoNode) {
		return rawErrNotHeld
	}
	return err
}

// Close ends the session, which deletes the client's nodes and wakes the
// goroutines still waiting in zk.Lock.Lock with an error.
func (c *peerZK) Close() error {
	c.conn.Close()
	c.waiters.Wait()
	return nil
}

// ---------------------------------------------------------------------------
// The peers of the read-write and semaphore scenarios (Design.KindsOnly):
// etcd's recipe.RWMutex, the read/write lock that etcd's client module
// ships. No peer library measured here has a semaphore.

// PeerKindDesigns returns the peers of the read-write and semaphore
// scenarios on backend: recipe.RWMutex on etcd, none elsewhere.
func PeerKindDesigns(backend, rawURL string) ([]Design, error) {
	if backend != "etcd" {
		return nil, nil
	}
	t, err := rawParseURL(backend, rawURL)
	if err != nil {
		return nil, err
	}
	d := peerDesign(backend, "recipe.RWMutex", func(ctx context.Context) (Client, error) { return peerOpenRWMutex(ctx, t) })
	d.Shared, d.KindsOnly = true, true
	return []Design{d}, nil
}

// peerRWMutex is one client of recipe.RWMutex: a Session per client, as
// concurrency.Mutex's; readers and writers queue by create revision
// under the key's prefix, a reader waiting for the last writer before
// it, a writer for the last key before it.
type peerRWMutex struct {
	peerEtcd
	// waiters counts the goroutines in RLock or Lock, which take no
	// context: Close waits for them, and closing the client ends them.
	waiters sync.WaitGroup
}

func peerOpenRWMutex(ctx context.Context, t *rawTarget) (Client, error) {
	p, err := openPeerEtcd(ctx, t, "recipe.RWMutex")
	if err != nil {
		return nil, err
	}
	return &peerRWMutex{peerEtcd: *p}, nil
}

// Lock takes the write lock. ttl is ignored: the Session's lease is.
func (c *peerRWMutex) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	m := recipe.NewRWMutex(c.session, c.ns+key)
	return c.wait(ctx, m.Lock, m.Unlock)
}

// LockShared takes a read lock.
func (c *peerRWMutex) LockShared(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	m := recipe.NewRWMutex(c.session, c.ns+key)
	return c.wait(ctx, m.RLock, m.RUnlock)
}

// wait runs lock, which takes no context, in a goroutine. When ctx ends
// first, wait returns and the goroutine is left to it: its key keeps its
// place in the queue, and once it holds the lock it unlocks at once, as
// the best a user of recipe.RWMutex can do (peerZK does the same).
func (c *peerRWMutex) wait(ctx context.Context, lock, unlock func() error) (Unlock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	result, abandoned := make(chan error), make(chan struct{})
	c.waiters.Go(func() {
		err := lock()
		select {
		case result <- err:
		case <-abandoned:
			if err == nil {
				_ = unlock()
			}
		}
	})
	select {
	case err := <-result:
		if err != nil {
			return nil, fmt.Errorf("bench: recipe.RWMutex: %w", err)
		}
		return func(context.Context) error { return unlock() }, nil
	case <-ctx.Done():
		close(abandoned)
		return nil, ctx.Err()
	}
}

// Close revokes the session's lease and closes the client, which ends
// the goroutines still waiting, then waits for them.
func (c *peerRWMutex) Close() error {
	err := c.peerEtcd.Close()
	c.waiters.Wait()
	return err
}
