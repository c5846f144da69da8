package locker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
	"github.com/distlock/locker/memory"
)

// goneDriver is the memory driver whose refreshes find every lock gone,
// as a refresh does after another client took the lock over.
type goneDriver struct{ *memstore.Driver }

type goneHeld struct{ backend.Held }

func (h goneHeld) Refresh(context.Context, time.Duration) error {
	return fmt.Errorf("%w: someone else holds it now", backend.ErrNotHeld)
}

func (d goneDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	acq.Held = goneHeld{acq.Held}
	return acq, err
}

// TestErrTellsWhy: Err is nil while the lock is held, and names the cause
// once Lost is closed.
func TestErrTellsWhy(t *testing.T) {
	ctx := context.Background()
	l := memory.New(nil)
	defer l.Close()

	lk, err := l.Acquire(ctx, "released")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Err(); err != nil {
		t.Fatalf("Err while held = %v, want nil", err)
	}
	lk.Release(ctx)
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, locker.ErrReleased) {
		t.Errorf("Err after Release = %v, want ErrNotHeld and ErrReleased", err)
	}

	lk, err = l.Acquire(ctx, "expired", locker.WithTTL(50*time.Millisecond), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	<-lk.Lost()
	if err := lk.Err(); !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, locker.ErrExpired) {
		t.Errorf("Err after the validity ran out = %v, want ErrNotHeld and ErrExpired", err)
	}

	g := locker.New(goneDriver{memstore.NewDriver(memstore.NewStore())}, nil)
	defer g.Close()
	lk, err = g.TryAcquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Refresh(ctx, time.Second); err == nil {
		t.Fatal("Refresh of a lock someone else holds succeeded")
	}
	err = lk.Err()
	if !errors.Is(err, locker.ErrNotHeld) || !strings.Contains(err.Error(), "a refresh found it gone") ||
		errors.Is(err, locker.ErrExpired) || errors.Is(err, locker.ErrReleased) {
		t.Errorf("Err after a refresh found the lock gone = %v", err)
	}
}

// TestMaxHold: the watchdog stops refreshing a lock WithMaxHold after the
// bound, the lock lapses at the end of its last refresh, and Err says why.
// Without the bound the same lock stays held.
func TestMaxHold(t *testing.T) {
	ctx := context.Background()
	l := memory.New(nil)
	defer l.Close()
	const ttl, maxHold = 300 * time.Millisecond, 250 * time.Millisecond
	start := time.Now()
	bounded, err := l.Acquire(ctx, "bounded", locker.WithTTL(ttl), locker.WithMaxHold(maxHold))
	if err != nil {
		t.Fatal(err)
	}
	free, err := l.Acquire(ctx, "free", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-bounded.Lost():
	case <-time.After(time.Minute):
		t.Fatal("a lock WithMaxHold is still held after a minute")
	}
	if err := bounded.Err(); !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, locker.ErrMaxHold) {
		t.Errorf("Err = %v, want ErrNotHeld and ErrMaxHold", err)
	}
	if held := bounded.Until().Sub(start); held > maxHold+ttl {
		t.Errorf("held for %v, more than the maximum hold plus a TTL (%v)", held, maxHold+ttl)
	}
	if err := free.Err(); err != nil {
		t.Errorf("the lock without a maximum hold: %v, want still held", err)
	}
	// A new holder can take the key once it lapsed (the store keeps it
	// for the drift allowance after Lost closed).
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lk, err := l.Acquire(actx, "bounded")
	if err != nil {
		t.Fatalf("TryAcquire after the maximum hold ran out: %v", err)
	}
	lk.Release(ctx)

	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := l.TryAcquire(ctx, "k", locker.WithMaxHold(d)); err == nil || !strings.Contains(err.Error(), "WithMaxHold") {
			t.Errorf("WithMaxHold(%v): %v, want an error naming WithMaxHold", d, err)
		}
	}
}

