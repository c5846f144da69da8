package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/distlock/locker"
)

// Case is one check of the suite: a named row of the Report, or a subtest
// in Run, with the rule it checks. Harness.Cases adds cases of one's own
// to a run.
type Case struct {
	// Name names the case in the Report and as a subtest; it also goes
	// into the keys of T.Key. Short and lower-case, words joined by '-',
	// as the built-in cases' names are.
	Name string
	// Rule is the rule the case checks, as a sentence; a failure reports
	// it as the rule broken.
	Rule string
	// Func runs the case. It passes unless it calls Errorf, Fatalf or
	// FailNow, or panics; Skipf skips it.
	Func func(*T)
}

// T is the state of one running case, handed to its Func. Its methods may
// be called from any goroutine of the case; Fatalf, FailNow and Skipf end
// the calling goroutine only, so a case that starts goroutines waits for
// them before it returns.
//
// T has Errorf and FailNow, so the assertions of packages that accept
// any such value (testify's assert and require) work in a case.
type T struct {
	ctx  context.Context
	s    *suite
	name string

	mu       sync.Mutex
	failures []string
	skipped  string
	cleanups []func()
}

func (t *T) fail(msg string) {
	t.mu.Lock()
	t.failures = append(t.failures, msg)
	t.mu.Unlock()
}

// Errorf records a failure and goes on.
func (t *T) Errorf(format string, args ...any) { t.fail(fmt.Sprintf(format, args...)) }

// Fatalf records a failure and ends the calling goroutine.
func (t *T) Fatalf(format string, args ...any) {
	t.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// FailNow marks the case failed, if nothing has yet, and ends the calling
// goroutine.
func (t *T) FailNow() {
	t.mu.Lock()
	if len(t.failures) == 0 {
		t.failures = append(t.failures, "FailNow called")
	}
	t.mu.Unlock()
	runtime.Goexit()
}

// Skipf records why the case does not apply and ends it.
func (t *T) Skipf(format string, args ...any) {
	t.mu.Lock()
	t.skipped = fmt.Sprintf(format, args...)
	t.mu.Unlock()
	runtime.Goexit()
}

// Name returns the case's name.
func (t *T) Name() string { return t.name }

// Context returns the context every call of the case takes: it ends when
// the context given to Check does, or when the case runs out of its time
// budget, far longer than any case needs unless a lock never frees.
func (t *T) Context() context.Context { return t.ctx }

// Cleanup registers f to run once the case's Func has returned, the last
// registered first.
func (t *T) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

func (t *T) runCleanups() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Capabilities returns what the backend under test claims, as a client
// reported it when the run began.
func (t *T) Capabilities() locker.Capabilities { return t.s.caps }

// Client makes a new client of the deployment with Harness.NewClient,
// independent of every other, as a separate process is. It is closed when
// the case ends. If the harness cannot make one, the case fails and the
// calling goroutine ends.
func (t *T) Client() Client {
	c, err := t.s.h.NewClient(t.ctx)
	if err != nil {
		t.Fatalf("harness: cannot make a client: %v", err)
	}
	t.Cleanup(func() {
		c.Locker.Close()
		if c.Cleanup != nil {
			c.Cleanup()
		}
	})
	return c
}

// Locker makes a new client, as Client does, and returns its Locker.
func (t *T) Locker() locker.Locker { return t.Client().Locker }

// CrashableClient makes a new client, as Client does, whose Crash is set;
// if the harness cannot crash a client, it skips the case.
func (t *T) CrashableClient() Client {
	c := t.Client()
	if c.Crash == nil {
		t.Skipf("the harness cannot crash a client (Client.Crash is nil)")
	}
	return c
}

// Key returns a key unique to this run and case:
// "conformance/<run id>/<case name>/<suffix>".
func (t *T) Key(suffix string) string {
	return t.s.keyPrefix() + t.name + "/" + suffix
}

// TTL returns the harness's short TTL (Harness.TTL, or its default), for
// locks a case waits to expire.
func (t *T) TTL() time.Duration { return t.s.h.TTL }

// LongTTL returns a TTL no case waits out: when a case must tell an event
// caused by a release from one caused by expiry, the lock has this TTL.
func (t *T) LongTTL() time.Duration { return max(20*t.s.h.TTL, 10*time.Second) }

// ExpiryBound returns how long a lock with the given TTL may still block
// others after its holder stopped refreshing it: ttl +
// Capabilities().ExpirySlack + Harness.Slack.
func (t *T) ExpiryBound(ttl time.Duration) time.Duration {
	return ttl + t.s.caps.ExpirySlack + t.s.h.Slack
}

// Acquire takes key with l.Acquire, or fails the case and ends the calling
// goroutine.
func (t *T) Acquire(l locker.Locker, key string, opts ...locker.Option) locker.Lock {
	lk, err := l.Acquire(t.ctx, key, opts...)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", keyText(key), err)
	}
	return lk
}

