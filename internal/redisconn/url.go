package redisconn

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/distlock/locker"
)

// FromURL reads what redis:// and redlock:// URLs share: the hosts (each
// host:port), the database in the path, user and password, and the client
// and timeout parameters. Errors name the problem without a package
// prefix; the caller adds it.
func FromURL(u *locker.URL, useTLS bool) ([]string, ClientOptions, error) {
	var o ClientOptions
	o.Client, _ = u.Param("client")
	timeout, err := u.DurationParam("timeout", 0)
	if err != nil {
		return nil, o, err
	}
	o.Timeout = timeout
	hosts := u.Hosts()
	if len(hosts) == 0 {
		return nil, o, fmt.Errorf("URL has no host: want %s://host:port", u.Scheme)
	}
	for _, h := range hosts {
		if _, port, ok := strings.Cut(h, ":"); !ok || port == "" {
			return nil, o, fmt.Errorf("host %q has no port: want host:port", h)
		}
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if o.DB, err = strconv.Atoi(p); err != nil || o.DB < 0 {
			return nil, o, fmt.Errorf("path %q is not a database number", u.Path)
		}
	}
	o.Username = u.User.Username()
	o.Password, _ = u.User.Password()
	o.TLS = useTLS
	return hosts, o, nil
}
