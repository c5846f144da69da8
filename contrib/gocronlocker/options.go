package gocronlocker

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/distlock/locker"
)

// A LockerOption configures NewLocker.
type LockerOption interface {
	applyLocker(*lockerConfig)
}

// An ElectorOption configures NewElector.
type ElectorOption interface {
	applyElector(*electorConfig)
}

// An Option configures both NewLocker and NewElector.
type Option interface {
	LockerOption
	ElectorOption
}

// common is what both a Locker and an Elector are configured with.
type common struct {
	ttl    time.Duration
	ttlSet bool
	logger *slog.Logger
	err    error // the first invalid option
}

// lockOptions returns the options of package locker every lock is taken
// with.
func (c *common) lockOptions() []locker.Option {
	if !c.ttlSet {
		return nil
	}
	return []locker.Option{locker.WithTTL(c.ttl)}
}

func (c *common) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

type lockerConfig struct {
	common
	minHold time.Duration
	prefix  string
}

type electorConfig struct {
	common
	value []byte
}

// commonOption is an Option: it sets what both configurations share.
type commonOption func(*common)

func (f commonOption) applyLocker(c *lockerConfig)   { f(&c.common) }
func (f commonOption) applyElector(c *electorConfig) { f(&c.common) }

type lockerOption func(*lockerConfig)

func (f lockerOption) applyLocker(c *lockerConfig) { f(c) }

type electorOption func(*electorConfig)

func (f electorOption) applyElector(c *electorConfig) { f(c) }

// WithTTL sets the TTL of the locks taken: how long a crashed instance
// keeps a job's key, or stays leader, before another instance takes over
// (plus the backend's expiry slack). Default: the Locker's default TTL
// (its URL's ttl parameter, or locker.DefaultTTL). The TTL must be within
// the backend's range (Capabilities().MinTTL and MaxTTL); on ZooKeeper
// only the session timeout is, so leave the default there.
func WithTTL(ttl time.Duration) Option {
	return commonOption(func(c *common) {
		if ttl <= 0 {
			c.fail(fmt.Errorf("WithTTL(%v): a TTL is positive", ttl))
			return
		}
		c.ttl, c.ttlSet = ttl, true
	})
}

// WithLogger sets where failures that no caller sees are logged: a
// deferred release that failed, a campaign that failed and is retried.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return commonOption(func(c *common) { c.logger = l })
}

// WithMinHold keeps a job's lock at least d after it was acquired, even
// when the run ends sooner, so that an instance whose tick fires up to d
// later finds the key held and skips the tick; see the package
// documentation. d should be about half the job's interval: a hold that
// lasts until the next tick is due makes every instance skip that tick.
// Default 0: the lock is released when the run ends.
func WithMinHold(d time.Duration) LockerOption {
	return lockerOption(func(c *lockerConfig) {
		if d < 0 {
			c.fail(fmt.Errorf("WithMinHold(%v): a minimum hold is not negative", d))
			return
		}
		c.minHold = d
	})
}

// WithKeyPrefix sets what a job's key starts with: the key is the prefix
// followed by the job's name (gocron.WithName, by default the function's
// name). Default "gocron/". Every instance of a scheduler must use the
// same prefix.
func WithKeyPrefix(prefix string) LockerOption {
	return lockerOption(func(c *lockerConfig) { c.prefix = prefix })
}

// WithValue stores v with the leadership while this Elector leads (say,
// the instance's address), where locker.Election's Leader and Observe
// report it. A backend that stores no values (Capabilities().MaxValueLen
// 0) campaigns without it. Default: no value.
func WithValue(v []byte) ElectorOption {
	v = append([]byte(nil), v...)
	return electorOption(func(c *electorConfig) { c.value = v })
}

// resolveLocker applies opts in order over the defaults, and returns the
// first invalid one's error; resolveElector likewise.
func resolveLocker(opts []LockerOption) (lockerConfig, error) {
	c := lockerConfig{prefix: "gocron/"}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("option %d is nil", i+1)
		}
		o.applyLocker(&c)
	}
	c.defaults()
	return c, c.err
}

func resolveElector(opts []ElectorOption) (electorConfig, error) {
	var c electorConfig
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("option %d is nil", i+1)
		}
		o.applyElector(&c)
	}
	c.defaults()
	return c, c.err
}

func (c *common) defaults() {
	if c.logger == nil {
		c.logger = slog.Default()
	}
}

// errNilLocker is returned by the constructors for a nil locker.Locker.
var errNilLocker = errors.New("nil locker.Locker (open one with locker.Open)")
