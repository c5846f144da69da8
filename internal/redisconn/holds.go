package redisconn

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
)

// Holds kept in a hash of holders. A mutex's hold without a value is a
// string key that holds its token (SET NX PX); a key of shared holds, of a
// semaphore's permits, or of an exclusive hold with a value, is a hash of
// its holders, each with its expiry on the server's clock, its weight, its
// fence and its value, and the key's family (see scripts/holds.lua). The
// scripts on such a key remove the holders that expired, check that a
// request agrees with the key's family and fits its limit, and keep the
// key's TTL at the latest expiry of its holders, so that Redis deletes it
// when the last one lapses.
var (
	//go:embed scripts/holds.lua
	holdsLua string
	//go:embed scripts/hold.lua
	holdLua string
	//go:embed scripts/hold_release.lua
	holdReleaseLua string
	//go:embed scripts/hold_refresh.lua
	holdRefreshLua string
	//go:embed scripts/hold_pttl.lua
	holdPTTLLua string
	//go:embed scripts/mark.lua
	markLua string

	holdScript = NewScript("hold", WithHolds(holdLua), -1)
	markScript = NewScript("mark", WithHolds(markLua), 1)

	// HoldReleaseScript is ReleaseScript for a shared or permit hold: it
	// removes the hold from the key, publishes a release notice, and
	// leaves the other holders theirs. It returns 1 when released, 0 when
	// the key did not hold ours.
	HoldReleaseScript = NewScript("hold_release", WithHolds(holdReleaseLua), 1)
	// HoldRefreshScript is RefreshScript for a shared or permit hold: the
	// key's TTL becomes the latest of its holders' expiries, so that one
	// holder's shorter TTL never shortens another's hold.
	HoldRefreshScript = NewScript("hold_refresh", WithHolds(holdRefreshLua), 1)
	// HoldPTTLScript is PTTLScript for a shared or permit hold: the hold's
	// own remaining TTL, not the key's.
	HoldPTTLScript = NewScript("hold_pttl", WithHolds(holdPTTLLua), 1)
)

// WithHolds returns the source of a script that uses the library of
// scripts/holds.lua: src with the library where its line "--@holds"
// stands, or the library and then src when it has no such line. The
// library is one Lua function, library(), that returns the others: Redis
// runs a script's whole body at every call, so a script creates the
// library's closures only on the paths that call it, and an exclusive
// lock's path through take.lua or acquire.lua does not pay for them. A
// script whose fast path returns before its "--@holds" line (release.lua)
// does not even create the closure of library itself.
func WithHolds(src string) string {
	before, after, ok := strings.Cut(src, holdsMarker)
	if !ok {
		return holdsLua + src
	}
	return before + holdsLua + after
}

// holdsMarker is the line of a script where WithHolds puts the library.
const holdsMarker = "--@holds\n"

// KeyScripts are the scripts on a held lock key for one kind of hold.
type KeyScripts struct {
	// Release: KEYS lock key; ARGV token, release channel. 1 released, 0
	// not ours.
	Release *Script
	// Refresh: KEYS lock key; ARGV token, TTL in ms. 1 extended, 0 not ours.
	Refresh *Script
	// PTTL: KEYS lock key; ARGV token. The remaining ms, or -1.
	PTTL *Script
}

var (
	exclusiveScripts = KeyScripts{Release: ReleaseScript, Refresh: RefreshScript, PTTL: PTTLScript}
	holdScripts      = KeyScripts{Release: HoldReleaseScript, Refresh: HoldRefreshScript, PTTL: HoldPTTLScript}
)

// ScriptsOf returns the scripts on a lock key held with kind k. Those of an
// exclusive hold find it in either form: the string key of a mutex's hold
// without a value, or the hash of an exclusive hold with one (taken so, or
// moved there by SetValue).
func ScriptsOf(k backend.Kind) *KeyScripts {
	if k == backend.Exclusive {
		return &exclusiveScripts
	}
	return &holdScripts
}

// HoldRequest is a request for a hold of a lock key kept in a hash of
// holders: a shared hold, a permit hold, or an exclusive hold with a
// value.
type HoldRequest struct {
	Key   string // the lock key on the server
	Token string
	TTL   time.Duration
	// Claim is the request's kind, and a Permit's limit and weight.
	Claim backend.Claim
	// Value is stored with the hold; nil or empty for none. An exclusive
	// hold without one is a mutex's string key: Take it.
	Value []byte
	// FenceKey is the key's fence counter, in the lock key's hash slot,
	// and FenceLife how long it outlives the last fence minted. With a
	// FenceKey, every hold granted gets a fence, minted as the grant is
	// made; with none (Redlock's nodes), no fence.
	FenceKey  string
	FenceLife time.Duration
	// Channel is the key's change channel, where a grant is published
	// for its observers (backend.Observer); "" publishes nothing.
	Channel string
}