// TestNilInputs: every nil a caller can pass is an error that says so,
// never a panic.
func TestNilInputs(t *testing.T) {
	ctx := context.Background()
	var nilCtx context.Context
	//nolint:staticcheck // a nil context is the point
	nl := locker.New(nil, nil)
	if _, err := nl.Acquire(ctx, "k"); err == nil || !strings.Contains(err.Error(), "nil driver") {
		t.Errorf("New(nil, nil).Acquire: %v, want an error naming the nil driver", err)
	}
	if err := nl.Close(); err != nil {
		t.Errorf("New(nil, nil).Close: %v", err)
	}
	l := memory.New(nil)
	defer l.Close()
	wantNil := func(what string, err error, word string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), word) {
			t.Errorf("%s: %v, want an error naming %q", what, err, word)
		}
	}
	_, err := l.Acquire(nilCtx, "k")
	wantNil("Acquire(nil ctx)", err, "nil context")
	_, err = l.TryAcquire(nilCtx, "k")
	wantNil("TryAcquire(nil ctx)", err, "nil context")
	_, err = l.Acquire(ctx, "k", nil)
	wantNil("Acquire with a nil Option", err, "nil")
	wantNil("Do(nil fn)", locker.Do(ctx, l, "k", nil), "nil fn")
	wantNil("Do(nil Locker)", locker.Do(ctx, nil, "k", func(context.Context, locker.Lock) error { return nil }), "nil Locker")
	wantNil("Do(nil ctx)", locker.Do(nilCtx, l, "k", func(context.Context, locker.Lock) error { return nil }), "nil context")
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wantNil("Refresh(nil ctx)", lk.Refresh(nilCtx, time.Second), "nil context")
	_, err = lk.TTL(nilCtx)
	wantNil("TTL(nil ctx)", err, "nil context")
	wantNil("Release(nil ctx)", lk.Release(nilCtx), "nil context")
	if err := lk.Release(ctx); err != nil {
		t.Errorf("Release after the nil-context calls: %v", err)
	}
	_, err = locker.Open(nilCtx, "memory://")
	wantNil("Open(nil ctx)", err, "nil context")
	_, err = locker.Open(ctx, "memory://", nil)
	wantNil("Open with a nil option", err, "nil")
	wantNil("CheckConfig(nil driver)", locker.CheckConfig(nil, nil), "nil driver")
	d := memstore.NewDriver(memstore.NewStore())
	wantNil("CheckConfig with a nil default", locker.CheckConfig(d, &locker.Config{Defaults: []locker.Option{nil}}), "nil Option")
}

// TestOpenChecksDefaultTTL: a default TTL outside the backend's range fails
// Open, naming the range, rather than every Acquire.
func TestOpenChecksDefaultTTL(t *testing.T) {
	ctx := context.Background()
	_, err := locker.Open(ctx, "memory://?ttl=1ms")
	if err == nil || !errors.Is(err, locker.ErrInvalidTTL) || !strings.Contains(err.Error(), "minimum of 5ms") {
		t.Errorf("Open(memory://?ttl=1ms) = %v, want ErrInvalidTTL naming the 5ms minimum", err)
	}
	l, err := locker.Open(ctx, "memory://?ttl=10ms")
	if err != nil {
		t.Fatalf("Open(memory://?ttl=10ms): %v", err)
	}
	l.Close()
	d := memstore.NewDriver(memstore.NewStore())
	if err := locker.CheckConfig(d, &locker.Config{Defaults: []locker.Option{locker.WithTTL(time.Millisecond)}}); !errors.Is(err, locker.ErrInvalidTTL) {
		t.Errorf("CheckConfig with a 1ms default TTL = %v, want ErrInvalidTTL", err)
	}
}

func TestCapabilitiesString(t *testing.T) {
	for _, tc := range []struct {
		caps locker.Capabilities
		want []string
	}{
		{locker.Capabilities{Fencing: true, MinTTL: 5 * time.Millisecond}, []string{"fencing", "TTL 5ms to no limit", "keys up to 1024 bytes"}},
		{locker.Capabilities{WakeOnRelease: true, MinTTL: 2 * time.Second, MaxTTL: 2500000 * time.Hour, ExpirySlack: time.Second}, []string{"wake-on-release", "TTL 2s to no limit", "expiry slack 1s"}},
		{locker.Capabilities{MaxKeyLen: 200, MinTTL: 400 * time.Millisecond, MaxTTL: time.Minute}, []string{"no fencing", "keys up to 200 bytes", "TTL 400ms to 1m0s"}},
	} {
		s := tc.caps.String()
		for _, w := range tc.want {
			if !strings.Contains(s, w) {
				t.Errorf("%+v.String() = %q, want it to contain %q", tc.caps, s, w)
			}
		}
	}
}

