package redisconn

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/distlock/locker/backend"
)

// refreshManyLua extends many locks in one script call; see the script.
//
//go:embed scripts/refresh_many.lua
var refreshManyLua string

var refreshManyScript = NewScript("refresh_many", WithHolds(refreshManyLua), -1)

// MaxRefreshKeys is how many locks one call of the refresh script extends
// at most: a call runs on the server without interruption, two commands
// per lock, so that a large batch does not hold up the other clients'
// commands for long.
const MaxRefreshKeys = 100

// Refresh is one lock to extend in RefreshMany.
type Refresh struct {
	Key   string // the lock's key on the server
	Token string
	TTL   time.Duration
	// Kind is the hold's: a shared or permit hold is refreshed in its
	// key's hash of holders, an exclusive one on its key.
	Kind backend.Kind
}

// RefreshMany extends each lock only if the server still holds its token,
// in one pipeline of script calls that extend up to MaxRefreshKeys locks
// each: the locks that one call may name together (c.KeyGroup) are
// gathered, so that N locks on one server cost about N/100 calls in one
// round trip, not N. Holds of every kind go in one call. It returns, per
// lock, 1 when extended, 0 when the key no longer holds its token, or the
// error of its call.
func RefreshMany(ctx context.Context, c Conn, locks []Refresh) []Reply {
	type chunk struct {
		call  Call
		kinds []byte // per lock of the call: 'x' exclusive, 'h' in a hash
		idx   []int  // the locks of the call, in its order
	}
	var chunks []*chunk
	open := make(map[int]*chunk) // by key group: the chunk being filled
	for i, l := range locks {
		g, together := c.KeyGroup(l.Key)
		ch := open[g]
		if !together || ch == nil || len(ch.idx) == MaxRefreshKeys {
			ch = &chunk{call: Call{Args: []any{nil}}}
			chunks = append(chunks, ch)
			if together {
				open[g] = ch
			}
		}
		kind := byte('x')
		if l.Kind != backend.Exclusive {
			kind = 'h'
		}
		ch.kinds = append(ch.kinds, kind)
		ch.call.Keys = append(ch.call.Keys, l.Key)
		ch.call.Args = append(ch.call.Args, l.Token, Millis(l.TTL))
		ch.idx = append(ch.idx, i)
	}
	calls := make([]Call, len(chunks))
	for i, ch := range chunks {
		ch.call.Args[0] = string(ch.kinds)
		calls[i] = ch.call
	}
	out := make([]Reply, len(locks))
	for j, r := range c.EvalMany(ctx, refreshManyScript, calls) {
		ch := chunks[j]
		vals, ok := r.Val.([]any)
		if r.Err == nil && (!ok || len(vals) != len(ch.idx)) {
			r.Err = fmt.Errorf("redis: unexpected reply %T(%v) to a refresh of %d locks", r.Val, r.Val, len(ch.idx))
		}
		for k, i := range ch.idx {
			if r.Err != nil {
				out[i].Err = r.Err
				continue
			}
			out[i].Val = vals[k]
		}
	}
	return out
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of its hash tag (the part between the first { and the next },
// if not empty), modulo 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