// Hold takes a hold of r.Key kept in a hash of holders, in one script
// call: granted when the key is free or of r's family with room for it (a
// semaphore's permits held and r's weight within its limit; shared holds
// have no limit, an exclusive hold's family a limit of one), busy while
// holders that r excludes or that leave it no room hold the key (a writer
// beside readers, an exclusive holder, the other permit holders; with the
// time until the soonest of them expires), a Mismatch when the key's
// holders are of a family r cannot wait for (a semaphore's key for an
// exclusive or shared hold, or one of another limit). A grant stores
// r.Value and publishes on r.Channel. A request of a token the key
// already holds is the same acquisition sent again: it finds its hold, its
// fence and its TTL set afresh.
func Hold(ctx context.Context, c Conn, r HoldRequest) (Grant, error) {
	family, err := familyOf(r.Claim)
	if err != nil {
		return Grant{}, err
	}
	keys := []string{r.Key}
	if r.FenceKey != "" {
		keys = append(keys, r.FenceKey)
	}
	limit, weight := 0, 1
	switch r.Claim.Kind {
	case backend.Permit:
		limit, weight = r.Claim.Limit, r.Claim.Weight
	case backend.Exclusive:
		limit = 1
	}
	v, err := c.Eval(ctx, holdScript, keys, r.Token, Millis(r.TTL), family, limit, weight, Millis(r.FenceLife),
		ValueArg(r.Value), r.Channel)
	if err != nil {
		return Grant{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return Grant{}, fmt.Errorf("redis: unexpected reply %T(%v) to the hold script, want two values", v, v)
	}
	status, err := AsInt(a[0])
	if err != nil {
		return Grant{}, err
	}
	switch status {
	case 1:
		fence, err := AsInt(a[1])
		return Grant{Taken: true, Fence: uint64(fence)}, err
	case 0:
		// PTTL is 0 for a key that expires within the millisecond: look
		// again in 1 ms; negative for one without a TTL: unknown.
		ms, err := AsInt(a[1])
		if err != nil || ms < 0 {
			return Grant{}, err
		}
		return Grant{Remaining: time.Duration(max(ms, 1)) * time.Millisecond}, nil
	}
	held, err := asString(a[1])
	if err != nil {
		return Grant{}, err
	}
	return mismatch(held, r.Claim)
}

// familyOf is the family a request of claim c declares for its key, as the
// scripts store it: "shared", "permit <limit>" or "exclusive". It refuses
// a permit without a limit, or one whose weight does not fit it.
func familyOf(c backend.Claim) (string, error) {
	switch c.Kind {
	case backend.Exclusive:
		return "exclusive", nil
	case backend.Shared:
		return "shared", nil
	case backend.Permit:
		if c.Limit < 1 || c.Weight < 1 || c.Weight > c.Limit {
			return "", fmt.Errorf("redis: a permit hold takes from 1 to the limit of permits, got weight %d of limit %d", c.Weight, c.Limit)
		}
		return "permit " + strconv.Itoa(c.Limit), nil
	}
	return "", fmt.Errorf("redis: Hold takes exclusive, shared and permit holds, not %v ones", c.Kind)
}

// ValueArg is a hold's value as a script takes it: "" for none.
func ValueArg(v []byte) any {
	if len(v) == 0 {
		return ""
	}
	return v
}

// errFamily means the server named a family no script writes.
var errFamily = errors.New("redis: unknown family of a lock key")

// parseFamily reads a family as the scripts name it: "exclusive",
// "shared" or "permit <limit>".
func parseFamily(s string) (backend.Kind, int, error) {
	switch s {
	case "exclusive":
		return backend.Exclusive, 0, nil
	case "shared":
		return backend.Shared, 0, nil
	}
	if n, ok := strings.CutPrefix(s, "permit "); ok {
		if limit, err := strconv.Atoi(n); err == nil && limit > 0 {
			return backend.Permit, limit, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: %q", errFamily, s)
}

// mismatch is the Grant of a request of claim c refused because the key's
// holders declare family held.
func mismatch(held string, c backend.Claim) (Grant, error) {
	k, limit, err := parseFamily(held)
	if err != nil {
		return Grant{}, err
	}
	return Grant{Mismatch: &backend.Mismatch{HeldKind: k, HeldLimit: limit, Kind: c.Kind, Limit: c.Limit}}, nil
}

// MismatchOf is the error of a request of claim c that a script refused
// for disagreeing with the key's family, held as the script replied it
// (the redis backend's acquire script answers so on a semaphore's key).
func MismatchOf(held any, c backend.Claim) error {
	s, err := asString(held)
	if err != nil {
		return err
	}
	g, err := mismatch(s, c)
	if err != nil {
		return err
	}
	return g.Mismatch
}

// Mark marks the writer of token as waiting for key, for ttl, when readers
// hold it (a hash of a read/write lock's holders): until the mark lapses
// or is withdrawn (Unmark), no new shared hold of the key is granted, so
// that readers that keep arriving do not starve the writer, while those
// that hold it keep their holds. It reports whether the key was marked; a
// mutex's string key, which keeps readers out by itself, is not. A
// writer's grant removes its mark.
func Mark(ctx context.Context, c Conn, key, token string, ttl time.Duration) (bool, error) {
	n, err := EvalInt(ctx, c, markScript, []string{key}, token, Millis(ttl), "")
	return n == 1, err
}

// Unmark withdraws the mark of the writer of token from key (Mark), when
// its wait ended, and publishes on channel, the key's release channel, so
// that readers the mark kept out try again.
func Unmark(ctx context.Context, c Conn, key, token, channel string) error {
	_, err := EvalInt(ctx, c, markScript, []string{key}, token, 0, channel)
	return err
}
