package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/testenv"
)

// libraries open a Conn to the server at addr through each client
// library, by the library's name.
var libraries = map[string]func(addr string) Conn{
	"goredis": func(addr string) Conn { return NewGoRedis(goredis.NewClient(&goredis.Options{Addr: addr}), true) },
	"redigo": func(addr string) Conn {
		return NewRedigo(&redigo.Pool{Dial: func() (redigo.Conn, error) { return redigo.Dial("tcp", addr) }}, true)
	},
}

// eachLibrary runs f on a Conn of each client library to the test server,
// with a fresh key (and its fence counter's name) that f's end deletes.
func eachLibrary(t *testing.T, f func(t *testing.T, c Conn, key, fenceKey string)) {
	u, err := url.Parse(testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range libraries {
		t.Run(name, func(t *testing.T) {
			c := open(u.Host)
			defer c.Close()
			key := fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
			fenceKey := key + ":fence"
			defer c.Eval(context.Background(), NewScript("del", "return redis.call('DEL', KEYS[1], KEYS[2])", 2), []string{key, fenceKey})
			f(t, c, key, fenceKey)
		})
	}
}

var (
	shared = backend.Claim{Kind: backend.Shared}
	// raw runs a command through a script, for what the Conn does not offer.
	raw = NewScript("raw", "return redis.call(unpack(ARGV))", -1)
)

// permits is a Permit claim of weight w of limit n.
func permits(n, w int) backend.Claim { return backend.Claim{Kind: backend.Permit, Limit: n, Weight: w} }

// mustHold runs Hold and fails the test on an error.
func mustHold(t *testing.T, c Conn, r HoldRequest) Grant {
	t.Helper()
	g, err := Hold(context.Background(), c, r)
	if err != nil {
		t.Fatalf("Hold(%s, %+v): %v", r.Token, r.Claim, err)
	}
	return g
}

// evalInt runs s and fails the test on an error.
func evalInt(t *testing.T, c Conn, s *Script, key string, args ...any) int64 {
	t.Helper()
	n, err := EvalInt(context.Background(), c, s, []string{key}, args...)
	if err != nil {
		t.Fatalf("%s: %v", s.name, err)
	}
	return n
}

// holders returns the tokens of key's live holders.
func holders(t *testing.T, c Conn, key string) map[string]HoldState {
	t.Helper()
	st, err := InspectKey(context.Background(), c, key, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]HoldState{}
	for _, h := range st.Holds {
		out[h.Token] = h
	}
	return out
}

// TestHoldShared: shared holds coexist, each with a fence larger than the
// last; an exclusive Take is refused for as long as the soonest of them
// has left, and a permit is a mismatch; a retry of a hold finds it with
// its fence; one holder's shorter refresh leaves the others' TTL and the
// key's alone; release takes one holder out, publishes, and the last one
// deletes the key.
func TestHoldShared(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		req := func(token string, ttl time.Duration) HoldRequest {
			return HoldRequest{Key: key, Token: token, TTL: ttl, Claim: shared, FenceKey: fenceKey, FenceLife: time.Hour}
		}
		a := mustHold(t, c, req("a", 30*time.Second))
		b := mustHold(t, c, req("b", time.Minute))
		if !a.Taken || !b.Taken || a.Fence == 0 || b.Fence <= a.Fence {
			t.Fatalf("two shared holds: %+v, %+v; want both taken, with increasing fences", a, b)
		}
		if pttl := evalInt(t, c, raw, key, "PTTL", key); pttl <= 30000 || pttl > 60000 {
			t.Errorf("the key's PTTL with holders of 30s and 1m = %d ms, want the latest, in (30000, 60000]", pttl)
		}

		g, err := Take(ctx, c, key, "w", time.Minute)
		if err != nil || g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > 30*time.Second {
			t.Errorf("Take of a key of shared holds = %+v, %v; want busy until the soonest holder expires, in (0, 30s]", g, err)
		}
		g = mustHold(t, c, HoldRequest{Key: key, Token: "p", TTL: time.Minute, Claim: permits(2, 1)})
		if want := (backend.Mismatch{HeldKind: backend.Shared, Kind: backend.Permit, Limit: 2}); g.Taken || g.Mismatch == nil || *g.Mismatch != want {
			t.Errorf("a permit on a key of shared holds = %+v, want the mismatch %+v", g, want)
		}

		// The first reply lost: the same request again.
		if again := mustHold(t, c, req("a", 30*time.Second)); !again.Taken || again.Fence != a.Fence {
			t.Errorf("hold a again = %+v, want it taken with its fence %d", again, a.Fence)
		}
		if hs := holders(t, c, key); len(hs) != 2 {
			t.Errorf("holders after a retry: %v, want a and b", hs)
		}

		if n := evalInt(t, c, HoldRefreshScript, key, "a", 1000); n != 1 {
			t.Fatalf("refresh of a = %d, want 1", n)
		}
		if ms := evalInt(t, c, HoldPTTLScript, key, "b"); ms <= 50000 {
			t.Errorf("b's TTL after a refreshed itself to 1s = %d ms, want about a minute", ms)
		}
		if ms := evalInt(t, c, HoldPTTLScript, key, "a"); ms <= 0 || ms > 1000 {
			t.Errorf("a's TTL after its refresh to 1s = %d ms, want (0, 1000]", ms)
		}
		if pttl := evalInt(t, c, raw, key, "PTTL", key); pttl <= 50000 {
			t.Errorf("the key's PTTL after a refreshed itself to 1s = %d ms, want b's, about a minute", pttl)
		}

		if n := evalInt(t, c, HoldReleaseScript, key, "a", key+":released"); n != 1 {
			t.Fatalf("release of a = %d, want 1", n)
		}
		if n := evalInt(t, c, HoldReleaseScript, key, "a", key+":released"); n != 0 {
			t.Errorf("second release of a = %d, want 0", n)
		}
		if hs := holders(t, c, key); len(hs) != 1 || hs["b"].Token != "b" || hs["b"].Fence != b.Fence {
			t.Errorf("holders after a's release: %v, want b alone, with fence %d", hs, b.Fence)
		}
		if n := evalInt(t, c, HoldReleaseScript, key, "b", key+":released"); n != 1 {
			t.Fatalf("release of b = %d, want 1", n)
		}
		if n := evalInt(t, c, raw, key, "EXISTS", key); n != 0 {
			t.Errorf("the key after its last holder's release: EXISTS = %d, want 0", n)
		}
		if g, err := Take(ctx, c, key, "w", time.Minute); err != nil || !g.Taken {
			t.Errorf("Take after the last shared holder left = %+v, %v; want taken", g, err)
		}
	})
}

