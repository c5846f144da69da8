package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
)

// ClientOptions describes a client that Dial builds from a URL.
type ClientOptions struct {
	// Client is the library: "goredis" (or "", the default) or "redigo".
	Client             string
	Username, Password string
	DB                 int
	// TLS asks for TLS with the system's roots, verifying each server's
	// name; TLSConfig, when set, is the configuration to use instead (the
	// cacert, cert and key parameters, see TLSFromURL).
	TLS       bool
	TLSConfig *tls.Config
	// Timeout is the socket read and write timeout; 0 keeps the
	// library's default.
	Timeout time.Duration
	// Sentinel, when set, makes the hosts Redis Sentinels that Dial asks
	// for the address of this master's name (go-redis only).
	Sentinel *SentinelOptions
	// Cluster makes a single host the seed of a Redis Cluster client
	// (go-redis only); several hosts always are.
	Cluster bool
	// Dial, when set, makes every TCP connection of the client, to the
	// address the client would have dialled; TLS, when on, runs over the
	// connection it returns and verifies the name in that address. Nil:
	// the client library's own dialer. (conformance.URLHarness sets it,
	// through package openhook, to reach each server through a proxy.)
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// FailFast makes a go-redis client dial once per connection and send
	// each command once. By default go-redis dials up to 5 times, 100 ms
	// apart, and sends a command up to 4 times: a server that refuses
	// connections then costs every call its whole deadline, and a
	// retried SET NX whose first attempt landed reads as another
	// holder's lock. (A redigo pool dials once and sends once already.)
	FailFast bool
}

// SentinelOptions names the master that the Sentinels watch, and how
// to authenticate to the Sentinels themselves.
type SentinelOptions struct {
	Master             string
	Username, Password string
}

// tlsConfig returns the TLS configuration of o, or nil for plain text.
func (o ClientOptions) tlsConfig() *tls.Config {
	switch {
	case o.TLSConfig != nil:
		return o.TLSConfig
	case o.TLS:
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return nil
}

// dialer returns the dial function of o's connections: DialTLS with its
// TLS configuration over o.Dial, or o.Dial for plain text (nil: the client
// library's own).
func (o ClientOptions) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	conf := o.tlsConfig()
	if conf == nil {
		return o.Dial
	}
	raw := o.Dial
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return DialTLS(ctx, raw, network, addr, conf)
	}
}

// Dial returns an owned client for one server, for a Redis Cluster when
// hosts has more than one entry or o.Cluster is set, or for the master
// that Sentinels name when o.Sentinel is set (go-redis only for both).
// go-redis clients are built with ContextTimeoutEnabled, so that context
// deadlines bound every call. Nothing is sent to the server yet.
func Dial(hosts []string, o ClientOptions) (Conn, error) {
	dialer := o.dialer()
	if err := o.check(hosts); err != nil {
		return nil, err
	}
	switch o.Client {
	case "", "goredis":
		g := newDialGate(dialer)
		dialerRetries, maxRetries := 0, 0 // go-redis's defaults
		if o.FailFast {
			dialerRetries, maxRetries = 1, -1
		}
		var c goredis.UniversalClient
		switch {
		case o.Sentinel != nil:
			c = goredis.NewFailoverClient(&goredis.FailoverOptions{
				MasterName: o.Sentinel.Master, SentinelAddrs: hosts,
				SentinelUsername: o.Sentinel.Username, SentinelPassword: o.Sentinel.Password,
				Username: o.Username, Password: o.Password, DB: o.DB,
				Dialer: g.dial, DialerRetryBackoff: g.backoff, DialerRetries: dialerRetries, MaxRetries: maxRetries,
				ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, ContextTimeoutEnabled: true,
			})
		case len(hosts) > 1 || o.Cluster:
			c = goredis.NewClusterClient(&goredis.ClusterOptions{
				Addrs: hosts, Username: o.Username, Password: o.Password,
				Dialer: g.dial, DialerRetryBackoff: g.backoff, DialerRetries: dialerRetries, MaxRetries: maxRetries,
				ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, ContextTimeoutEnabled: true,
			})
		default:
			c = goredis.NewClient(&goredis.Options{
				Addr: hosts[0], Username: o.Username, Password: o.Password, DB: o.DB,
				Dialer: g.dial, DialerRetryBackoff: g.backoff, DialerRetries: dialerRetries, MaxRetries: maxRetries,
				ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, ContextTimeoutEnabled: true,
			})
		}
		return guardGoRedis(&goredisConn{c: c, owned: true, gate: g}, c), nil
	}
	dialOpts := append(o.redigoOptions(dialer), redigo.DialDatabase(o.DB))
	addr := hosts[0]
	return NewRedigo(&redigo.Pool{
		MaxIdle:     16,
		IdleTimeout: 5 * time.Minute,
		DialContext: func(ctx context.Context) (redigo.Conn, error) {
			return redigo.DialContext(ctx, "tcp", addr, dialOpts...)
		},
	}, true), nil
}

// check reports what the client library cannot do.
func (o ClientOptions) check(hosts []string) error {
	switch o.Client {
	case "", "goredis":
		return nil
	case "redigo":
		switch {
		case o.Sentinel != nil:
			return fmt.Errorf("client=redigo does not support Redis Sentinel (redigo has no sentinel client); use the default go-redis client")
		case len(hosts) > 1:
			return fmt.Errorf("client=redigo does not support Redis Cluster (%d hosts given); use the default go-redis client", len(hosts))
		case o.Cluster:
			return fmt.Errorf("client=redigo does not support Redis Cluster (%s is a Cluster node, and redigo has no cluster client); use the default go-redis client", hosts[0])
		}
		return nil
	}
	return fmt.Errorf("unknown client %q: want goredis or redigo", o.Client)
}

