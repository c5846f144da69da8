package redisconn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/distlock/locker/backend"
)

// exclusive is the claim of an exclusive hold.
var exclusive = backend.Claim{Kind: backend.Exclusive}

// inspect returns key's state, with its fence counter.
func inspect(t *testing.T, c Conn, key, fenceKey string) KeyState {
	t.Helper()
	st, err := InspectKey(context.Background(), c, key, fenceKey)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// setValue runs SetValue and fails the test on an error.
func setValue(t *testing.T, c Conn, u ValueUpdate) bool {
	t.Helper()
	ok, err := SetValue(context.Background(), c, u)
	if err != nil {
		t.Fatalf("SetValue(%s, %q, version %d): %v", u.Token, u.Value, u.Version, err)
	}
	return ok
}

// TestValuedExclusive: an exclusive hold with a value is a hash of family
// exclusive, with its fence and its value (version 1); it excludes a
// mutex's SET NX (busy for its TTL, not a mismatch), another valued
// exclusive hold and shared holds, and is a mismatch for a permit; the
// exclusive scripts find it there, and SetValue replaces its value only
// with a later version. A mutex's string key is busy, not a mismatch, for
// a valued request.
func TestValuedExclusive(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		req := func(token string, claim backend.Claim) HoldRequest {
			return HoldRequest{Key: key, Token: token, TTL: time.Minute, Claim: claim, Value: []byte("v\x00" + token),
				FenceKey: fenceKey, FenceLife: time.Hour}
		}
		g := mustHold(t, c, req("e", exclusive))
		if !g.Taken || g.Fence == 0 {
			t.Fatalf("a valued exclusive hold of a free key = %+v, want taken with a fence", g)
		}
		st := inspect(t, c, key, fenceKey)
		if st.Token != "" || st.Kind != backend.Exclusive || len(st.Holds) != 1 {
			t.Fatalf("the key of a valued exclusive hold: %+v, want a hash of one exclusive holder", st)
		}
		if h := st.Holds[0]; h.Token != "e" || string(h.Value) != "v\x00e" || h.Version != 1 || h.Fence != g.Fence || st.Minter != "e" {
			t.Errorf("the valued holder: %+v (counter minted for %q); want token e, value %q version 1, fence %d", h, st.Minter, "v\x00e", g.Fence)
		}

		if g, err := Take(ctx, c, key, "m", time.Minute); err != nil || g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
			t.Errorf("Take (SET NX) beside a valued exclusive holder = %+v, %v; want busy for its TTL, in (0, 1m]", g, err)
		}
		for _, r := range []HoldRequest{req("x", exclusive), req("s", shared)} {
			if g := mustHold(t, c, r); g.Taken || g.Mismatch != nil || g.Remaining <= 0 || g.Remaining > time.Minute {
				t.Errorf("a %v hold beside a valued exclusive holder = %+v, want busy for its TTL", r.Claim.Kind, g)
			}
		}
		if g := mustHold(t, c, req("p", permits(2, 1))); g.Mismatch == nil || *g.Mismatch != (backend.Mismatch{HeldKind: backend.Exclusive, Kind: backend.Permit, Limit: 2}) {
			t.Errorf("a permit beside a valued exclusive holder = %+v, want a mismatch with an exclusive holder", g)
		}

		u := ValueUpdate{Key: key, Token: "e", Value: []byte("second"), Version: 3, Channel: key + ":changed"}
		if !setValue(t, c, u) {
			t.Fatal("SetValue by the holder = false, want true")
		}
		u.Value, u.Version = []byte("older"), 2
		if !setValue(t, c, u) {
			t.Error("SetValue of an older version by the holder = false, want true (the hold has a later one)")
		}
		if h := inspect(t, c, key, "").Holds[0]; string(h.Value) != "second" || h.Version != 3 {
			t.Errorf("after SetValue of version 3 and then 2: %q version %d, want %q version 3", h.Value, h.Version, "second")
		}
		if setValue(t, c, ValueUpdate{Key: key, Token: "x", Value: []byte("not mine"), Version: 9, Channel: key + ":changed"}) {
			t.Error("SetValue by another token = true, want false")
		}
		u.Value, u.Version = nil, 4
		setValue(t, c, u)
		if h := inspect(t, c, key, "").Holds[0]; h.Value != nil || h.Version != 4 {
			t.Errorf("after SetValue of an empty value: %q version %d, want none, version 4", h.Value, h.Version)
		}

		if n := evalInt(t, c, RefreshScript, key, "e", 5000); n != 1 {
			t.Errorf("the exclusive refresh script on a valued hold = %d, want 1", n)
		}
		if ms := evalInt(t, c, PTTLScript, key, "e"); ms <= 0 || ms > 5000 {
			t.Errorf("the exclusive TTL script after a refresh to 5s = %d, want (0, 5000]", ms)
		}
		if ms := evalInt(t, c, raw, key, "PTTL", key); ms <= 0 || ms > 5000 {
			t.Errorf("the key's PTTL after the holder's refresh to 5s = %d, want (0, 5000]", ms)
		}
		if n := evalInt(t, c, ReleaseScript, key, "x", key+":released"); n != 0 {
			t.Errorf("the exclusive release script of another token = %d, want 0", n)
		}
		if n := evalInt(t, c, ReleaseScript, key, "e", key+":released"); n != 1 {
			t.Fatalf("the exclusive release script of the valued holder = %d, want 1", n)
		}
		if n := evalInt(t, c, raw, key, "EXISTS", key); n != 0 {
			t.Errorf("the key after its valued holder's release: EXISTS = %d, want 0", n)
		}

		// A mutex's string key: a valued request waits for it.
		if g, err := Take(ctx, c, key, "m", time.Minute); err != nil || !g.Taken {
			t.Fatalf("Take of the free key = %+v, %v", g, err)
		}
		if g := mustHold(t, c, req("e", exclusive)); g.Taken || g.Mismatch != nil || g.Remaining <= 0 {
			t.Errorf("a valued exclusive hold beside a mutex's holder = %+v, want busy for its TTL", g)
		}
	})
}