// TestHoldPermits: a semaphore's holds take their weights of its limit, a
// request that does not fit is refused for as long as the soonest holder
// has left, a retry of a hold finds it even when the key is full, and
// every other family is a mismatch.
func TestHoldPermits(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		req := func(token string, claim backend.Claim) HoldRequest {
			return HoldRequest{Key: key, Token: token, TTL: time.Minute, Claim: claim, FenceKey: fenceKey, FenceLife: time.Hour}
		}
		x := mustHold(t, c, req("x", permits(3, 2)))
		y := mustHold(t, c, req("y", permits(3, 1)))
		if !x.Taken || !y.Taken || y.Fence <= x.Fence {
			t.Fatalf("permits of weight 2 and 1 of 3: %+v, %+v; want both taken, with increasing fences", x, y)
		}
		if g := mustHold(t, c, req("z", permits(3, 1))); g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
			t.Errorf("a fourth permit of 3 = %+v, want busy until the soonest holder expires, in (0, 1m]", g)
		}
		if g := mustHold(t, c, req("x", permits(3, 2))); !g.Taken || g.Fence != x.Fence {
			t.Errorf("x again on a full key = %+v, want its hold, with fence %d", g, x.Fence)
		}
		for _, tc := range []struct {
			claim backend.Claim
			want  backend.Mismatch
		}{
			{shared, backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 3, Kind: backend.Shared}},
			{permits(4, 1), backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 3, Kind: backend.Permit, Limit: 4}},
		} {
			if g := mustHold(t, c, req("m", tc.claim)); g.Taken || g.Mismatch == nil || *g.Mismatch != tc.want {
				t.Errorf("Hold %+v on a semaphore of 3 = %+v, want the mismatch %+v", tc.claim, g, tc.want)
			}
		}
		g, err := Take(ctx, c, key, "w", time.Minute)
		if want := (backend.Mismatch{HeldKind: backend.Permit, HeldLimit: 3}); err != nil || g.Taken || g.Mismatch == nil || *g.Mismatch != want {
			t.Errorf("Take of a semaphore's key = %+v, %v; want the mismatch %+v", g, err, want)
		}
		if !errors.Is(g.Mismatch, backend.ErrKindMismatch) {
			t.Errorf("the mismatch %v is not ErrKindMismatch", g.Mismatch)
		}
		if hs := holders(t, c, key); len(hs) != 2 || hs["x"].Weight != 2 || hs["y"].Weight != 1 {
			t.Errorf("holders: %v, want x of weight 2 and y of weight 1", hs)
		}
		if n := evalInt(t, c, HoldReleaseScript, key, "y", key+":released"); n != 1 {
			t.Fatalf("release of y = %d, want 1", n)
		}
		if g := mustHold(t, c, req("z", permits(3, 1))); !g.Taken || g.Fence <= y.Fence {
			t.Errorf("z once y left = %+v, want taken with a fence above y's %d", g, y.Fence)
		}
	})
}

