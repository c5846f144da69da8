package redis

import (
	"context"
	"strconv"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
)

var _ backend.Inspector = (*driver)(nil)

// Inspect implements backend.Inspector with one script call that reads the
// lock key (its token and PTTL) and the fence counter together. The
// counter holds the fence minted by the last acquisition, so while the key
// is held it is the holder's fence; it expires 24 hours after that
// acquisition, and then the fence is unknown. Waiters are not counted:
// they wait for release notices, and nothing on the server lists them.
//
// Detail: "key" and "fence key", the server keys; for a free key whose
// counter is still there, "last fence", the last holder's.
func (d *driver) Inspect(ctx context.Context, key string) (backend.Holder, error) {
	st, err := redisconn.InspectKey(ctx, d.c, lockKey(key), fenceKey(key))
	if err != nil {
		return backend.Holder{}, err
	}
	h := backend.Holder{Detail: map[string]string{"key": lockKey(key), "fence key": fenceKey(key)}}
	if st.Token == "" {
		if st.Fenced {
			h.Detail["last fence"] = strconv.FormatUint(st.Fence, 10)
		}
		return h, nil
	}
	h.Held, h.Token = true, st.Token
	h.Fence, h.Fenced = st.Fence, st.Fenced
	h.TTL, h.TTLKnown = st.TTL, st.TTLKnown
	return h, nil
}

// ForceRelease implements backend.Inspector: it deletes the lock key,
// whoever holds it, and publishes the release notice a release does, so
// that waiters try again at once. The holder learns of it at its next
// refresh, which finds the key gone (or another's) and closes its Lost.
func (d *driver) ForceRelease(ctx context.Context, key string) (bool, error) {
	return redisconn.ForceRelease(ctx, d.c, lockKey(key), channelOf(key))
}