// TestSetValueMovesMutex: a mutex's hold without a value, given one, moves
// into a hash of family exclusive with its TTL and the fence minted for
// it, and the exclusive scripts (release, refresh, TTL, the batched
// refresh, the acquire script's mint) go on finding it there; an empty
// value leaves the string key alone. A hash of shared holds is not an
// exclusive hold's: the exclusive scripts leave its holders alone.
func TestSetValueMovesMutex(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		if g, err := Take(ctx, c, key, "m", 40*time.Second); err != nil || !g.Taken {
			t.Fatalf("Take of a free key = %+v, %v", g, err)
		}
		if _, err := c.Eval(ctx, raw, []string{fenceKey}, "SET", fenceKey, "777 m"); err != nil {
			t.Fatal(err)
		}
		u := ValueUpdate{Key: key, Token: "m", Version: 2, FenceKey: fenceKey, Channel: key + ":changed"}
		if !setValue(t, c, u) {
			t.Fatal("SetValue of an empty value by the mutex's holder = false, want true")
		}
		if st := inspect(t, c, key, ""); st.Token != "m" {
			t.Fatalf("after SetValue of an empty value: %+v, want the string key of m", st)
		}
		u.Value = []byte("leader m")
		if !setValue(t, c, u) {
			t.Fatal("SetValue by the mutex's holder = false, want true")
		}
		st := inspect(t, c, key, fenceKey)
		if st.Token != "" || st.Kind != backend.Exclusive || len(st.Holds) != 1 {
			t.Fatalf("after SetValue of a value: %+v, want a hash of one exclusive holder", st)
		}
		if h := st.Holds[0]; h.Token != "m" || string(h.Value) != "leader m" || h.Fence != 777 || h.TTL <= 30*time.Second || h.TTL > 40*time.Second {
			t.Errorf("the moved hold: %+v; want m with the value %q, the fence 777 minted for it, and its TTL of about 40s", h, "leader m")
		}
		if n := evalInt(t, c, PTTLScript, key, "m"); n <= 30000 {
			t.Errorf("the exclusive TTL script on the moved hold = %d, want about 40000", n)
		}
		replies := RefreshMany(ctx, c, []Refresh{{Key: key, Token: "m", TTL: time.Minute, Kind: backend.Exclusive}})
		if replies[0].Err != nil || replies[0].Val != int64(1) {
			t.Errorf("the batched refresh of the moved hold = %+v, want 1", replies[0])
		}
		if n := evalInt(t, c, PTTLScript, key, "m"); n <= 50000 {
			t.Errorf("the moved hold's TTL after a batched refresh to 1m = %d, want about 60000", n)
		}
		if n := evalInt(t, c, ReleaseScript, key, "m", key+":released"); n != 1 {
			t.Fatalf("release of the moved hold = %d, want 1", n)
		}
		if n := evalInt(t, c, raw, key, "EXISTS", key); n != 0 {
			t.Errorf("the key after the release of the moved hold: EXISTS = %d, want 0", n)
		}
		if setValue(t, c, u) {
			t.Error("SetValue after the release = true, want false")
		}

		// A shared holder's token in a hash of shared holds is not an
		// exclusive hold's.
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
				t.Errorf("%s of a shared holder's token = %d, want %d", tc.s.name, n, tc.want)
			}
		}
		replies = RefreshMany(ctx, c, []Refresh{{Key: key, Token: "s", TTL: time.Millisecond, Kind: backend.Exclusive}})
		if replies[0].Err != nil || replies[0].Val != int64(0) {
			t.Errorf("the batched refresh of a shared holder's token as an exclusive hold = %+v, want 0", replies[0])
		}
		if ms := evalInt(t, c, HoldPTTLScript, key, "s"); ms <= 50000 {
			t.Errorf("the shared holder's TTL after the exclusive scripts = %d ms, want about a minute", ms)
		}
	})
}