// TestOpenRedactsPasswords: a password, in the user part or in a query
// parameter, never appears in Open's errors.
func TestOpenRedactsPasswords(t *testing.T) {
	for _, raw := range []string{
		"memory://u:s3cret@x?ttl=bogus",
		"memory://x?sentinel_password=s3cret&ttl=bogus",
		"nosuch://u:s3cret@h?sentinel_password=s3cret",
	} {
		_, err := locker.Open(context.Background(), raw)
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %v, want an error without the password", raw, err)
		}
	}
}

// TestRedact: what Redact shows of a URL keeps everything but passwords,
// and reads as a URL of the same scheme: memory:// keeps its "//", which
// net/url drops from a URL with neither host nor path. Open's errors show
// the URL the same way.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://u:s3cret@h1:6379,h2/0?ttl=5s":              "redis://u:xxxxx@h1:6379,h2/0?ttl=5s",
		"redis+sentinel://s1,s2/m?sentinel_password=s3cret": "redis+sentinel://s1,s2/m?sentinel_password=xxxxx",
		"etcd://h:2379/ns":                                  "etcd://h:2379/ns",
		"zookeeper://u:s3cret@h:2181:x/p":                   "zookeeper://(malformed URL)",
		"redis://:s3cret@h":                                 "redis://:xxxxx@h",
		"REDIS://:s3cret@h":                                 "redis://:xxxxx@h",
		"redlock://h1,h2,h3?ttl=1s":                         "redlock://h1,h2,h3?ttl=1s",
		"memory://":                                         "memory://",
		"memory://?ttl=5s":                                  "memory://?ttl=5s",
		"memory://name":                                     "memory://name",
		"memory:///p":                                       "memory:///p",
	} {
		if got := locker.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
	_, err := locker.Open(context.Background(), "memory://?ttl=0s")
	if err == nil || !strings.Contains(err.Error(), `"memory://?ttl=0s"`) {
		t.Errorf(`Open("memory://?ttl=0s") = %v, want an error that shows the URL as given`, err)
	}
}

// TestURLHostPorts: a host without a port gets the backend's default
// port; IPv6 addresses keep their brackets; empty and malformed hosts are
// errors that name them.
func TestURLHostPorts(t *testing.T) {
	type result struct {
		hosts []string
		err   error
	}
	got := make(chan result, 1)
	locker.Register("test-hostports", func(ctx context.Context, u *locker.URL) (locker.Locker, error) {
		hosts, err := u.HostPorts("1234")
		got <- result{hosts, err}
		return nil, errors.New("not a backend")
	})
	for _, tc := range []struct {
		url, want, err string
	}{
		{url: "test-hostports://h", want: "h:1234"},
		{url: "test-hostports://h:99,k", want: "h:99 k:1234"},
		{url: "test-hostports://[::1],[::1]:5", want: "[::1]:1234 [::1]:5"},
		{url: "test-hostports://", err: "no host"},
		{url: "test-hostports://h,,k", err: `empty host in "h,,k"`},
		{url: "test-hostports://h:", err: `host "h:"`},
	} {
		_, openErr := locker.Open(context.Background(), tc.url)
		var r result
		select {
		case r = <-got:
		default:
			r.err = openErr // Open refused the URL before the Opener saw it
		}
		if tc.err != "" {
			if r.err == nil || !strings.Contains(r.err.Error(), tc.err) {
				t.Errorf("HostPorts of %s = %q, %v; want an error with %q", tc.url, r.hosts, r.err, tc.err)
			}
			continue
		}
		if r.err != nil || strings.Join(r.hosts, " ") != tc.want {
			t.Errorf("HostPorts of %s = %q, %v; want %s", tc.url, r.hosts, r.err, tc.want)
		}
	}
}
