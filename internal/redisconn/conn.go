// Package redisconn is what the Redis-based backends (redis, redlock) need
// from a Redis client library, satisfied by go-redis v9 and by redigo so
// that both run exactly the same algorithms, and what the two backends
// share: the scripts on a lock key (release, refresh, TTL, batched
// refresh, the shared and permit holds and the exclusive holds with a
// value kept in a hash of holders: holds.go, and their values: value.go),
// the subscriber of release and change notices, the eviction-policy check
// and the URL, dial and probe code.
package redisconn

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"
)

// Conn is what the lock algorithms needs from a Redis client library. It is
// satisfied by go-redis v9 (goredis.go) and by redigo (redigo.go), so both
// run exactly the same algorithm.
type Conn interface {
	// Eval runs s with EVALSHA, falling back to EVAL when the server does
	// not have the script cached (NOSCRIPT).
	Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error)
	// EvalMany runs len(calls) invocations of s in one pipeline (split by
	// slot on a Cluster) and returns a result or an error for each.
	EvalMany(ctx context.Context, s *Script, calls []Call) []Reply
	// KeyGroup says which keys one script call may name together: those
	// of the same group, when together is true (the same server and, on
	// a Cluster, the same hash slot). When it is false, key goes in a
	// call of its own (a Ring, which places each call by its first key).
	KeyGroup(key string) (group int, together bool)
	// Subscribe opens a dedicated pub/sub connection.
	Subscribe(ctx context.Context) (PubSub, error)
	// Servers returns the servers behind the client, for checks that must
	// look at each of them: the one server, or every master of a Redis
	// Cluster (every live shard of a Ring). The error says the client
	// could not even learn which servers those are.
	Servers(ctx context.Context) ([]Server, error)
	// SetNX runs SET key value NX PX ttl (in whole milliseconds, at least
	// one: see Millis) and reports whether it set the key.
	SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error)
	// Close closes the client if the Locker opened it, else does nothing.
	Close() error
}

// Server is one Redis server behind a Conn.
type Server interface {
	// Addr is the server's host:port, or "" when the client does not say
	// (a redigo pool dials whatever its Dial function reaches).
	Addr() string
	// ConfigGet returns the server's setting name.
	ConfigGet(ctx context.Context, name string) (string, error)
}

// PubSub is one subscriber connection.
type PubSub interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	// Receive returns the next message or confirmation and its channel.
	// The server confirms every SUBSCRIBE and UNSUBSCRIBE, one reply per
	// channel named, in the order the commands were sent, whether or not
	// the command changed anything. An error means the connection is
	// unusable: the caller opens another.
	Receive(ctx context.Context) (channel string, ev Event, err error)
	// Interrupt ends a blocked receive; it may be called from any goroutine.
	Interrupt()
	// Close closes the connection; only the goroutine that receives calls it.
	Close() error
}

// Event is what PubSub.Receive got from the server.
type Event int

const (
	// EventMessage is a message published on the channel.
	EventMessage Event = iota
	// EventSubscribed confirms a SUBSCRIBE of the channel.
	EventSubscribed
	// EventUnsubscribed confirms an UNSUBSCRIBE of the channel.
	EventUnsubscribed
)

// Call is one invocation of a script in EvalMany.
type Call struct {
	Keys []string
	Args []any
}

// Reply is the result of one Call.
type Reply struct {
	Val any
	Err error
}

// Script is a Lua script and its SHA1, as EVALSHA wants it.
type Script struct {
	name string
	src  string
	sha  string
	keys int
}

// NewScript returns the script src, named name, that takes keys keys (-1
// for any number).
func NewScript(name, src string, keys int) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, sha: hex.EncodeToString(sum[:]), keys: keys}
}

// IsNoScript reports whether err is the server's NOSCRIPT reply.
func IsNoScript(err error) bool {
	return err != nil && len(err.Error()) >= 8 && err.Error()[:8] == "NOSCRIPT"
}

// AsInt converts a script's integer reply.
func AsInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case nil:
		return 0, errors.New("redis: unexpected nil reply")
	}
	return 0, fmt.Errorf("redis: unexpected reply %T(%v), want an integer", v, v)
}

// EvalInt runs s on c and converts its integer reply.
func EvalInt(ctx context.Context, c Conn, s *Script, keys []string, args ...any) (int64, error) {
	v, err := c.Eval(ctx, s, keys, args...)
	if err != nil {
		return 0, err
	}
	return AsInt(v)
}

// AsPair converts a script's {int, int} reply.
func AsPair(v any) (int64, int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("redis: unexpected reply %T(%v), want two integers", v, v)
	}
	x, err := AsInt(a[0])
	if err != nil {
		return 0, 0, err
	}
	y, err := AsInt(a[1])
	return x, y, err
}

// IsServerError reports whether err is an error reply from the server, as
// opposed to a network error.
func IsServerError(err error) bool {
	var ge goredis.Error
	if errors.As(err, &ge) {
		return true
	}
	var re redigo.Error
	return errors.As(err, &re)
}

// IsNil reports whether v is nil, or an interface holding a nil pointer
// (a typed nil, such as a nil *goredis.Client passed as a
// UniversalClient), which the client library's methods would dereference
// in a goroutine of their own, where the caller cannot recover the panic.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// NilName names a value that IsNil reports for an error message: "nil",
// or "a nil *redis.Client" for a typed nil.
func NilName(v any) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprintf("a nil %T", v)
}