// TestValuesOfHolds: shared and permit holds keep each their value, which
// their release removes with them, and a holder that lapsed leaves no
// value behind.
func TestValuesOfHolds(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, _ string) {
		for _, claim := range []backend.Claim{shared, permits(3, 1)} {
			for _, token := range []string{"a", "b"} {
				mustHold(t, c, HoldRequest{Key: key, Token: token, TTL: time.Minute, Claim: claim, Value: []byte("value of " + token)})
			}
			mustHold(t, c, HoldRequest{Key: key, Token: "short", TTL: time.Millisecond, Claim: claim, Value: []byte("lapses")})
			setValue(t, c, ValueUpdate{Key: key, Token: "b", Value: []byte("b again"), Version: 2, Channel: key + ":changed"})
			if n := evalInt(t, c, HoldReleaseScript, key, "a", key+":released"); n != 1 {
				t.Fatalf("%v: release of a = %d, want 1", claim.Kind, n)
			}
			// Any script that changes the key purges the holder that
			// lapsed; once its expiry has passed, a refresh does.
			testWait(t, func() bool { return evalInt(t, c, HoldPTTLScript, key, "short") == -1 })
			evalInt(t, c, HoldRefreshScript, key, "b", 60000)
			hs := holders(t, c, key)
			if len(hs) != 1 || string(hs["b"].Value) != "b again" {
				t.Errorf("%v: holders %+v, want b alone, with the value %q", claim.Kind, hs, "b again")
			}
			fields := evalInt(t, c, raw, key, "HLEN", key)
			if fields != 3 { // kind, t:b, v:b
				t.Errorf("%v: the hash has %d fields, want 3 (kind and b's two): a gone holder's value was left", claim.Kind, fields)
			}
			evalInt(t, c, HoldReleaseScript, key, "b", key+":released")
		}
	})
}

// testWait waits, up to a generous bound, for cond.
func testWait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestChangeNotices: the scripts publish on the key's channels what an
// observer watches (WatchEach of the release and change channels): a
// grant made by the hold script, a value set, a release; and a SET NX
// grant publishes nothing, which the next notice then covers.
func TestChangeNotices(t *testing.T) {
	eachLibrary(t, func(t *testing.T, c Conn, key, fenceKey string) {
		ctx := context.Background()
		n := NewNotifier(c, slog.New(slog.NewTextHandler(io.Discard, nil)))
		defer n.Close()
		released, changed := key+":released", key+":changed"
		events := make(chan struct{}, 1)
		stop, err := n.WatchEach(ctx, events, released, changed)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		notice := func(what string) {
			t.Helper()
			select {
			case <-events:
			case <-time.After(10 * time.Second):
				t.Fatalf("no notice within 10s after %s", what)
			}
		}
		for i, step := range []struct {
			what string
			do   func() error
		}{
			{"a valued exclusive grant", func() error {
				_, err := Hold(ctx, c, HoldRequest{Key: key, Token: "e", TTL: time.Minute, Claim: exclusive, Value: []byte("v"), FenceKey: fenceKey, FenceLife: time.Hour, Channel: changed})
				return err
			}},
			{"SetValue", func() error {
				_, err := SetValue(ctx, c, ValueUpdate{Key: key, Token: "e", Value: []byte("w"), Version: 2, Channel: changed})
				return err
			}},
			{"a release", func() error {
				_, err := EvalInt(ctx, c, ReleaseScript, []string{key}, "e", released)
				return err
			}},
			{"an empty SetValue of a mutex's hold (after a SET NX grant, which publishes nothing)", func() error {
				if _, err := Take(ctx, c, key, "m", time.Minute); err != nil {
					return err
				}
				_, err := SetValue(ctx, c, ValueUpdate{Key: key, Token: "m", Version: 2, Channel: changed})
				return err
			}},
			{"a release by force", func() error {
				_, err := ForceRelease(ctx, c, key, released)
				return err
			}},
		} {
			if err := step.do(); err != nil {
				t.Fatalf("step %d, %s: %v", i, step.what, err)
			}
			notice(fmt.Sprintf("step %d, %s", i, step.what))
		}
	})
}
