package redisconn

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/distlock/locker/backend"
)

// The scripts on one lock key that the redis and redlock backends share,
// one round trip each; see scripts/ for what each does. Each backend keeps
// its own exclusive acquire: redis mints a fencing token in a script,
// redlock sends a plain SET NX PX. Shared and permit holds, and exclusive
// holds with a value, are taken by Hold on both.
var (
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/pttl.lua
	pttlLua string
	//go:embed scripts/take.lua
	takeLua string

	// ReleaseScript releases an exclusive hold only if the key holds the
	// token, and publishes a release notice: KEYS lock key; ARGV token,
	// release channel. It returns 1 when released, 0 when the key did not
	// hold the token. It deletes the string key of a mutex's hold without
	// a value and, after its GET fails on a hash, removes our exclusive
	// hold with a value from the key's hash of holders.
	ReleaseScript = NewScript("release", WithHolds(releaseLua), 1)
	// RefreshScript extends an exclusive hold only if the key holds the
	// token: KEYS lock key; ARGV token, TTL in ms (Millis). It returns 1
	// when extended, 0 when the key does not hold the token. Like
	// ReleaseScript it finds the hold in either form.
	RefreshScript = NewScript("refresh", WithHolds(refreshLua), 1)
	// PTTLScript returns an exclusive hold's remaining TTL in ms if the
	// key holds the token, -1 when it does not: KEYS lock key; ARGV
	// token. Like ReleaseScript it finds the hold in either form.
	PTTLScript = NewScript("pttl", WithHolds(pttlLua), 1)

	takeScript = NewScript("take", WithHolds(takeLua), 1)
)

// Grant is a server's answer to a request to take a lock key.
type Grant struct {
	// Taken: the key is ours (an exclusive hold), or holds our shared or
	// permit hold.
	Taken bool
	// Fence is the fence minted with a hold of a hash of holders when the
	// request named a fence counter (Hold); 0 otherwise.
	Fence uint64
	// Remaining, when the key is busy, is how long until the soonest of
	// its holders expires, as the server tells it; 0 when unknown.
	Remaining time.Duration
	// Mismatch, when not nil, says that the key's holders are of another
	// family than the request: nothing was taken.
	Mismatch *backend.Mismatch
}

// Take takes the lock key for token, an exclusive hold: SET NX PX, the
// cheapest, and only if the key is taken, takeScript, one more round
// trip, which counts our own token already there as taken (and sets its
// TTL afresh) and otherwise answers with the holder's remaining TTL (a
// mutex's, or an exclusive holder's with a value, kept in a hash), or
// with the soonest expiry of a read lock's shared holders, or says that
// the key is a semaphore's (a Mismatch).
func Take(ctx context.Context, c Conn, key, token string, ttl time.Duration) (Grant, error) {
	ok, err := c.SetNX(ctx, key, token, ttl)
	if ok || err != nil {
		return Grant{Taken: ok}, err
	}
	v, err := c.Eval(ctx, takeScript, []string{key}, token, Millis(ttl))
	if err != nil {
		return Grant{}, err
	}
	if n, ok := v.(int64); ok {
		if n == 1 {
			return Grant{Taken: true}, nil
		}
		return Grant{Remaining: time.Duration(-n) * time.Millisecond}, nil
	}
	family, err := asString(v)
	if err != nil {
		return Grant{}, fmt.Errorf("redis: unexpected reply %T(%v) to the take script", v, v)
	}
	return mismatch(family, backend.Claim{Kind: backend.Exclusive})
}

// Millis is d in whole milliseconds, as the scripts and PX take a TTL, and
// at least 1: PEXPIRE 0 would delete the key, and SET PX 0 is an error.
func Millis(d time.Duration) int64 { return max(d.Milliseconds(), 1) }
