package redisconn

import (
	"context"
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

// EvictionRisk reads the server's maxmemory-policy and returns it when it
// lets Redis evict lock keys under memory pressure, or "" when they are
// safe (noeviction, or no memory limit at all). Every lock key carries a
// TTL, so the volatile-* policies evict them as readily as the allkeys-*
// ones. An error for which IsServerError holds means CONFIG is not
// permitted, as on many managed services.
func EvictionRisk(ctx context.Context, c Conn) (string, error) {
	policy, err := c.ConfigGet(ctx, "maxmemory-policy")
	if err != nil || policy == "noeviction" {
		return "", err
	}
	if limit, err := c.ConfigGet(ctx, "maxmemory"); err == nil && limit == "0" {
		return "", nil // no memory limit: nothing is ever evicted
	}
	return policy, nil
}
