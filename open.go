package locker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/locker/backend"
)

// An Opener opens a Locker for a URL of the scheme it was registered for.
// It reads its own parameters through u.Param and friends, calls
// u.CheckParams before connecting to anything, and passes u.Config to New.
type Opener func(ctx context.Context, u *URL) (Locker, error)

var registry = struct {
	sync.RWMutex
	m map[string]Opener
}{m: map[string]Opener{}}

// Register is for backend packages: it makes a URL scheme available to
// Open. They call it from init. It panics if scheme is empty, o is nil, or
// the scheme is already registered, as database/sql.Register does: these
// are programming errors found at start-up.
func Register(scheme string, o Opener) {
	scheme = strings.ToLower(scheme)
	if scheme == "" || o == nil {
		panic("locker: Register with empty scheme or nil Opener")
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.m[scheme]; dup {
		panic("locker: Register called twice for scheme " + scheme)
	}
	registry.m[scheme] = o
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	s := make([]string, 0, len(registry.m))
	for k := range registry.m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open returns a Locker for rawURL, whose scheme picks the backend: any
// scheme a backend package registered when imported (Schemes lists them;
// an unknown scheme is an error that names them). The parameters
// every scheme accepts are ttl (default TTL, e.g. "10s") and prefix
// (prepended to every key); any parameter the backend does not know is an
// error naming it.
//
// Options set what a URL cannot carry: WithLogger, and the OpenTelemetry
// providers WithMeterProvider and WithTracerProvider.
//
// A default TTL (the ttl parameter) outside the backend's range is an
// error here, not at the first Acquire: see Capabilities.MinTTL and MaxTTL.
func Open(ctx context.Context, rawURL string, opts ...OpenOption) (Locker, error) {
	u, err := prepare(ctx, rawURL, opts)
	if err != nil {
		return nil, err
	}
	pu := u.URL
	registry.RLock()
	o := registry.m[strings.ToLower(pu.Scheme)]
	registry.RUnlock()
	l, err := o(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	// An Opener should have called CheckParams before connecting; this
	// catches one that did not, so that a misspelt parameter never passes.
	err = u.CheckParams()
	if c, ok := l.(*client); ok && err == nil {
		err = c.checkConfig()
	}
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	return l, nil
}

// prepare reads rawURL and opts for Open and Diagnose, up to the point
// where Open hands the URL to the scheme's Opener: the errors of a URL
// that cannot be read, or names no registered scheme.
func prepare(ctx context.Context, rawURL string, opts []OpenOption) (*URL, error) {
	if ctx == nil {
		return nil, fmt.Errorf("locker: open: %w", errNilContext)
	}
	if rawURL == "" {
		return nil, fmt.Errorf("locker: open: empty URL (want scheme://..., registered schemes: %s)", strings.Join(Schemes(), ", "))
	}
	pu, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("locker: open: malformed URL: %w", err)
	}
	if pu.Scheme == "" {
		return nil, fmt.Errorf("locker: open %q: no scheme (registered schemes: %s)", redact(pu), strings.Join(Schemes(), ", "))
	}
	scheme := strings.ToLower(pu.Scheme)
	registry.RLock()
	_, known := registry.m[scheme]
	registry.RUnlock()
	if !known {
		return nil, fmt.Errorf("locker: open %q: unknown scheme %q (registered schemes: %s; is the backend package imported?)",
			redact(pu), scheme, strings.Join(Schemes(), ", "))
	}
	u := &URL{URL: pu, query: pu.Query(), taken: map[string]bool{}}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("locker: open %q: option %d is nil", redact(pu), i+1)
		}
		opt(&u.Config)
	}
	if err := u.sharedParams(); err != nil {
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	return u, nil
}

// parseURL parses rawURL as url.Parse does, except that it reads the host
// part of the authority as a comma-separated list of hosts, each with or
// without a port. url.Parse reads the whole list as one host and its port
// as what follows the last colon, so it rejects h1:2181,h2 and lists of
// IPv6 addresses.
func parseURL(rawURL string) (*url.URL, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return url.Parse(rawURL)
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	userinfo, hosts := "", rest[:end]
	if i := strings.LastIndex(hosts, "@"); i >= 0 {
		userinfo, hosts = hosts[:i+1], hosts[i+1:]
	}
	if !strings.Contains(hosts, ",") {
		return url.Parse(rawURL)
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue // HostPorts names the empty host
		}
		if hu, err := url.Parse("//" + h); err != nil || hu.Host != h {
			return nil, fmt.Errorf("host %q in %q is not host[:port]", h, hosts)
		}
	}
	pu, err := url.Parse(scheme + "://" + userinfo + "hosts" + rest[end:])
	if err != nil {
		return nil, err
	}
	pu.Host = hosts
	return pu, nil
}