// TestHoldBesideExclusive: an exclusive holder keeps a shared hold out
// (busy for its TTL) and is a mismatch for a permit; the scripts of
// either kind find no hold of theirs in a key of the other kind, and
// touch nothing there.
func TestHoldBesideExclusive(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		if g, err := Take(ctx, c, key, "e", time.Minute); err != nil || !g.Taken {
			t.Fatalf("Take of a free key = %+v, %v", g, err)
		}
		if g := mustHold(t, c, HoldRequest{Key: key, Token: "s", TTL: time.Minute, Claim: shared}); g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
			t.Errorf("a shared hold beside an exclusive holder = %+v, want busy for the holder's TTL", g)
		}
		g := mustHold(t, c, HoldRequest{Key: key, Token: "p", TTL: time.Minute, Claim: permits(2, 1)})
		if want := (backend.Mismatch{HeldKind: backend.Exclusive, Kind: backend.Permit, Limit: 2}); g.Mismatch == nil || *g.Mismatch != want {
			t.Errorf("a permit beside an exclusive holder = %+v, want the mismatch %+v", g, want)
		}
		if n := evalInt(t, c, HoldReleaseScript, key, "e", key+":released"); n != 0 {
			t.Errorf("the shared release script on an exclusive key = %d, want 0", n)
		}
		if n := evalInt(t, c, HoldRefreshScript, key, "e", 1); n != 0 {
			t.Errorf("the shared refresh script on an exclusive key = %d, want 0", n)
		}
		if n := evalInt(t, c, HoldPTTLScript, key, "e"); n != -1 {
			t.Errorf("the shared TTL script on an exclusive key = %d, want -1", n)
		}
		if ms := evalInt(t, c, PTTLScript, key, "e"); ms <= 50000 {
			t.Errorf("the exclusive holder's TTL after the shared scripts = %d ms, want about a minute", ms)
		}
		if n := evalInt(t, c, ReleaseScript, key, "e", key+":released"); n != 1 {
			t.Fatalf("release of the exclusive holder = %d, want 1", n)
		}

		// Now a key of shared holds, which the exclusive scripts must
		// answer without an error.
		mustHold(t, c, HoldRequest{Key: key, Token: "s", TTL: time.Minute, Claim: shared})
		for _, tc := range []struct {
			s    *Script
			args []any
			want int64
		}{
			{ReleaseScript, []any{"s", key + ":released"}, 0},
			{RefreshScript, []any{"s", 1}, 0},
			{PTTLScript, []any{"s"}, -1},
		} {
			if n := evalInt(t, c, tc.s, key, tc.args...); n != tc.want {
				t.Errorf("%s on a key of shared holds = %d, want %d", tc.s.name, n, tc.want)
			}
		}
		if ms := evalInt(t, c, HoldPTTLScript, key, "s"); ms <= 50000 {
			t.Errorf("the shared holder's TTL after the exclusive scripts = %d ms, want about a minute", ms)
		}
	})
}

