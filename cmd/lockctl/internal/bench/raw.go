package bench

// The raw designs: each backend's lock primitive sent straight to the
// server, with no library in between. They are the floor the locker
// library is measured against: whatever the library costs on top of
// them (validation, tokens, fencing, watchdogs, telemetry) shows as the
// ratio between the two. They try once and do not wait (Design.Waits is
// false), so they stay out of the scenarios where keys contend.
//
// This file also holds what the peer designs (peers.go) share with them:
// reading the --url, the key namespace, ZooKeeper and etcd connections.

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// rawErrNotHeld is what an Unlock returns when the lock was no longer
// ours to release (it expired, or its session or lease ended): the safe
// release left the key alone.
var rawErrNotHeld = errors.New("the lock was no longer held")

// RawDesigns returns the raw server primitives of backend (the
// Backend.Name: redis, redlock, zookeeper, etcd, postgres or memory) on
// the servers rawURL names: one design named "raw"; on postgres two,
// "raw" (a lease row) and "raw-advisory" (a session advisory lock: see
// raw_postgres.go); none for memory, which has no server. The URL is
// checked here; the servers are first contacted by Design.Open.
func RawDesigns(backend, rawURL string) ([]Design, error) {
	switch backend {
	case "memory":
		return nil, nil
	case "postgres":
		return rawPGDesigns(rawURL)
	}
	t, err := rawParseURL(backend, rawURL)
	if err != nil {
		return nil, err
	}
	var open func(context.Context) (Client, error)
	switch backend {
	case "redis":
		open = func(ctx context.Context) (Client, error) { return rawOpenRedis(ctx, t) }
	case "redlock":
		open = func(ctx context.Context) (Client, error) { return rawOpenRedlock(ctx, t) }
	case "etcd":
		open = func(ctx context.Context) (Client, error) { return rawOpenEtcd(ctx, t) }
	case "zookeeper":
		open = func(ctx context.Context) (Client, error) { return rawOpenZK(ctx, t) }
	}
	return []Design{{Backend: backend, Name: "raw", Kind: KindRaw, Waits: false, Open: open}}, nil
}

// ---------------------------------------------------------------------------
// URLs and keys, shared with peers.go

// rawTarget is what the raw and peer designs take from a --url; a
// postgres:// URL is pgx's to read (rawPGConfig).
type rawTarget struct {
	backend  string
	hosts    []string // host:port, default port filled in
	user     string
	password string
	path     string // the URL's path without its slashes: Redis db, etcd prefix, ZooKeeper root
}

// rawSchemes maps each backend to the URL schemes its designs accept and
// the port a host without one gets. TLS schemes (rediss, redlocks,
// etcds) and Sentinel are left out on purpose: the designs here are
// measured on plain connections only, and saying so beats a handshake
// error at the first Lock.
var rawSchemes = map[string]struct {
	schemes []string
	port    string
}{
	"redis":     {[]string{"redis"}, "6379"},
	"redlock":   {[]string{"redlock"}, "6379"},
	"zookeeper": {[]string{"zookeeper", "zk"}, "2181"},
	"etcd":      {[]string{"etcd"}, "2379"},
}

// rawParseURL reads rawURL for backend. Errors name the problem but
// never echo the URL, so that a password in it cannot leak into a report.
// Query parameters are the locker library's (ttl, prefix, client, ...),
// which its own Open checks; they are ignored here, as these designs
// keep their keys in a namespace of their own (rawNamespace).
func rawParseURL(backend, rawURL string) (*rawTarget, error) {
	spec, ok := rawSchemes[backend]
	if !ok {
		return nil, fmt.Errorf("bench: unknown backend %q (want redis, redlock, zookeeper, etcd, postgres or memory)", backend)
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || scheme == "" {
		return nil, fmt.Errorf("bench: %s: malformed URL: no scheme:// (want %s://host:port)", backend, spec.schemes[0])
	}
	scheme = strings.ToLower(scheme)
	if !slices.Contains(spec.schemes, scheme) {
		return nil, fmt.Errorf("bench: %s: URL scheme %q is not supported by the raw and peer designs (want %s://)",
			backend, scheme, strings.Join(spec.schemes, ":// or "))
	}
	// url.Parse takes h1:p1,h2:p2 for one host whose port is whatever
	// follows the last colon, so the host list is cut out and read here.
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo := ""
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, authority = authority[:i+1], authority[i+1:]
	}
	hosts, err := rawHosts(authority, spec.port)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: malformed URL: %w", backend, err)
	}
	u, err := url.Parse(scheme + "://" + userinfo + "placeholder" + tail)
	if err != nil {
		// url's errors quote the URL, password included: name the part instead.
		return nil, fmt.Errorf("bench: %s: malformed URL: the user, path or query cannot be read", backend)
	}
	t := &rawTarget{backend: backend, hosts: hosts, path: strings.Trim(u.Path, "/")}
	if u.User != nil {
		t.user = u.User.Username()
		t.password, _ = u.User.Password()
	}
	return t, t.check()
}

