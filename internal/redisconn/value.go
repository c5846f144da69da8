package redisconn

import (
	"context"
	_ "embed"
)

// MaxValueLen is the longest value the redis and redlock backends store
// with a hold (backend.Capabilities.MaxValueLen): every operation on a
// hash of holders reads all its holders' values with it (see
// scripts/holds.lua), so they are kept small. Redis itself would take
// 512 MB.
const MaxValueLen = 64 << 10

// setValueLua replaces a hold's value; see the script.
//
//go:embed scripts/set_value.lua
var setValueLua string

var setValueScript = NewScript("set_value", WithHolds(setValueLua), -1)

// ValueUpdate is a holder's new value for its hold.
type ValueUpdate struct {
	Key   string // the lock key on the server
	Token string
	// Value is the new value; empty removes it.
	Value []byte
	// Version orders the holder's updates: 2 for its first, higher for
	// each later one (the value the hold was taken with is version 1). A
	// hold keeps the value of the highest version it was sent.
	Version uint64
	// FenceKey is the key's fence counter, whose fence goes with a
	// mutex's hold that moves into a hash (see SetValue); "" where none
	// is kept (Redlock's nodes).
	FenceKey string
	// Channel is the key's change channel, where the change is published.
	Channel string
}

// SetValue replaces the value of u.Token's hold of u.Key with u.Value,
// only if the key still holds it, atomically with checking that it does,
// and publishes a change notice: it reports false when the hold is not
// ours (expired, released, taken over). The hold's TTL, fence and place
// are unchanged. A value of an older version than the hold's is not taken
// (true all the same: the hold has a later one). A mutex's hold without a
// value, a string key, moves into a hash of family "exclusive" when it
// gets one (see scripts/holds.lua), taking along the fence that the
// counter names for it; an empty value leaves it a string key, and still
// publishes the notice.
func SetValue(ctx context.Context, c Conn, u ValueUpdate) (bool, error) {
	keys := []string{u.Key}
	if u.FenceKey != "" {
		keys = append(keys, u.FenceKey)
	}
	n, err := EvalInt(ctx, c, setValueScript, keys, u.Token, ValueArg(u.Value), u.Channel, u.Version)
	return n == 1, err
}
