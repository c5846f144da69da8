package redisconn

import (
	"context"
	"testing"
	"time"
)

// TestTake runs Take on both client libraries against the server: a free
// key is taken; our own token already there counts as taken, with its
// TTL set afresh (a SET sent again after a broken connection); another's
// answers with its remaining TTL; a key without a TTL with 0.
func TestTake(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, _ string) {
		ctx := context.Background()
		if g, err := Take(ctx, c, key, "a", time.Second); err != nil || !g.Taken {
			t.Fatalf("Take of a free key = %+v, %v; want it taken", g, err)
		}
		if g, err := Take(ctx, c, key, "a", time.Minute); err != nil || !g.Taken {
			t.Fatalf("Take with the holder's own token = %+v, %v; want it taken", g, err)
		}
		if n := evalInt(t, c, PTTLScript, key, "a"); n <= time.Second.Milliseconds() {
			t.Fatalf("the key's TTL after Take with its own token = %d ms, want the new TTL (a minute)", n)
		}
		g, err := Take(ctx, c, key, "b", time.Minute)
		if err != nil || g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
			t.Fatalf("Take of a key another token holds = %+v, %v; want busy for its remaining TTL, in (0, 1m]", g, err)
		}
		evalInt(t, c, raw, key, "PERSIST", key)
		if g, err := Take(ctx, c, key, "b", time.Minute); err != nil || g.Taken || g.Mismatch != nil || g.Remaining != 0 {
			t.Fatalf("Take of a key without a TTL = %+v, %v; want busy for an unknown time", g, err)
		}
	})
}