// rawHosts splits a comma-separated host list, giving each host without
// a port the default one.
func rawHosts(list, defaultPort string) ([]string, error) {
	if list == "" {
		return nil, errors.New("no host")
	}
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		hu, err := url.Parse("//" + h)
		if h == "" || err != nil || hu.Host != h || hu.Hostname() == "" {
			return nil, fmt.Errorf("host %q is not host[:port]", h)
		}
		port := hu.Port()
		if port == "" {
			port = defaultPort
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("host %q: port %q is not a number from 1 to 65535", h, port)
		}
		hosts = append(hosts, net.JoinHostPort(hu.Hostname(), port))
	}
	return hosts, nil
}

// check rejects what a backend's designs cannot use.
func (t *rawTarget) check() error {
	switch t.backend {
	case "redis":
		if len(t.hosts) > 1 {
			return errors.New("bench: redis: several hosts: the raw and peer designs take one Redis server (for independent masters use redlock://; Redis Cluster is not supported)")
		}
		fallthrough
	case "redlock":
		if _, err := t.redisDB(); err != nil {
			return err
		}
	case "zookeeper":
		if strings.Contains(t.path, "//") {
			return fmt.Errorf("bench: zookeeper: path %q has an empty node name", "/"+t.path)
		}
	}
	return nil
}

// redisDB is the Redis database number the URL's path names, 0 if none.
func (t *rawTarget) redisDB() (int, error) {
	if t.path == "" {
		return 0, nil
	}
	db, err := strconv.Atoi(t.path)
	if err != nil || db < 0 {
		return 0, fmt.Errorf("bench: %s: database %q in the URL's path is not a number (want /0, /1, ...)", t.backend, t.path)
	}
	return db, nil
}

// rawNamespace is where design keeps its keys: apart from the locker
// library's keys and from every other design's, so that a bench run
// cannot disturb a lock the application holds, and two designs that
// store a lock differently (a Redis string, a ZooKeeper queue) never
// read each other's.
func rawNamespace(design string) string { return "lockctl-bench/" + design + "/" }

// rawToken is a random lock value, so that a release can tell its own
// lock from the next holder's.
func rawToken() string { return rand.Text() }

// rawCheckTTL rejects a TTL that Redis would read as no expiry (or
// refuse): a raw lock must expire, or a crashed holder blocks the key.
func rawCheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("bench: ttl %v: must be positive", ttl)
	}
	return nil
}

// rawDetached is ctx without its cancellation but with a deadline of its
// own: for the clean-up after a failed attempt, which must run even when
// ctx ended, and must not hang.
func rawDetached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
}

// ---------------------------------------------------------------------------
// Redis: SET key token NX PX ttl, released by compare-and-delete.

// rawReleaseScript deletes the key only if it still holds our token, so a
// holder whose lock expired cannot delete the next holder's.
const rawReleaseScript = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// rawReleaseSHA is the script's SHA1, as SCRIPT LOAD answers and EVALSHA
// takes.
var rawReleaseSHA = func() string {
	sum := sha1.Sum([]byte(rawReleaseScript))
	return hex.EncodeToString(sum[:])
}()

// rawRedisClient is one connection pool to one Redis server.
func rawRedisClient(t *rawTarget, host string) *goredis.Client {
	db, _ := t.redisDB() // checked by rawParseURL
	return goredis.NewClient(&goredis.Options{
		Addr: host, Username: t.user, Password: t.password, DB: db,
		// Let the caller's context bound every command, as a lock call's
		// deadline should.
		ContextTimeoutEnabled: true,
	})
}

