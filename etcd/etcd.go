package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/openhook"
	"github.com/distlock/locker/internal/tlsfiles"
)

func init() {
	locker.Register("etcd", open)
	locker.Register("etcds", open)
}

// DefaultNamespace is the key prefix under which lock queues live unless
// Options.Namespace or the URL's path says otherwise.
const DefaultNamespace = "locker"

// Options configures New. The zero value is usable.
type Options struct {
	// Config is passed to locker.New.
	Config locker.Config
	// Namespace is the etcd key prefix of every lock queue: lock K is
	// queued under Namespace/<K escaped>/. Lockers that share locks must
	// use the same namespace; namespaces of unrelated applications must
	// not nest (app and app/x would interfere). Default: DefaultNamespace.
	Namespace string
}

// openTimeout bounds the checks New makes against the server.
const openTimeout = 5 * time.Second

// New returns a Locker over an etcd client. The Locker does not close c.
//
// New asks the server for a one-second lease (and revokes it) to learn the
// smallest lease TTL the server grants, which becomes the Locker's MinTTL;
// it fails if the server cannot be reached within 5 seconds.
func New(c *clientv3.Client, opts *Options) (locker.Locker, error) {
	switch {
	case c == nil:
		return nil, errors.New("etcd: New: the client is nil")
	case c.KV == nil || c.Lease == nil || c.Watcher == nil:
		// A Client literal rather than one from clientv3.New: its calls
		// would dereference nil interfaces.
		return nil, errors.New("etcd: New: the client has no KV, Lease or Watcher; make it with clientv3.New")
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	return newLocker(ctx, c, false, opts)
}

func newLocker(ctx context.Context, c *clientv3.Client, owned bool, opts *Options) (locker.Locker, error) {
	if c == nil {
		return nil, errors.New("etcd: nil client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	ns := strings.TrimRight(o.Namespace, "/")
	if ns == "" {
		ns = DefaultNamespace
	}
	log := o.Config.ResolvedLogger()
	minTTL, err := probeMinTTL(ctx, c)
	if err != nil {
		return nil, err
	}
	d := newDriver(c, owned, ns, minTTL, log)
	if err := locker.CheckConfig(d, &o.Config); err != nil {
		d.Close()
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return locker.New(d, &o.Config), nil
}

// probeMinTTL grants a one-second lease: the server raises a TTL below its
// minimum (one and a half election timeouts, rounded up to whole seconds),
// and says so in its reply.
func probeMinTTL(ctx context.Context, c *clientv3.Client) (time.Duration, error) {
	resp, err := c.Grant(ctx, 1)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("etcd: server unreachable at %s: no answer within %v", strings.Join(c.Endpoints(), ","), openTimeout)
		}
		return 0, fmt.Errorf("etcd: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	c.Revoke(rctx, resp.ID) // if this fails, the lease expires in a second or two
	cancel()
	return time.Duration(max(resp.TTL, 1)) * time.Second, nil
}

// Defaults of the URL opener.
const defaultDialTimeout = 5 * time.Second

// open handles etcd:// and etcds:// URLs:
//
//	etcd://[user:password@]host[:port][,host[:port]...][/namespace][?dial_timeout=5s]
//	etcds://...[?cacert=ca.pem][&cert=client.pem&key=client-key.pem]
func open(ctx context.Context, u *locker.URL) (locker.Locker, error) {
	dialTimeout, err := u.DurationParam("dial_timeout", defaultDialTimeout)
	if err != nil {
		return nil, err
	}
	if dialTimeout <= 0 {
		return nil, fmt.Errorf("invalid query parameter dial_timeout=%v: must be positive", dialTimeout)
	}
	caFile, _ := u.Param("cacert")
	certFile, _ := u.Param("cert")
	keyFile, _ := u.Param("key")
	if err := u.CheckParams(); err != nil {
		return nil, err
	}
	hosts, err := u.HostPorts("2379")
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	var tlsConf *tls.Config
	if u.Scheme == "etcds" {
		if tlsConf, err = tlsConfig(caFile, certFile, keyFile); err != nil {
			return nil, err
		}
	} else if caFile != "" || certFile != "" || keyFile != "" {
		return nil, errors.New("etcd: parameters cacert, cert and key need the etcds:// scheme")
	}
	dial, grpcOpts := dialer(ctx)
	if tlsConf != nil {
		if err := checkTLS(ctx, dial, hosts, tlsConf, dialTimeout); err != nil {
			return nil, err
		}
	}
	cfg := clientv3.Config{
		Endpoints:            hosts,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tlsConf,
		Logger:               zap.NewNop(),
		DialOptions:          grpcOpts,
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %s: %w", u.Host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	l, err := newLocker(ctx, cli, true, &Options{Config: u.Config, Namespace: strings.Trim(u.Path, "/")})
	if err != nil {
		cli.Close()
		return nil, err
	}
	return l, nil
}

// dialer returns how the Locker being opened dials: through the hook of
// conformance.URLHarness, which routes every connection through its
// proxies, when ctx carries one (with the gRPC option that makes the
// client use it); otherwise as gRPC does by default.
func dialer(ctx context.Context) (openhook.DialFunc, []grpc.DialOption) {
	dial := openhook.Dial(ctx)
	if dial == nil {
		var d net.Dialer
		return d.DialContext, nil
	}
	return dial, []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return dial(ctx, "tcp", addr)
	})}
}

func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	c, err := tlsfiles.Config(caFile, certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	return c, nil
}

// checkTLS completes a TLS handshake with the first of hosts that accepts
// a connection, so that an etcds:// URL naming a server without TLS, or
// with a certificate the CA does not vouch for, fails at Open with what is
// wrong rather than with "unreachable" once the dial timeout has passed
// (gRPC retries a failed handshake like a refused connection). Hosts that
// refuse connections are left to the client, which reports them.
func checkTLS(ctx context.Context, dial openhook.DialFunc, hosts []string, conf *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var first error
	for _, h := range hosts {
		raw, err := dial(ctx, "tcp", h)
		if err != nil {
			continue
		}
		c := conf.Clone()
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(h)
		}
		tc := tls.Client(raw, c)
		err = tc.HandshakeContext(ctx)
		tc.Close()
		if err == nil {
			return nil
		}
		var rh tls.RecordHeaderError
		if (errors.Is(err, io.EOF) || errors.As(err, &rh)) && speaksHTTP(ctx, dial, h) {
			err = fmt.Errorf("etcd: %s answers in plain text, not TLS (use etcd:// for a server without TLS)", h)
		} else {
			err = fmt.Errorf("etcd: TLS handshake with %s failed: %w", h, err)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// speaksHTTP reports whether host, reached with dial, answers an HTTP
// request sent in plain text, as an etcd server without TLS does.
func speaksHTTP(ctx context.Context, dial openhook.DialFunc, host string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", host)
	if err != nil {
		return false
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "GET /version HTTP/1.0\r\n\r\n"); err != nil {
		return false
	}
	buf := make([]byte, 5)
	_, err = io.ReadFull(c, buf)
	return err == nil && string(buf) == "HTTP/"
}
