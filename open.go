package locker

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An Opener opens a Locker for a URL of the scheme it was registered for.
// It reads its own parameters through u.Param and friends, calls
// u.CheckParams before connecting to anything, and passes u.Config to New.
type Opener func(ctx context.Context, u *URL) (Locker, error)

var registry = struct {
	sync.RWMutex
	m map[string]Opener
}{m: map[string]Opener{}}

// Register makes a URL scheme available to Open. Backend packages call it
// from init. It panics if scheme is empty, o is nil, or the scheme is
// already registered, as database/sql.Register does: these are programming
// errors found at start-up.
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

// Open returns a Locker for rawURL, whose scheme picks the backend:
// memory://, redis://, rediss://, redlock://, zookeeper:// (zk://), etcd://,
// etcds://, as far as the backend packages are imported. The parameters
// every scheme accepts are ttl (default TTL, e.g. "10s") and prefix
// (prepended to every key); any parameter the backend does not know is an
// error naming it.
func Open(ctx context.Context, rawURL string) (Locker, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("locker: open: empty URL (want scheme://..., registered schemes: %s)", strings.Join(Schemes(), ", "))
	}
	pu, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("locker: open: malformed URL: %w", err)
	}
	if pu.Scheme == "" {
		return nil, fmt.Errorf("locker: open %q: no scheme (registered schemes: %s)", redact(pu), strings.Join(Schemes(), ", "))
	}
	scheme := strings.ToLower(pu.Scheme)
	registry.RLock()
	o := registry.m[scheme]
	registry.RUnlock()
	if o == nil {
		return nil, fmt.Errorf("locker: open %q: unknown scheme %q (registered schemes: %s; is the backend package imported?)",
			redact(pu), scheme, strings.Join(Schemes(), ", "))
	}
	u := &URL{URL: pu, query: pu.Query(), taken: map[string]bool{}}
	if err := u.sharedParams(); err != nil {
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	l, err := o(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	// An Opener should have called CheckParams before connecting; this
	// catches one that did not, so that a misspelt parameter never passes.
	if err := u.CheckParams(); err != nil {
		l.Close()
		return nil, fmt.Errorf("locker: open %q: %w", redact(pu), err)
	}
	return l, nil
}

func redact(u *url.URL) string {
	return u.Redacted()
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
