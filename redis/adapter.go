package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// conn is what the lock algorithm needs from a Redis client library. It is
// satisfied by go-redis v9 (goredis.go) and by redigo (redigo.go), so both
// run exactly the same algorithm.
type conn interface {
	// eval runs s with EVALSHA, falling back to EVAL when the server does
	// not have the script cached (NOSCRIPT).
	eval(ctx context.Context, s *script, keys []string, args ...any) (any, error)
	// evalMany runs len(calls) invocations of s in one pipeline (split by
	// slot on a Cluster) and returns a result or an error for each.
	evalMany(ctx context.Context, s *script, calls []call) []reply
	// subscribe opens a dedicated pub/sub connection.
	subscribe(ctx context.Context) (pubsub, error)
	// blpop blocks for up to timeout on a list, on a connection of its own,
	// and reports whether an element was popped. Cancelling ctx ends the
	// wait promptly.
	blpop(ctx context.Context, key string, timeout time.Duration) (bool, error)
	// configGet returns a server setting, from one node on a Cluster.
	configGet(ctx context.Context, name string) (string, error)
	// close closes the client if the Locker opened it, else does nothing.
	close() error
}

// pubsub is one subscriber connection.
type pubsub interface {
	subscribe(ctx context.Context, channels ...string) error
	unsubscribe(ctx context.Context, channels ...string) error
	// receive returns the next message's channel; confirmed is true when
	// it is the server's confirmation of a SUBSCRIBE rather than a message.
	// An error means the connection is unusable: the caller opens another.
	receive(ctx context.Context) (channel string, confirmed bool, err error)
	// interrupt ends a blocked receive; it may be called from any goroutine.
	interrupt()
	// close closes the connection; only the goroutine that receives calls it.
	close() error
}

type call struct {
	keys []string
	args []any
}

type reply struct {
	val any
	err error
}

// script is a Lua script and its SHA1, as EVALSHA wants it.
type script struct {
	name string
	src  string
	sha  string
	keys int
}

func newScript(name, src string, keys int) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:]), keys: keys}
}

var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/pttl.lua
	pttlLua string

	acquireScript = newScript("acquire", acquireLua, 2)
	releaseScript = newScript("release", releaseLua, 2)
	refreshScript = newScript("refresh", refreshLua, 1)
	pttlScript    = newScript("pttl", pttlLua, 1)
)

// errNoScript reports whether err is the server's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && len(err.Error()) >= 8 && err.Error()[:8] == "NOSCRIPT"
}

// asInt converts a script's integer reply.
func asInt(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case nil:
		return 0, errors.New("redis: unexpected nil reply")
	}
	return 0, fmt.Errorf("redis: unexpected reply %T(%v), want an integer", v, v)
}

// asPair converts a script's {int, int} reply.
func asPair(v any) (int64, int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, 0, fmt.Errorf("redis: unexpected reply %T(%v), want two integers", v, v)
	}
	x, err := asInt(a[0])
	if err != nil {
		return 0, 0, err
	}
	y, err := asInt(a[1])
	return x, y, err
}
