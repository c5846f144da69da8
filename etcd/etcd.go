package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/locker"
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
	log := o.Config.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	minTTL, err := probeMinTTL(ctx, c)
	if err != nil {
		return nil, err
	}
	return locker.New(newDriver(c, owned, ns, minTTL, log), &o.Config), nil
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
//	etcd://[user:password@]host:port[,host:port...][/namespace][?dial_timeout=5s]
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
	hosts := u.Hosts()
	if len(hosts) == 0 {
		return nil, errors.New("etcd: URL has no host: want etcd://host:port[,host:port...]/namespace")
	}
	for _, h := range hosts {
		if _, port, err := net.SplitHostPort(h); err != nil || port == "" {
			return nil, fmt.Errorf("etcd: host %q has no port: want host:port", h)
		}
	}
	var tlsConf *tls.Config
	if u.Scheme == "etcds" {
		if tlsConf, err = tlsConfig(caFile, certFile, keyFile); err != nil {
			return nil, err
		}
	} else if caFile != "" || certFile != "" || keyFile != "" {
		return nil, errors.New("etcd: parameters cacert, cert and key need the etcds:// scheme")
	}
	cfg := clientv3.Config{
		Endpoints:            hosts,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		TLS:                  tlsConf,
		Logger:               zap.NewNop(),
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

func tlsConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("etcd: cacert: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("etcd: cacert %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("etcd: parameters cert and key go together: give both or neither")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("etcd: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