type rawRedis struct {
	rdb *goredis.Client
	ns  string
}

// rawOpenRedis connects and loads the release script, which also tells
// an unreachable server or a wrong password at Open.
func rawOpenRedis(ctx context.Context, t *rawTarget) (Client, error) {
	rdb := rawRedisClient(t, t.hosts[0])
	if err := rdb.ScriptLoad(ctx, rawReleaseScript).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("bench: redis raw: %s: %w", t.hosts[0], err)
	}
	return &rawRedis{rdb: rdb, ns: rawNamespace("raw")}, nil
}

func (c *rawRedis) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	if err := rawCheckTTL(ttl); err != nil {
		return nil, err
	}
	key, token := c.ns+key, rawToken()
	ok, err := c.rdb.SetNX(ctx, key, token, ttl).Result()
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, ErrBusy
	}
	return func(ctx context.Context) error { return rawRedisRelease(ctx, c.rdb, key, token) }, nil
}

func (c *rawRedis) Close() error { return c.rdb.Close() }

// rawRedisRelease runs the compare-and-delete script by its SHA. A server
// that lost its script cache (restarted, or SCRIPT FLUSH) answers
// NOSCRIPT; EVAL then sends the script and caches it again.
func rawRedisRelease(ctx context.Context, rdb *goredis.Client, key, token string) error {
	n, err := rdb.EvalSha(ctx, rawReleaseSHA, []string{key}, token).Int()
	if goredis.HasErrorPrefix(err, "NOSCRIPT") {
		n, err = rdb.Eval(ctx, rawReleaseScript, []string{key}, token).Int()
	}
	switch {
	case err != nil:
		return err
	case n == 0:
		return rawErrNotHeld
	}
	return nil
}

// ---------------------------------------------------------------------------
// Redlock: the same SET and release, sent to N independent masters at
// once, taken on a majority. No validity or clock-drift arithmetic and no
// per-node timeout: that is the library's work, and this is the floor.

type rawRedlock struct {
	nodes []*goredis.Client
	ns    string
}

// rawOpenRedlock connects to every node and loads the release script
// where it can. A node that is down is tolerated as Redlock tolerates it,
// while a majority answers; the script reaches it later through EVAL.
func rawOpenRedlock(ctx context.Context, t *rawTarget) (Client, error) {
	c := &rawRedlock{ns: rawNamespace("raw")}
	for _, h := range t.hosts {
		c.nodes = append(c.nodes, rawRedisClient(t, h))
	}
	errs := c.fanOut(func(i int, rdb *goredis.Client) error {
		if err := rdb.ScriptLoad(ctx, rawReleaseScript).Err(); err != nil {
			return fmt.Errorf("%s: %w", t.hosts[i], err)
		}
		return nil
	})
	if failed := rawCount(errs); len(c.nodes)-failed < c.quorum() {
		c.Close()
		return nil, fmt.Errorf("bench: redlock raw: %d of %d nodes failed, fewer than a majority answer: %w",
			failed, len(c.nodes), errors.Join(errs...))
	}
	return c, nil
}

func (c *rawRedlock) quorum() int { return len(c.nodes)/2 + 1 }

// fanOut runs fn on every node at once, one goroutine each as a Redlock
// round does, and returns each node's error once all have answered.
func (c *rawRedlock) fanOut(fn func(i int, rdb *goredis.Client) error) []error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, rdb := range c.nodes {
		wg.Go(func() { errs[i] = fn(i, rdb) })
	}
	wg.Wait()
	return errs
}