// dialGate stands between a go-redis client that Dial built and the
// network. go-redis dials in goroutines of its own, which outlive the
// call that wanted the connection and even the client's Close: a dial in
// flight at Close goes on retrying (5 attempts, 100 ms apart), connects
// to the server afterwards or logs "failed to dial" through go-redis's
// process-wide logger. Once closed, the gate cancels the dials in flight,
// refuses new ones without touching the network, and lets the remaining
// retries run without delay, so that go-redis gives up at once.
type dialGate struct {
	next   func(ctx context.Context, network, addr string) (net.Conn, error)
	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // dials in flight
}

func newDialGate(next func(ctx context.Context, network, addr string) (net.Conn, error)) *dialGate {
	if next == nil {
		var d net.Dialer
		next = d.DialContext
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &dialGate{next: next, ctx: ctx, cancel: cancel}
}

// errClientClosed is what a dial after Close gets.
var errClientClosed = errors.New("redis: client closed by its Locker")

func (g *dialGate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, errClientClosed
	}
	g.wg.Add(1)
	g.mu.Unlock()
	defer g.wg.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(g.ctx, cancel)()
	c, err := g.next(ctx, network, addr)
	if err != nil && g.ctx.Err() != nil {
		return nil, errClientClosed
	}
	return c, err
}

// backoff is go-redis's default pause between dial attempts, none once
// the gate is closed.
func (g *dialGate) backoff(int) time.Duration {
	if g.ctx.Err() != nil {
		return 0
	}
	return 100 * time.Millisecond
}

// close stops every dial and waits for those in flight to return.
func (g *dialGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// redigoOptions are the dial options of o but the database.
func (o ClientOptions) redigoOptions(dialer func(ctx context.Context, network, addr string) (net.Conn, error)) []redigo.DialOption {
	opts := []redigo.DialOption{redigo.DialUsername(o.Username), redigo.DialPassword(o.Password)}
	if o.Timeout > 0 {
		opts = append(opts, redigo.DialReadTimeout(o.Timeout), redigo.DialWriteTimeout(o.Timeout))
	}
	if dialer != nil {
		opts = append(opts, redigo.DialContextFunc(dialer))
	}
	return opts
}

// plainHint is how long DialTLS waits for the server's first handshake
// message before it asks the server, on a connection of its own, whether
// it speaks plain text.
var plainHint = 250 * time.Millisecond

// DialTLS connects to addr with dial (nil: a net.Dialer) and completes a
// TLS handshake, verifying the server's name (the host of addr unless conf
// names another). A
// plain-text Redis server never answers a TLS hello: it waits for a line
// that the hello does not end. So when the handshake has not completed
// within plainHint, DialTLS sends a PING in the clear on another
// connection (no credentials, nothing else), and a Redis reply there fails
// the handshake at once with an error that says so, instead of a timeout.
func DialTLS(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), network, addr string, conf *tls.Config) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	conf = conf.Clone()
	if conf.ServerName == "" {
		conf.ServerName, _, _ = net.SplitHostPort(addr)
	}
	// A server that asks for a client certificate and gets none may
	// accept the handshake and only then close the connection (TLS 1.3):
	// the error of the first read or write then says why.
	var noCert bool
	if len(conf.Certificates) == 0 && conf.GetClientCertificate == nil {
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			noCert = true
			return &tls.Certificate{}, nil
		}
	}
	tc := tls.Client(raw, conf)
	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hint := time.AfterFunc(plainHint, func() {
		if speaksPlainText(hctx, dial, network, addr) {
			cancel(errPlainText)
		}
	})
	defer hint.Stop()
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		if cause := context.Cause(hctx); cause == errPlainText {
			err = cause
		}
		return nil, fmt.Errorf("TLS handshake with %s failed: %w", addr, err)
	}
	if noCert {
		return noCertConn{tc, addr}, nil
	}
	return tc, nil
}

// noCertConn is a TLS connection to a server that asked for a client
// certificate and got none.
type noCertConn struct {
	*tls.Conn
	addr string
}

func (c noCertConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, c.explain(err)
}

func (c noCertConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, c.explain(err)
}

// explain adds the likely cause to an error that ends the connection;
// timeouts are left alone, as clients test them with type assertions.
func (c noCertConn) explain(err error) error {
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w (the server at %s asked for a client certificate and none was given: set the cert and key parameters)", err, c.addr)
}

// tlsMisconfigured reports whether err is a TLS handshake that failed for
// a reason that waiting will not cure: the server speaks plain text, its
// certificate is not one the CA vouches for, or it refused ours.
func tlsMisconfigured(err error) bool {
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var header tls.RecordHeaderError
	return errors.Is(err, errPlainText) || errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &header)
}

var errPlainText = fmt.Errorf("the server answers in plain text, not TLS (use redis:// for a server without TLS)")

// speaksPlainText reports whether the server at addr, reached with dial,
// answers a PING sent in the clear with a Redis reply (+PONG, or an error
// such as NOAUTH).
func speaksPlainText(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), network, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := dial(ctx, network, addr)
	if err != nil {
		return false
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}
