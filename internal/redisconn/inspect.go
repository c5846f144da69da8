package redisconn

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
)

// The operator's scripts, which the redis and redlock backends run for
// locker.Inspect and locker.ForceRelease.
var (
	//go:embed scripts/inspect.lua
	inspectLua string
	//go:embed scripts/force_release.lua
	forceReleaseLua string

	inspectScript      = NewScript("inspect", WithHolds(inspectLua), -1)
	forceReleaseScript = NewScript("force_release", forceReleaseLua, 1)
)

// KeyState is what a lock key holds on one server.
type KeyState struct {
	// Token is the token of a mutex's holder without a value (a string
	// key); "" when the key does not exist or is a hash of holders
	// (Holds).
	Token string
	// TTL is the key's remaining TTL, meaningful when TTLKnown (false
	// when the key does not exist, or exists without a TTL, which no
	// lock does). For a key of shared or permit holds, the latest
	// expiry of its holders.
	TTL      time.Duration
	TTLKnown bool
	// Kind is the family of a hash of holders: Shared, Permit (with its
	// Limit) or Exclusive (one exclusive hold with a value); Exclusive
	// for a string key too.
	Kind  backend.Kind
	Limit int
	// Holds are the live holders of a hash of holders, in no particular
	// order.
	Holds []HoldState
	// Fence is the value of the fence counter, meaningful when Fenced
	// (false when no counter was asked for, or it does not exist).
	Fence  uint64
	Fenced bool
	// Minter is the token of the lock the counter's fence was minted for;
	// "" for a counter that does not say (written by an older version,
	// which minted with every acquisition).
	Minter string
}

// HoldState is one holder in a hash of holders.
type HoldState struct {
	Token  string
	Weight int
	// Fence is the fence minted with the hold, or for an exclusive hold
	// the one minted for it while it held the key; 0 where none was (on
	// Redlock's nodes, or before an exclusive holder asked for one).
	Fence uint64
	// TTL is the hold's own remaining TTL.
	TTL time.Duration
	// Value is the hold's value; nil when none. Version is its version:
	// 1 for the value the hold was taken with, higher for each SetValue
	// of its holder, 0 when none was ever set (see scripts/holds.lua).
	Value   []byte
	Version uint64
}

// InspectKey reads lockKey's token and remaining TTL and, unless fenceKey
// is "", the fence counter, in one script call: one consistent view.
func InspectKey(ctx context.Context, c Conn, lockKey, fenceKey string) (KeyState, error) {
	keys := []string{lockKey}
	if fenceKey != "" {
		keys = append(keys, fenceKey)
	}
	v, err := c.Eval(ctx, inspectScript, keys)
	if err != nil {
		return KeyState{}, err
	}
	a, ok := v.([]any)
	if !ok || (len(a) != 3 && len(a) != 5) {
		return KeyState{}, fmt.Errorf("redis: unexpected reply %T(%v) to the inspect script, want three or five values", v, v)
	}
	var st KeyState
	if st.Token, err = asString(a[0]); err != nil {
		return KeyState{}, err
	}
	pttl, err := AsInt(a[1])
	if err != nil {
		return KeyState{}, err
	}
	if pttl >= 0 {
		st.TTL, st.TTLKnown = time.Duration(pttl)*time.Millisecond, true
	}
	fence, err := asString(a[2])
	if err != nil {
		return KeyState{}, err
	}
	if fence != "" {
		// "<fence> <token>", or the fence alone.
		n, minter, _ := strings.Cut(fence, " ")
		if st.Fence, err = strconv.ParseUint(n, 10, 64); err != nil {
			return KeyState{}, fmt.Errorf("redis: fence counter %s holds %q, not a number", fenceKey, fence)
		}
		st.Fenced, st.Minter = true, minter
	}
	if len(a) == 5 {
		err = st.readHolds(a[3], a[4])
	}
	return st, err
}

// readHolds reads the family and the holders of a hash of holders, as the
// inspect script returns them.
func (st *KeyState) readHolds(family, holders any) error {
	f, err := asString(family)
	if err != nil {
		return err
	}
	if st.Kind, st.Limit, err = parseFamily(f); err != nil {
		return err
	}
	flat, ok := holders.([]any)
	if !ok || len(flat)%6 != 0 {
		return fmt.Errorf("redis: unexpected holders %T(%v) in the inspect script's reply, want six values each", holders, holders)
	}
	for i := 0; i < len(flat); i += 6 {
		var h HoldState
		if h.Token, err = asString(flat[i]); err != nil {
			return err
		}
		ms, err := AsInt(flat[i+1])
		if err != nil {
			return err
		}
		w, err := AsInt(flat[i+2])
		if err != nil {
			return err
		}
		fence, err := AsInt(flat[i+3])
		if err != nil {
			return err
		}
		value, err := asString(flat[i+4])
		if err != nil {
			return err
		}
		version, err := AsInt(flat[i+5])
		if err != nil {
			return err
		}
		h.TTL, h.Weight, h.Fence, h.Version = time.Duration(ms)*time.Millisecond, int(w), uint64(fence), uint64(version)
		if value != "" {
			h.Value = []byte(value)
		}
		st.Holds = append(st.Holds, h)
	}
	return nil
}

// ForceRelease deletes lockKey whoever holds it and, if it existed,
// publishes a release notice on channel for its waiters, as the release
// script does. It reports whether it deleted a lock.
func ForceRelease(ctx context.Context, c Conn, lockKey, channel string) (bool, error) {
	n, err := EvalInt(ctx, c, forceReleaseScript, []string{lockKey}, channel)
	return n == 1, err
}

// asString converts a bulk-string reply, which go-redis gives as a string
// and redigo as bytes; nil is "".
func asString(v any) (string, error) {
	switch s := v.(type) {
	case nil:
		return "", nil
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("redis: unexpected reply %T(%v), want a string", v, v)
}