func rawCount(errs []error) (n int) {
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// Lock takes key on a majority. When it falls short it releases whatever
// it took, and answers ErrBusy if held nodes made it fall short, or the
// nodes' errors if failing nodes alone did (the key may well be free).
func (c *rawRedlock) Lock(ctx context.Context, key string, ttl time.Duration) (Unlock, error) {
	if err := rawCheckTTL(ttl); err != nil {
		return nil, err
	}
	key, token := c.ns+key, rawToken()
	errs := c.fanOut(func(_ int, rdb *goredis.Client) error {
		ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
		if err == nil && !ok {
			return ErrBusy
		}
		return err
	})
	failed, busy := rawCount(errs), 0
	for _, err := range errs {
		if errors.Is(err, ErrBusy) {
			busy++
		}
	}
	unlock := func(ctx context.Context) error { return c.release(ctx, key, token) }
	if len(c.nodes)-failed >= c.quorum() {
		return unlock, nil
	}
	cctx, cancel := rawDetached(ctx)
	defer cancel()
	_ = unlock(cctx) // best effort: what it misses expires with the TTL
	if len(c.nodes)-busy >= c.quorum() {
		return nil, fmt.Errorf("bench: redlock raw: no majority: %w", errors.Join(errs...))
	}
	return nil, ErrBusy
}

// release compare-and-deletes on every node at once. It succeeds if a
// majority still held our token: the lock was ours until then.
func (c *rawRedlock) release(ctx context.Context, key, token string) error {
	errs := c.fanOut(func(_ int, rdb *goredis.Client) error {
		return rawRedisRelease(ctx, rdb, key, token)
	})
	if len(c.nodes)-rawCount(errs) >= c.quorum() {
		return nil
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, rawErrNotHeld) {
			return fmt.Errorf("bench: redlock raw: release: %w", errors.Join(errs...))
		}
	}
	return rawErrNotHeld
}

func (c *rawRedlock) Close() error {
	var errs []error
	for _, rdb := range c.nodes {
		errs = append(errs, rdb.Close())
	}
	return errors.Join(errs...)
}

// ---------------------------------------------------------------------------
// etcd: one lease per client; a lock is a key created under it by a
// transaction that succeeds only if the key does not exist.

// rawEtcdLeaseTTL is the lease's TTL in seconds. etcd TTLs are whole
// seconds and a lease is shared by every lock of a client, so the ttl
// passed to Lock is ignored: a crashed client's locks go when its lease
// runs out, 30 s later (etcd concurrency's default is 60 s).
const rawEtcdLeaseTTL = 30

// rawEtcdClient connects to the endpoints and makes one call bounded by
// ctx, since clientv3.New does not wait for a connection: an unreachable
// cluster fails Open, not the first Lock.
func rawEtcdClient(ctx context.Context, t *rawTarget) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: t.hosts, Username: t.user, Password: t.password,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(), // its logs are the client's business, not the report's
	})
	if err != nil {
		return nil, fmt.Errorf("bench: etcd: %w", err)
	}
	if _, err := cli.Get(ctx, "lockctl-bench/", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("bench: etcd: %s: %w", strings.Join(t.hosts, ","), err)
	}
	return cli, nil
}

// rawEtcdPrefix is where a design's keys live: under the URL's path, as
// the library reads it, then the design's namespace.
func rawEtcdPrefix(t *rawTarget, design string) string {
	if t.path == "" {
		return rawNamespace(design)
	}
	return t.path + "/" + rawNamespace(design)
}

type rawEtcd struct {
	cli     *clientv3.Client
	lease   clientv3.LeaseID
	stop    context.CancelFunc // ends the lease's keep-alive
	drained chan struct{}      // closed when the keep-alive channel is
	ns      string
}

func rawOpenEtcd(ctx context.Context, t *rawTarget) (Client, error) {
	cli, err := rawEtcdClient(ctx, t)
	if err != nil {
		return nil, err
	}
	grant, err := cli.Grant(ctx, rawEtcdLeaseTTL)
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("bench: etcd raw: grant a lease: %w", err)
	}
	// The keep-alive lives as long as the client, not as long as Open's ctx.
	kctx, stop := context.WithCancel(context.Background())
	ch, err := cli.KeepAlive(kctx, grant.ID)
	if err != nil {
		stop()
		cli.Close()
		return nil, fmt.Errorf("bench: etcd raw: keep the lease alive: %w", err)
	}
	c := &rawEtcd{cli: cli, lease: grant.ID, stop: stop, drained: make(chan struct{}), ns: rawEtcdPrefix(t, "raw")}
	// The responses must be read, or clientv3 drops them with a warning
	// every round; there is nothing in them the bench needs.
	go func() {
		defer close(c.drained)
		for range ch {
		}
	}()
	return c, nil
}