// An OpenOption sets what Open passes to the backend besides the URL.
type OpenOption func(*Config)

// WithLogger sets the logger of the Locker and of its backend (Config.Logger).
func WithLogger(l *slog.Logger) OpenOption {
	return func(c *Config) { c.Logger = l }
}

// WithMeterProvider makes the Locker record its metrics with mp
// (Config.MeterProvider); see Telemetry in the package documentation.
// Default: none, and no metric is recorded.
func WithMeterProvider(mp metric.MeterProvider) OpenOption {
	return func(c *Config) { c.MeterProvider = mp }
}

// WithTracerProvider makes the Locker record spans with tp
// (Config.TracerProvider); see Telemetry in the package documentation.
// Default: none, and no span is recorded.
func WithTracerProvider(tp trace.TracerProvider) OpenOption {
	return func(c *Config) { c.TracerProvider = tp }
}

// WithTelemetryKeys adds the key to the Locker's metric points and spans
// as the attribute locker.key (Config.TelemetryKeys). Default: off, since
// every distinct key makes a time series of its own.
func WithTelemetryKeys(on bool) OpenOption {
	return func(c *Config) { c.TelemetryKeys = on }
}

// CheckConfig is for backends' typed constructors: it reports whether cfg
// suits the driver d: no nil Option among its Defaults, and a default TTL
// within d's range (Capabilities.MinTTL and MaxTTL, and long enough to
// leave validity after the clock-drift allowance). A backend's constructor
// calls it before New, so that a bad configuration fails there rather than
// at every Acquire; Open checks the same.
func CheckConfig(d backend.Driver, cfg *Config) error {
	if d == nil {
		return errors.New("nil driver")
	}
	return configure(d, cfg).checkConfig()
}

// checkConfig checks the Locker's Defaults as CheckConfig does.
func (c *client) checkConfig() error {
	o, err := c.options(nil)
	if err != nil {
		return err
	}
	if err := c.checkValue(o.value); err != nil {
		return fmt.Errorf("default value: %w", err)
	}
	// Only a default the configuration sets: without one, DefaultTTL
	// applies to calls that do not choose their own, and a backend whose
	// range leaves it out (a ZooKeeper server with a short maximum
	// session) still serves calls that do.
	if !o.ttlSet {
		return nil
	}
	if err := c.checkTTL(o.ttl); err != nil {
		return fmt.Errorf("default TTL: %w", err)
	}
	return nil
}

// Redact returns rawURL as it may be shown in logs and messages: the
// password of its user part, and the value of every query parameter whose
// name contains "password", replaced by xxxxx. Everything else reads as
// given (memory:// stays memory://; the scheme is in lower case). A URL
// that does not parse is shown as its scheme alone, since where a
// password would be in it cannot be told.
func Redact(rawURL string) string {
	u, err := parseURL(rawURL)
	if err != nil {
		scheme, _, _ := strings.Cut(rawURL, "://")
		return scheme + "://(malformed URL)"
	}
	return redact(u)
}

