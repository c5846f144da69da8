package redisconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
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
	TLS                bool // verify the server's name, that of each host
	// Timeout is the socket read and write timeout; 0 keeps the
	// library's default.
	Timeout time.Duration
}

// Dial returns an owned client for one server, or for a Redis Cluster
// when hosts has more than one entry (go-redis only). go-redis clients are
// built with ContextTimeoutEnabled, so that context deadlines bound every
// call. Nothing is sent to the server yet.
func Dial(hosts []string, o ClientOptions) (Conn, error) {
	var tlsConf *tls.Config
	if o.TLS {
		host, _, _ := strings.Cut(hosts[0], ":")
		tlsConf = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	switch o.Client {
	case "", "goredis":
		if len(hosts) > 1 {
			return NewGoRedis(goredis.NewClusterClient(&goredis.ClusterOptions{
				Addrs: hosts, Username: o.Username, Password: o.Password, TLSConfig: tlsConf,
				ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, ContextTimeoutEnabled: true,
			}), true), nil
		}
		return NewGoRedis(goredis.NewClient(&goredis.Options{
			Addr: hosts[0], Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: tlsConf,
			ReadTimeout: o.Timeout, WriteTimeout: o.Timeout, ContextTimeoutEnabled: true,
		}), true), nil
	case "redigo":
		if len(hosts) > 1 {
			return nil, fmt.Errorf("client=redigo does not support Redis Cluster (%d hosts given); use the default go-redis client", len(hosts))
		}
		dialOpts := []redigo.DialOption{redigo.DialDatabase(o.DB), redigo.DialUsername(o.Username), redigo.DialPassword(o.Password)}
		if o.Timeout > 0 {
			dialOpts = append(dialOpts, redigo.DialReadTimeout(o.Timeout), redigo.DialWriteTimeout(o.Timeout))
		}
		if tlsConf != nil {
			dialOpts = append(dialOpts, redigo.DialUseTLS(true), redigo.DialTLSConfig(tlsConf))
		}
		addr := hosts[0]
		return NewRedigo(&redigo.Pool{
			MaxIdle:     16,
			IdleTimeout: 5 * time.Minute,
			DialContext: func(ctx context.Context) (redigo.Conn, error) {
				return redigo.DialContext(ctx, "tcp", addr, dialOpts...)
			},
		}, true), nil
	}
	return nil, fmt.Errorf("unknown client %q: want goredis or redigo", o.Client)
}
