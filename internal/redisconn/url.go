package redisconn

import (
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/tlsfiles"
)

// FromURL reads a URL of independent Redis servers (redlock://, and
// redlocks:// with useTLS): the hosts (host[:port]), the database in the
// path, user and password, the client and timeout parameters, and, with
// TLS, cacert, cert and key (TLSFromURL). Errors name the problem without
// a package prefix; the caller adds it.
func FromURL(u *locker.URL, useTLS bool) ([]string, ClientOptions, error) {
	hosts, o, err := fromURL(u)
	if err != nil {
		return nil, o, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if o.DB, err = parseDB(p); err != nil {
			return nil, o, err
		}
	}
	if o.TLSConfig, err = TLSFromURL(u, useTLS); err != nil {
		return nil, o, err
	}
	o.TLS = useTLS
	return hosts, o, nil
}

// The ports a host without one gets: Redis's and Sentinel's own.
const (
	DefaultPort         = "6379"
	DefaultSentinelPort = "26379"
)

func fromURL(u *locker.URL) ([]string, ClientOptions, error) {
	var o ClientOptions
	o.Client, _ = u.Param("client")
	timeout, err := u.DurationParam("timeout", 0)
	if err != nil {
		return nil, o, err
	}
	o.Timeout = timeout
	port := DefaultPort
	if strings.HasSuffix(u.Scheme, "+sentinel") {
		port = DefaultSentinelPort
	}
	hosts, err := u.HostPorts(port)
	if err != nil {
		return nil, o, err
	}
	o.Username = u.User.Username()
	o.Password, _ = u.User.Password()
	return hosts, o, nil
}

func parseDB(p string) (int, error) {
	db, err := strconv.Atoi(p)
	if err != nil || db < 0 {
		return 0, fmt.Errorf("path %q is not a database number", "/"+p)
	}
	return db, nil
}

// FromRedisURL reads a URL of the redis backend: redis://, rediss:// (TLS),
// redis+sentinel:// and rediss+sentinel://, whose path is the master's name
// and then, optionally, the database: redis+sentinel://h1:p1,h2:p2/name/db.
// The TLS schemes take cacert, cert and key (TLSFromURL); the Sentinel
// schemes take sentinel_user and sentinel_password, the Sentinels' own
// credentials (the URL's user and password are the master's).
func FromRedisURL(u *locker.URL) ([]string, ClientOptions, error) {
	base, sentinel := strings.CutSuffix(u.Scheme, "+sentinel")
	hosts, o, err := fromURL(u)
	if err != nil {
		return nil, o, err
	}
	if o.TLSConfig, err = TLSFromURL(u, base == "rediss"); err != nil {
		return nil, o, err
	}
	o.TLS = o.TLSConfig != nil
	path := strings.Trim(u.Path, "/")
	if !sentinel {
		if path != "" {
			o.DB, err = parseDB(path)
		}
		return hosts, o, err
	}
	master, db, _ := strings.Cut(path, "/")
	if master == "" {
		return nil, o, fmt.Errorf("URL names no master: want %s://sentinel1:port,sentinel2:port/master-name[/db]", u.Scheme)
	}
	if db != "" {
		if o.DB, err = parseDB(db); err != nil {
			return nil, o, err
		}
	}
	o.Sentinel = &SentinelOptions{Master: master}
	o.Sentinel.Username, _ = u.Param("sentinel_user")
	o.Sentinel.Password, _ = u.Param("sentinel_password")
	return hosts, o, nil
}

// TLSFromURL reads the cacert, cert and key parameters (file names: the
// CA that signed the server's certificate, in place of the system's
// roots, and a client certificate with its key) and returns the TLS
// configuration, or nil when useTLS is false. These parameters on a
// scheme without TLS are an error. Errors name the parameter and file.
func TLSFromURL(u *locker.URL, useTLS bool) (*tls.Config, error) {
	caFile, _ := u.Param("cacert")
	certFile, _ := u.Param("cert")
	keyFile, _ := u.Param("key")
	if !useTLS {
		if caFile != "" || certFile != "" || keyFile != "" {
			tlsScheme := "rediss"
			if strings.HasPrefix(u.Scheme, "redlock") {
				tlsScheme = "redlocks"
			}
			return nil, fmt.Errorf("parameters cacert, cert and key need TLS: use %s:// instead of %s://", tlsScheme, u.Scheme)
		}
		return nil, nil
	}
	return tlsfiles.Config(caFile, certFile, keyFile)
}