// redact returns u for messages: the password of its user part, and the
// value of every query parameter whose name contains "password"
// (sentinel_password), replaced by xxxxx.
func redact(u *url.URL) string {
	c := *u
	if q := c.Query(); len(q) > 0 {
		changed := false
		for name := range q {
			if strings.Contains(strings.ToLower(name), "password") {
				q.Set(name, "xxxxx")
				changed = true
			}
		}
		if changed {
			c.RawQuery = q.Encode()
		}
	}
	s := c.Redacted()
	if c.Scheme != "" && c.Opaque == "" && c.Host == "" && c.User == nil && c.Path == "" {
		// net/url writes no "//" for a URL with neither authority nor
		// path: memory:// would show as "memory:", which reads as a
		// different URL (and as "memory::" after a colon in a message).
		s = c.Scheme + "://" + strings.TrimPrefix(s, c.Scheme+":")
	}
	return s
}

// URL is a parsed locker URL as an Opener receives it.
type URL struct {
	*url.URL
	// Config holds what the shared parameters (ttl, prefix) asked for; an
	// Opener passes it to New.
	Config Config

	query url.Values
	taken map[string]bool
}

// Hosts returns the comma-separated hosts of the URL's authority, e.g.
// ["h1:2181", "h2:2181"] for zookeeper://h1:2181,h2:2181/chroot.
func (u *URL) Hosts() []string {
	if u.Host == "" {
		return nil
	}
	return strings.Split(u.Host, ",")
}

// HostPorts returns Hosts with defaultPort added to each host that names
// none (IPv6 addresses in brackets, as in URLs). An empty host, or one
// that is not host[:port], is an error that names it.
func (u *URL) HostPorts(defaultPort string) ([]string, error) {
	hosts := u.Hosts()
	if len(hosts) == 0 {
		return nil, fmt.Errorf("URL has no host: want %s://host[:port]", u.Scheme)
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		if h == "" {
			return nil, fmt.Errorf("empty host in %q", u.Host)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			if !strings.Contains(err.Error(), "missing port") {
				return nil, fmt.Errorf("host %q: %w", h, err)
			}
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("host %q: want host[:port]", h)
		}
		out[i] = net.JoinHostPort(host, port)
	}
	return out, nil
}

func (u *URL) sharedParams() error {
	ttl, err := u.DurationParam("ttl", 0)
	if err != nil {
		return err
	}
	if ttl < 0 || (ttl == 0 && u.query.Has("ttl")) {
		return fmt.Errorf("%w: parameter ttl=%q must be positive", ErrInvalidTTL, u.query.Get("ttl"))
	}
	if ttl > 0 {
		u.Config.Defaults = append(u.Config.Defaults, WithTTL(ttl))
	}
	u.Config.Prefix, _ = u.Param("prefix")
	return nil
}

// Param returns the value of query parameter name and marks it as known.
func (u *URL) Param(name string) (string, bool) {
	u.taken[name] = true
	if !u.query.Has(name) {
		return "", false
	}
	return u.query.Get(name), true
}

// DurationParam returns parameter name parsed as a Go duration, or def if
// it is absent.
func (u *URL) DurationParam(name string, def time.Duration) (time.Duration, error) {
	v, ok := u.Param(name)
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("invalid query parameter %s=%q: want a duration such as 10s or 500ms", name, v)
	}
	return d, nil
}

// BoolParam returns parameter name parsed as a boolean, or def if absent.
func (u *URL) BoolParam(name string, def bool) (bool, error) {
	v, ok := u.Param(name)
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("invalid query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

// IntParam returns parameter name parsed as an integer, or def if absent.
func (u *URL) IntParam(name string, def int) (int, error) {
	v, ok := u.Param(name)
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("invalid query parameter %s=%q: want an integer", name, v)
	}
	return n, nil
}

// CheckParams returns an error naming every query parameter no one asked
// for, or nil.
func (u *URL) CheckParams() error {
	var unknown []string
	for k := range u.query {
		if !u.taken[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	var known []string
	for k := range u.taken {
		known = append(known, k)
	}
	slices.Sort(known)
	if len(unknown) == 1 {
		return fmt.Errorf("invalid query parameter %q (known: %s)", unknown[0], strings.Join(known, ", "))
	}
	return fmt.Errorf("invalid query parameters %q (known: %s)", unknown, strings.Join(known, ", "))
}
