package redisconn

import (
	"context"
	_ "embed"
	"time"
)

// The scripts on one lock key that the redis and redlock backends share,
// one round trip each; see scripts/ for what each does. Each backend keeps
// its own acquire: redis mints a fencing token in a script, redlock sends
// a plain SET NX PX.
var (
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/pttl.lua
	pttlLua string
	//go:embed scripts/take.lua
	takeLua string

	// ReleaseScript deletes a lock key only if it holds the token, and
	// publishes a release notice: KEYS lock key; ARGV token, channel.
	// It returns 1 when released, 0 when the key did not hold the token.
	ReleaseScript = NewScript("release", releaseLua, 1)
	// RefreshScript extends a lock key only if it holds the token: KEYS
	// lock key; ARGV token, TTL in ms (Millis). It returns 1 when
	// extended, 0 when the key does not hold the token.
	RefreshScript = NewScript("refresh", refreshLua, 1)
	// PTTLScript returns a lock key's remaining TTL in ms if it holds the
	// token, -1 when it does not: KEYS lock key; ARGV token.
	PTTLScript = NewScript("pttl", pttlLua, 1)

	takeScript = NewScript("take", takeLua, 1)
)

// Take takes the lock key for token: SET NX PX, the cheapest, and only if
// the key is taken, takeScript, one more round trip, which counts our own
// token already there as taken (and sets its TTL afresh) and otherwise
// answers with the holder's remaining TTL. It returns 1 when the key is
// ours; else minus the holder's remaining ms (at least 1), or 0 when the
// key has no TTL (not a lock).
func Take(ctx context.Context, c Conn, key, token string, ttl time.Duration) (int64, error) {
	ok, err := c.SetNX(ctx, key, token, ttl)
	if ok || err != nil {
		return 1, err
	}
	return EvalInt(ctx, c, takeScript, []string{key}, token, Millis(ttl))
}

// Millis is d in whole milliseconds, as the scripts and PX take a TTL, and
// at least 1: PEXPIRE 0 would delete the key, and SET PX 0 is an error.
func Millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
