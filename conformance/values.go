package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/distlock/locker"
)

// The case about values stored with holds (locker.WithValue,
// Lock.SetValue), which Inspect reports and elections are built on. It
// runs where the backend stores values (Capabilities.MaxValueLen > 0)
// and can inspect keys, and is skipped, naming what is missing, where it
// cannot.

// skipUnlessValues skips the case unless the backend stores values with
// its holds.
func skipUnlessValues(t *T) {
	if t.Capabilities().MaxValueLen <= 0 {
		t.Skipf("the backend stores no values with its holds (Capabilities().MaxValueLen is 0)")
	}
}

// skipUnlessInspector skips the case unless l's backend can inspect keys:
// locker.Inspect, which Election.Leader and Election.Observe read.
func skipUnlessInspector(t *T, l locker.Locker) {
	_, err := locker.Inspect(t.ctx, l, t.Key("inspect-probe"))
	switch {
	case errors.Is(err, locker.ErrUnsupported):
		t.Skipf("the backend cannot inspect keys (locker.Inspect: %v)", err)
	case err != nil:
		t.Fatalf("inspecting a free key: %v", err)
	}
}

// value returns s as a hold's value where the backend stores values, and
// nil (no value) where it does not, for the cases that campaign either
// way.
func (t *T) value(s string) []byte {
	if t.Capabilities().MaxValueLen <= 0 {
		return nil
	}
	return []byte(s)
}

// valueProbeMax bounds the longest value the values case stores: a
// backend that claims more is checked up to this length.
const valueProbeMax = 1 << 20

// valueText quotes v for a message, cut short when it is long.
func valueText(v []byte) string {
	if v == nil {
		return "none"
	}
	const show = 40
	if len(v) <= show {
		return strconv.Quote(string(v))
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(string(v[:show])), len(v))
}

// wantValue checks that l's servers report want as the value of key's
// first hold, lk, both in Holder.Value and in Holder.Holds[0]; why says
// what happened just before.
func (t *T) wantValue(l locker.Locker, key string, lk locker.Lock, want []byte, why string) {
	h, err := locker.Inspect(t.ctx, l, key)
	switch {
	case err != nil:
		t.Fatalf("%s: Inspect(%s): %v", why, keyText(key), err)
	case !h.Held || len(h.Holds) == 0:
		t.Fatalf("%s: Inspect(%s) reports the key free, want it held with the value %s", why, keyText(key), valueText(want))
	case h.Token != "" && h.Token != lk.Token():
		t.Fatalf("%s: Inspect(%s) reports the holder's token %q, want %q", why, keyText(key), h.Token, lk.Token())
	}
	if !bytes.Equal(h.Value, want) {
		t.Errorf("%s: Inspect(%s) reports the value %s, want %s", why, keyText(key), valueText(h.Value), valueText(want))
	}
	if !bytes.Equal(h.Holds[0].Value, want) {
		t.Errorf("%s: Inspect(%s) reports the value %s in Holds[0], want %s", why, keyText(key), valueText(h.Holds[0].Value), valueText(want))
	}
}