func (c *rawEtcd) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	key = c.ns + key
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, "", clientv3.WithLease(c.lease))).
		Commit()
	switch {
	case err != nil:
		return nil, err
	case !resp.Succeeded:
		return nil, ErrBusy
	}
	// The put's revision is the key's create revision: our lock's identity.
	rev := resp.Header.Revision
	return func(ctx context.Context) error { return c.release(ctx, key, rev) }, nil
}

// release deletes the key only if it is still the one we created. A bare
// Delete costs the same round trip but would remove the next holder's
// key after our lease had run out; the safe release is what a lock needs.
func (c *rawEtcd) release(ctx context.Context, key string, rev int64) error {
	resp, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	switch {
	case err != nil:
		return err
	case !resp.Succeeded:
		return rawErrNotHeld
	}
	return nil
}

// Close revokes the lease, so that the client's locks go now rather than
// when the lease would run out, as a process that exits cleanly does.
func (c *rawEtcd) Close() error {
	c.stop()
	<-c.drained
	return rawEtcdClose(c.cli, c.lease)
}

// rawEtcdClose revokes lease (bounded, as an unreachable cluster must not
// hang Close; the lease then runs out on its own) and closes cli.
func rawEtcdClose(cli *clientv3.Client, lease clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cli.Revoke(ctx, lease)
	if err != nil {
		err = fmt.Errorf("bench: etcd: revoke the lease: %w", err)
	}
	return errors.Join(err, cli.Close())
}

// ---------------------------------------------------------------------------
// ZooKeeper: the queue lock's uncontended path. Each key is a node; a
// lock is an ephemeral sequential child of it, held if it is the lowest.

const (
	// rawZKSessionTimeout is the session timeout asked for: a crashed
	// client's nodes go when its session expires. Ephemeral nodes live as
	// long as the session, so the ttl passed to Lock is ignored.
	rawZKSessionTimeout = 10 * time.Second
	// rawZKConnectWait bounds the wait for a session at Open when ctx
	// has no deadline: go-zookeeper retries an unreachable server forever.
	rawZKConnectWait = 10 * time.Second
)

// rawZKACL opens the bench's nodes to everyone: they guard nothing but
// the bench's own keys.
var rawZKACL = zk.WorldACL(zk.PermAll)

// rawZKQuiet drops go-zookeeper's logs, which would otherwise go to the
// standard logger and into the middle of the terminal report.
type rawZKQuiet struct{}

func (rawZKQuiet) Printf(string, ...any) {}

// rawZKConnect opens a session and waits until the server grants it, so
// that an unreachable ensemble fails Open, not the first Lock.
func rawZKConnect(ctx context.Context, t *rawTarget) (*zk.Conn, error) {
	conn, _, err := rawZKSession(ctx, t, rawZKSessionTimeout)
	return conn, err
}

// rawZKSession opens a session with the given timeout as rawZKConnect
// does, and returns the connection's later events too.
func rawZKSession(ctx context.Context, t *rawTarget, timeout time.Duration) (*zk.Conn, <-chan zk.Event, error) {
	conn, events, err := zk.Connect(t.hosts, timeout, zk.WithLogger(rawZKQuiet{}))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: zookeeper: %w", err)
	}
	if err := rawZKWaitSession(ctx, events); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("bench: zookeeper: %s: %w", strings.Join(t.hosts, ","), err)
	}
	if t.user != "" {
		if err := conn.AddAuth("digest", []byte(t.user+":"+t.password)); err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("bench: zookeeper: digest credentials: %w", err)
		}
	}
	return conn, events, nil
}

// rawZKWaitSession reads the connection's events until the session is
// up. Later events are not read: go-zookeeper drops them when its small
// buffer is full, which is harmless.
func rawZKWaitSession(ctx context.Context, events <-chan zk.Event) error {
	ctx, cancel := context.WithTimeout(ctx, rawZKConnectWait)
	defer cancel()
	for {
		select {
		case ev, ok := <-events:
			switch {
			case !ok:
				return errors.New("connection closed before a session was granted")
			case ev.State == zk.StateHasSession:
				return nil
			case ev.State == zk.StateAuthFailed, ev.State == zk.StateExpired:
				return fmt.Errorf("no session: %v", ev.State)
			}
		case <-ctx.Done():
			return fmt.Errorf("no session granted: %w", ctx.Err())
		}
	}
}

