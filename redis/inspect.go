package redis

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector with one script call that reads the
// lock key (its token and PTTL, or its hash of holders) and the fence
// counter together. Waiters are not counted: they wait for release
// notices, and nothing on the server lists them.
//
// A mutex's holder without a value (a string key) is the one entry of
// Holds. The counter holds the last fence minted and the token of the
// lock it was minted for: the holder's fence when that token is the
// holder's, and then Fence is its Lock.Fence. A holder that has not asked
// for its fence yet has none (see Performance in the package doc), nor
// does a counter that names no token (written by a version that did not
// store it), nor one that expired 24 hours after its last mint: Fenced is
// then false, never a predecessor's fence.
//
// A hash of holders lists every holder in Holds, with its kind, token,
// value, weight (a permit's), fence and remaining TTL, in grant order (by
// fence, minted with each grant); the Holder's own fields describe the
// first. An exclusive holder with a value is its one entry, with the
// fence minted for it: at its grant, or, for a mutex's hold that SetValue
// moved there, the one it had (Fenced false when it had none yet, until
// it asks).
//
// Detail: "redis key" and "redis fence key", the server keys (named
// apart from the key Inspect was given); "last fence", the counter's,
// when it is not the holder's (a free key, a holder that has not minted
// one, or a key of shared or permit holds, where it is the latest
// grant's).
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	st, err := redisconn.InspectKey(ctx, d.c, lockKey(key), fenceKey(key))
	if err != nil {
		return backend.Holder{}, err
	}
	h := backend.Holder{Detail: map[string]string{"redis key": lockKey(key), "redis fence key": fenceKey(key)}}
	if len(st.Holds) > 0 {
		return holdsOf(h, st), nil
	}
	holders := st.Token != "" && st.Fenced && st.Minter == st.Token
	if st.Fenced && !holders {
		h.Detail["last fence"] = strconv.FormatUint(st.Fence, 10)
	}
	if st.Token == "" {
		return h, nil
	}
	h.Held, h.Token = true, st.Token
	if holders {
		h.Fence, h.Fenced = st.Fence, true
	}
	h.TTL, h.TTLKnown = st.TTL, st.TTLKnown
	h.Holds = []backend.Hold{{Kind: backend.Exclusive, Token: h.Token, Fence: h.Fence, Fenced: h.Fenced, TTL: h.TTL, TTLKnown: h.TTLKnown}}
	return h, nil
}

// holdsOf fills in h from st, a hash of holders.
func holdsOf(h backend.Holder, st redisconn.KeyState) backend.Holder {
	hs := slices.SortedFunc(slices.Values(st.Holds), func(a, b redisconn.HoldState) int { return cmp.Compare(a.Fence, b.Fence) })
	for _, s := range hs {
		hold := backend.Hold{Kind: st.Kind, Token: s.Token, Value: s.Value, Fence: s.Fence, Fenced: s.Fence > 0, TTL: s.TTL, TTLKnown: true}
		if st.Kind == backend.Permit {
			hold.Limit, hold.Weight = st.Limit, s.Weight
		}
		h.Holds = append(h.Holds, hold)
	}
	first := h.Holds[0]
	if st.Fenced && (st.Kind != backend.Exclusive || st.Minter != first.Token) {
		h.Detail["last fence"] = strconv.FormatUint(st.Fence, 10)
	}
	h.Held, h.Token, h.Value = true, first.Token, first.Value
	h.Fence, h.Fenced = first.Fence, first.Fenced
	h.TTL, h.TTLKnown = first.TTL, true
	return h
}

// ForceRelease implements backend.Inspector: it deletes the lock key,
// whoever holds it (every shared or permit holder with it), and publishes the release notice a release does, so
// that waiters try again at once. The holder learns of it at its next
// refresh, which finds the key gone (or another's) and closes its Lost.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	return redisconn.ForceRelease(ctx, d.c, lockKey(key), channelOf(lockKey(key)))
}