func caseValues(t *T) {
	skipUnlessValues(t)
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	skipUnlessInspector(t, b)
	long := locker.WithTTL(t.LongTTL())
	key := t.Key("k")

	// Bytes, not text: a NUL, a byte that is no UTF-8, a multi-byte rune.
	v1 := []byte("v1\x00\xff∂")
	lk := t.TryAcquire(a, key, locker.WithValue(v1), long)
	t.wantValue(b, key, lk, v1, "acquired with a value")
	if err := lk.SetValue(t.ctx, []byte("v2")); err != nil {
		t.Fatalf("SetValue by the holder: %v", err)
	}
	t.wantValue(b, key, lk, []byte("v2"), "SetValue replaced the value")

	maxLen := t.Capabilities().MaxValueLen
	longest := bytes.Repeat([]byte("0123456789abcdef"), min(maxLen, valueProbeMax)/16+1)[:min(maxLen, valueProbeMax)]
	if err := lk.SetValue(t.ctx, longest); err != nil {
		t.Fatalf("SetValue of %d bytes (Capabilities().MaxValueLen is %d): %v", len(longest), maxLen, err)
	}
	t.wantValue(b, key, lk, longest, fmt.Sprintf("SetValue of %d bytes, the longest the backend claims to store", len(longest)))
	if maxLen < valueProbeMax {
		over := make([]byte, maxLen+1)
		t.WantErr(lk.SetValue(t.ctx, over), locker.ErrInvalidValue, fmt.Sprintf("SetValue of %d bytes, one more than Capabilities().MaxValueLen", len(over)))
		t.wantValue(b, key, lk, longest, "a refused SetValue")
		other, err := c.TryAcquire(t.ctx, t.Key("over"), locker.WithValue(over), long)
		if err == nil {
			other.Release(t.ctx)
		}
		t.WantErr(err, locker.ErrInvalidValue, fmt.Sprintf("TryAcquire with a value of %d bytes, one more than Capabilities().MaxValueLen", len(over)))
	}
	if err := lk.SetValue(t.ctx, nil); err != nil {
		t.Fatalf("SetValue of an empty value (which removes it): %v", err)
	}
	t.wantValue(b, key, lk, nil, "SetValue of an empty value removed it")
	t.Release(lk)

	if t.Capabilities().Shared {
		sharedValues(t, a, b, c)
	}
	staleSetValue(t, a, b, c)
}

// sharedValues checks that Inspect reports the value of each of a key's
// shared holders.
func sharedValues(t *T, a, b, c locker.Locker) {
	key := t.Key("shared")
	reader := func(v string) []locker.Option {
		return []locker.Option{locker.Shared(), locker.WithTTL(t.LongTTL()), locker.WithValue([]byte(v))}
	}
	r1 := t.TryAcquire(a, key, reader("reader 1")...)
	r2 := t.TryAcquire(b, key, reader("reader 2")...)
	h, err := locker.Inspect(t.ctx, c, key)
	if err != nil {
		t.Fatalf("Inspect(%s) with two shared holders: %v", keyText(key), err)
	}
	var got []string
	for _, hd := range h.Holds {
		got = append(got, string(hd.Value))
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"reader 1", "reader 2"}) {
		t.Errorf("Inspect(%s) reports the values %q of two shared holders whose values are \"reader 1\" and \"reader 2\"", keyText(key), got)
	}
	t.Release(r1)
	t.Release(r2)
}

// staleSetValue makes a holder stale on the servers while it still
// believes it holds the key: the key is released by force (as an
// operator does) and taken by another client. A lock whose validity ran
// out would not do: its holder's Locker refuses SetValue by itself once
// Lost closed, without asking the servers, while after a release by
// force most backends' holders learn of it only at their next refresh,
// so the SetValue reaches the servers, which must refuse it.
func staleSetValue(t *T, a, b, c locker.Locker) {
	key := t.Key("stale")
	stale := t.TryAcquire(a, key, locker.WithValue([]byte("A")), locker.WithTTL(t.LongTTL()), locker.WithAutoRefresh(false))
	// An error beside released (a Redlock node that cannot be reached)
	// leaves the lock released where it counts.
	if released, err := locker.ForceRelease(t.ctx, c, key); !released {
		t.Fatalf("ForceRelease(%s) of A's lock = false, %v; want true", keyText(key), err)
	}
	fresh := t.AcquireWithin(b, key, t.LongTTL()/2, "A's lock was released by force", locker.WithValue([]byte("B")))
	t.WantErr(stale.SetValue(t.ctx, []byte("stale A")), locker.ErrNotHeld,
		"SetValue by A, whose lock was released by force and the key taken by B")
	t.wantValue(c, key, fresh, []byte("B"), "A, whose lock was released by force, called SetValue after B took the key")
	t.Release(fresh)
}