// TryAcquire takes key, expected free, with l.TryAcquire, or fails the
// case and ends the calling goroutine.
func (t *T) TryAcquire(l locker.Locker, key string, opts ...locker.Option) locker.Lock {
	lk, err := l.TryAcquire(t.ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%s) on a free key: %v", keyText(key), err)
	}
	return lk
}

// AcquireWithin takes key with l.Acquire and a TTL of LongTTL within d, or
// fails the case, saying why the key should have been free by then, and
// ends the calling goroutine. opts follow the TTL: a kind of hold
// (locker.Shared, locker.Limit), or another TTL.
func (t *T) AcquireWithin(l locker.Locker, key string, d time.Duration, why string, opts ...locker.Option) locker.Lock {
	ctx, cancel := context.WithTimeout(t.ctx, d)
	defer cancel()
	lk, err := l.Acquire(ctx, key, append([]locker.Option{locker.WithTTL(t.LongTTL())}, opts...)...)
	if err != nil {
		t.Fatalf("%s: Acquire(%s) did not succeed within %v: %v", why, keyText(key), d, err)
	}
	return lk
}

// Release releases lk, or fails the case and ends the calling goroutine.
func (t *T) Release(lk locker.Lock) {
	if err := lk.Release(t.ctx); err != nil {
		t.Fatalf("Release(%s): %v", keyText(lk.Key()), err)
	}
}

// WantNotAcquired checks that l.TryAcquire(key) fails with ErrNotAcquired,
// or fails the case, saying why the key should be held, and ends the
// calling goroutine. opts follow a TTL of LongTTL: the kind of hold
// tried (locker.Shared, locker.Limit), an exclusive one without them.
func (t *T) WantNotAcquired(l locker.Locker, key, why string, opts ...locker.Option) {
	lk, err := l.TryAcquire(t.ctx, key, append([]locker.Option{locker.WithTTL(t.LongTTL())}, opts...)...)
	if err == nil {
		lk.Release(t.ctx)
		t.Fatalf("%s: TryAcquire(%s) succeeded while another client holds the key", why, keyText(key))
	}
	if !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("%s: TryAcquire(%s) = %v, want ErrNotAcquired", why, keyText(key), err)
	}
}

// WantErr records a failure unless errors.Is(err, target); what names the
// call that returned err.
func (t *T) WantErr(err, target error, what string) {
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// ClosedWithin reports whether ch is closed within d; it reports false at
// once if the case's context ends first.
func (t *T) ClosedWithin(ch <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	case <-t.ctx.Done():
		return false
	}
}

// keyText quotes key for a message, cut short when it is long: a key of
// a thousand bytes would bury what the message says. It shows the first
// 40 bytes (fewer if a character would be split) and the length.
func keyText(key string) string {
	const show = 40
	if len(key) <= 2*show {
		return strconv.Quote(key)
	}
	n := show
	for n > 0 && !utf8.RuneStart(key[n]) {
		n--
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(key[:n]), len(key))
}

// holderText says what l's servers report about key (locker.Inspect),
// for a message about a key that should be free: who holds it and for
// how long tells a lock that outlived its TTL from one taken again.
// It is "" when the backend cannot say.
func (t *T) holderText(l locker.Locker, key string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 2*time.Second)
	defer cancel()
	h, err := locker.Inspect(ctx, l, key)
	switch {
	case errors.Is(err, locker.ErrUnsupported):
		return ""
	case err != nil:
		return fmt.Sprintf("; inspecting it failed: %v", err)
	case !h.Held:
		return fmt.Sprintf("; the servers now report it free (%v)", h.Detail)
	}
	ttl := "unknown"
	if h.TTLKnown {
		ttl = h.TTL.String()
	}
	return fmt.Sprintf("; the servers report it held by token %q, TTL left %s (%v)", h.Token, ttl, h.Detail)
}

// keyPrefix is what the keys of the run start with.
func (s *suite) keyPrefix() string { return "conformance/" + s.runID + "/" }