// TestHoldExpired: a holder whose expiry has passed holds nothing: its
// release and refresh find no hold, the others keep theirs, and a key
// whose every holder lapsed is free for an exclusive Take (the key's TTL
// normally deletes it; here it outlives them, as a TTL a millisecond
// longer than the holder's would).
func TestHoldExpired(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		req := func(token string, ttl time.Duration) HoldRequest {
			return HoldRequest{Key: key, Token: token, TTL: ttl, Claim: shared, FenceKey: fenceKey, FenceLife: time.Hour}
		}
		mustHold(t, c, req("short", 20*time.Millisecond))
		long := mustHold(t, c, req("long", time.Minute))
		testenv.WaitFor(t, 10*time.Second, "the short hold to expire", func() bool { return evalInt(t, c, HoldPTTLScript, key, "short") == -1 })
		if n := evalInt(t, c, HoldReleaseScript, key, "short", key+":released"); n != 0 {
			t.Errorf("release of an expired hold = %d, want 0", n)
		}
		if n := evalInt(t, c, HoldRefreshScript, key, "short", 60000); n != 0 {
			t.Errorf("refresh of an expired hold = %d, want 0", n)
		}
		if hs := holders(t, c, key); len(hs) != 1 || hs["long"].Fence != long.Fence || hs["long"].TTL <= 50*time.Second {
			t.Errorf("holders after the short one expired: %v, want the long one alone, intact", hs)
		}

		// Every holder lapsed, the key still there.
		if _, err := c.Eval(ctx, raw, []string{key}, "HSET", key, "t:long", "1 1 1"); err != nil {
			t.Fatal(err)
		}
		if g, err := Take(ctx, c, key, "w", time.Minute); err != nil || !g.Taken {
			t.Errorf("Take of a key whose holders all lapsed = %+v, %v; want taken", g, err)
		}
		if ms := evalInt(t, c, PTTLScript, key, "w"); ms <= 50000 {
			t.Errorf("the exclusive holder's TTL = %d ms, want about a minute", ms)
		}
	})
}

// TestHoldWithoutFence: without a fence counter (Redlock's nodes) a hold
// gets fence 0 and the counter is not created.
func TestHoldWithoutFence(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		g := mustHold(t, c, HoldRequest{Key: key, Token: "a", TTL: time.Minute, Claim: permits(2, 2)})
		if !g.Taken || g.Fence != 0 {
			t.Errorf("a hold without a counter = %+v, want taken with fence 0", g)
		}
		if n := evalInt(t, c, raw, key, "EXISTS", fenceKey); n != 0 {
			t.Errorf("the counter after a hold without one: EXISTS = %d, want 0", n)
		}
	})
}

// TestRefreshManyKinds: one batch extends exclusive, shared and permit
// holds together, each by its kind's rule, and reports those that are not
// ours any more.
func TestRefreshManyKinds(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, _ string) {
		ctx := context.Background()
		keys := []string{key + "/x", key + "/s", key + "/p", key + "/gone"}
		defer func() {
			for _, k := range keys {
				c.Eval(ctx, raw, []string{k}, "DEL", k)
			}
		}()
		if g, err := Take(ctx, c, keys[0], "x", time.Second); err != nil || !g.Taken {
			t.Fatal(g, err)
		}
		mustHold(t, c, HoldRequest{Key: keys[1], Token: "s", TTL: time.Second, Claim: shared})
		mustHold(t, c, HoldRequest{Key: keys[1], Token: "other", TTL: time.Second, Claim: shared})
		mustHold(t, c, HoldRequest{Key: keys[2], Token: "p", TTL: time.Second, Claim: permits(3, 2)})
		mustHold(t, c, HoldRequest{Key: keys[3], Token: "other", TTL: time.Minute, Claim: shared})
		replies := RefreshMany(ctx, c, []Refresh{
			{Key: keys[0], Token: "x", TTL: time.Minute},
			{Key: keys[1], Token: "s", TTL: time.Minute, Kind: backend.Shared},
			{Key: keys[2], Token: "p", TTL: time.Minute, Kind: backend.Permit},
			{Key: keys[3], Token: "gone", TTL: time.Minute, Kind: backend.Shared},
			{Key: keys[1], Token: "x", TTL: time.Minute}, // an exclusive refresh on a key of shared holds
		})
		for i, want := range []int64{1, 1, 1, 0, 0} {
			if r := replies[i]; r.Err != nil || r.Val != want {
				t.Errorf("refresh %d = %v, %v; want %d", i, r.Val, r.Err, want)
			}
		}
		for i, s := range []*Script{PTTLScript, HoldPTTLScript, HoldPTTLScript} {
			if ms := evalInt(t, c, s, keys[i], []string{"x", "s", "p"}[i]); ms <= 50000 {
				t.Errorf("%s after a 1m refresh: %d ms left", keys[i], ms)
			}
		}
		if ms := evalInt(t, c, HoldPTTLScript, keys[1], "other"); ms > 1000 {
			t.Errorf("the other shared holder after s's refresh: %d ms left, want its own second at most", ms)
		}
	})
}