// rawZKRoot is the node under which a design's keys live: the URL's
// path, then the design's namespace.
func rawZKRoot(t *rawTarget, design string) string {
	root := "/" + strings.TrimSuffix(rawNamespace(design), "/")
	if t.path != "" {
		root = "/" + t.path + root
	}
	return root
}

// rawZKName is key's node name: "k-" then the key with every byte but
// letters, digits and a few marks escaped, so that any key is one valid
// node name (no "/", never "." or "..", none ZooKeeper refuses).
func rawZKName(key string) string { return "k-" + url.PathEscape(key) }

// rawZKMkdirAll creates p and its parents as persistent nodes, as needed.
func rawZKMkdirAll(conn *zk.Conn, p string) error {
	at := ""
	for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		at += "/" + name
		if _, err := conn.Create(at, nil, 0, rawZKACL); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("bench: zookeeper: create %s: %w", at, err)
		}
	}
	return nil
}

type rawZK struct {
	conn *zk.Conn
	root string
	dirs sync.Map // key nodes known to exist: created once, not per Lock
}

func rawOpenZK(ctx context.Context, t *rawTarget) (Client, error) {
	conn, err := rawZKConnect(ctx, t)
	if err != nil {
		return nil, err
	}
	c := &rawZK{conn: conn, root: rawZKRoot(t, "raw")}
	if err := rawZKMkdirAll(conn, c.root); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// Lock joins key's queue and looks at it once: held if ours is the
// lowest; otherwise it leaves the queue and the key is busy. go-zookeeper
// takes no context: ctx is looked at before the first call only.
func (c *rawZK) Lock(ctx context.Context, key string, _ time.Duration) (Unlock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir := c.root + "/" + rawZKName(key)
	node, err := c.join(dir)
	if err != nil {
		return nil, err
	}
	children, _, err := c.conn.Children(dir)
	if err == nil && !rawZKLowest(path.Base(node), children) {
		err = ErrBusy
	}
	if err != nil {
		_ = c.conn.Delete(node, -1) // and if it fails, the node goes with the session
		return nil, err
	}
	return func(context.Context) error { return rawZKDelete(c.conn, node) }, nil
}

// join creates our ephemeral sequential node in dir, creating dir the
// first time. dir is a container node, which the server deletes some
// time after its last child went: then it is created again.
func (c *rawZK) join(dir string) (string, error) {
	for again := false; ; again = true {
		if err := c.mkdir(dir); err != nil {
			return "", err
		}
		node, err := c.conn.Create(dir+"/lock-", nil, zk.FlagEphemeralSequential, rawZKACL)
		if errors.Is(err, zk.ErrNoNode) && !again {
			c.dirs.Delete(dir)
			continue
		}
		return node, err
	}
}

func (c *rawZK) mkdir(dir string) error {
	if _, ok := c.dirs.Load(dir); ok {
		return nil
	}
	_, err := c.conn.CreateContainer(dir, nil, zk.FlagContainer, rawZKACL)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("bench: zookeeper: create %s: %w", dir, err)
	}
	c.dirs.Store(dir, true)
	return nil
}

// rawZKLowest tells whether node has the lowest sequence number among
// children (ZooKeeper lists them in no particular order).
func rawZKLowest(node string, children []string) bool {
	mine := rawZKSeq(node)
	for _, ch := range children {
		if s := rawZKSeq(ch); s >= 0 && s < mine {
			return false
		}
	}
	return true
}

// rawZKSeq is the sequence number ZooKeeper appended to name: its last
// ten digits; -1 if there are none.
func rawZKSeq(name string) int64 {
	if len(name) < 10 {
		return -1
	}
	n, err := strconv.ParseInt(name[len(name)-10:], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// rawZKDelete deletes our node. Any version: the node is ours alone, so
// deleting it cannot touch another holder; ErrNoNode means the session
// that owned it expired, and the lock with it.
func rawZKDelete(conn *zk.Conn, node string) error {
	err := conn.Delete(node, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return rawErrNotHeld
	}
	return err
}

func (c *rawZK) Close() error {
	c.conn.Close()
	return nil
}
