package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/locker"
)

// kindsKey is a key on a memory store of its own (memory://name), which
// lockctl run in this process by runApp opens too.
type kindsKey struct {
	t   *testing.T
	url string
	key string
	l   locker.Locker

	ctx     context.Context
	cancel  context.CancelFunc
	waiters sync.WaitGroup
}

func newKindsKey(t *testing.T) *kindsKey {
	t.Helper()
	url := fmt.Sprintf("memory://lockctl-inspect-%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	l, err := locker.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	k := &kindsKey{t: t, url: url, key: "orders/42", l: l, ctx: ctx, cancel: cancel}
	t.Cleanup(func() {
		cancel()
		k.waiters.Wait()
		l.Close()
	})
	return k
}

// hold takes the key with opts at once.
func (k *kindsKey) hold(opts ...locker.Option) locker.Lock {
	k.t.Helper()
	lk, err := k.l.TryAcquire(k.ctx, k.key, append(opts, locker.WithTTL(time.Minute))...)
	if err != nil {
		k.t.Fatalf("TryAcquire: %v", err)
	}
	return lk
}

// queue has a client wait for the key with opts, until the test ends,
// and returns once the store lists it among the waiters.
func (k *kindsKey) queue(opts ...locker.Option) {
	k.t.Helper()
	before := k.waiting()
	k.waiters.Go(func() {
		if lk, err := k.l.Acquire(k.ctx, k.key, opts...); err == nil {
			lk.Release(context.Background())
		}
	})
	waitFor(k.t, 30*time.Second, "the waiter queues", func() bool { return k.waiting() == before+1 })
}

func (k *kindsKey) waiting() int {
	h, err := locker.Inspect(k.ctx, k.l, k.key)
	if err != nil {
		k.t.Fatal(err)
	}
	return h.Waiters
}

// inspect runs lockctl inspect on the key, with --json or not.
func (k *kindsKey) inspect(asJSON bool) (inspectOutput, string) {
	k.t.Helper()
	args := []string{"inspect", "--url", k.url, k.key}
	if asJSON {
		args = append(args, "--json")
	}
	r := runApp(k.t, nil, args...)
	if r.code != 0 {
		k.t.Fatalf("lockctl %q: exit %d; stderr:\n%s", args, r.code, r.stderr)
	}
	var out inspectOutput
	if asJSON {
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			k.t.Fatalf("inspect --json: %v\n%s", err, r.stdout)
		}
	}
	return out, r.stdout
}

// wantHold checks that got describes the lock lk as a hold of kind.
func wantHold(t *testing.T, i int, got holdOutput, lk locker.Lock, kind string) {
	t.Helper()
	fence, _ := lk.Fence()
	if got.Kind != kind || got.Token != lk.Token() || got.Fence == nil || *got.Fence != fence || got.TTLMS == nil || *got.TTLMS <= 0 {
		t.Errorf("holder %d: %+v; want %s, token %s, fence %d and a TTL", i+1, got, kind, lk.Token(), fence)
	}
}

// TestInspectReadWrite: inspect lists both shared holders of a read lock
// with their tokens, fences and TTLs, and its waiters in queue order
// (a writer, then a reader held up behind it), in JSON and as text.
func TestInspectReadWrite(t *testing.T) {
	t.Parallel()
	k := newKindsKey(t)
	r1, r2 := k.hold(locker.Shared()), k.hold(locker.Shared())
	k.queue()                // a writer
	k.queue(locker.Shared()) // a reader behind it

	out, _ := k.inspect(true)
	if !out.Held || out.Backend != "memory" || out.Token != r1.Token() || out.Waiters == nil || *out.Waiters != 2 {
		t.Errorf("inspect --json: %+v; want held by %s first, 2 waiters", out, r1.Token())
	}
	if len(out.Holds) != 2 {
		t.Fatalf("holds %+v, want the 2 readers", out.Holds)
	}
	for i, lk := range []locker.Lock{r1, r2} {
		wantHold(t, i, out.Holds[i], lk, "shared")
	}
	if len(out.Queue) != 2 || out.Queue[0].Kind != "exclusive" || out.Queue[1].Kind != "shared" {
		t.Errorf("queue %+v, want the writer, then the reader", out.Queue)
	}
	if q := out.Queue[0]; q.Token != "" || q.Fence != nil || q.TTLMS != nil {
		t.Errorf("a waiter has a token, fence or TTL: %+v", q)
	}

	_, text := k.inspect(false)
	f1, _ := r1.Fence()
	for _, re := range []string{
		`(?m)^held +yes, by 2 shared holders$`,
		`(?m)^waiters +2$`,
		`holders, in grant order:`,
		fmt.Sprintf(`(?m)^ +1 +shared +%s +%d +[0-9.]+s +-$`, regexp.QuoteMeta(r1.Token()), f1),
		`(?m)^ +2 +shared +` + regexp.QuoteMeta(r2.Token()),
		`waiters, in queue order:\n +# +kind +detail\n +1 +exclusive +-\n +2 +shared +-\n`,
	} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect's text does not match %q:\n%s", re, text)
		}
	}
}

// TestInspectSemaphore: inspect lists a semaphore's permit holders with
// the limit and their weights, how many permits are taken, and a waiter
// that does not fit.
func TestInspectSemaphore(t *testing.T) {
	t.Parallel()
	k := newKindsKey(t)
	p1, p2 := k.hold(locker.Limit(3)), k.hold(locker.Limit(3), locker.Weight(2))
	k.queue(locker.Limit(3), locker.Weight(2))

	out, _ := k.inspect(true)
	if len(out.Holds) != 2 {
		t.Fatalf("holds %+v, want 2", out.Holds)
	}
	for i, lk := range []locker.Lock{p1, p2} {
		wantHold(t, i, out.Holds[i], lk, "permit")
		if h := out.Holds[i]; h.Limit != 3 || h.Weight != i+1 {
			t.Errorf("holder %d: limit %d, weight %d; want 3 and %d", i+1, h.Limit, h.Weight, i+1)
		}
	}
	if len(out.Queue) != 1 || out.Queue[0].Kind != "permit" || out.Queue[0].Limit != 3 || out.Queue[0].Weight != 2 {
		t.Errorf("queue %+v, want one permit of weight 2 of 3", out.Queue)
	}
	_, text := k.inspect(false)
	for _, want := range []string{"yes, by a semaphore of 3 permits: 3 taken by 2 holders", "1 permit of 3", "2 permits of 3"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect's text does not say %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "2 permits of 3") != 2 { // the holder and the waiter
		t.Errorf("the waiter of 2 permits is not listed:\n%s", text)
	}
}

// TestInspectMutex: a key with one exclusive holder reads as it always
// has: held yes, its token, fence and TTL in rows, no holders table;
// its JSON lists the one hold.
func TestInspectMutex(t *testing.T) {
	t.Parallel()
	k := newKindsKey(t)
	lk := k.hold()
	out, _ := k.inspect(true)
	if len(out.Holds) != 1 || out.Queue != nil {
		t.Fatalf("holds %+v, queue %+v; want one hold, no queue", out.Holds, out.Queue)
	}
	wantHold(t, 0, out.Holds[0], lk, "exclusive")
	_, text := k.inspect(false)
	fence, _ := lk.Fence()
	for _, re := range []string{`(?m)^held +yes$`, `(?m)^token +` + regexp.QuoteMeta(lk.Token()) + `$`, fmt.Sprintf(`(?m)^fence +%d$`, fence), `(?m)^ttl +[0-9.]+s on the server$`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("inspect's text does not match %q:\n%s", re, text)
		}
	}
	if strings.Contains(text, "holders, in grant order") {
		t.Errorf("a mutex's holder is listed in a table:\n%s", text)
	}
}

// TestInspectOutputWithoutHolds: a backend that fills in only the
// Holder's own fields has its holder listed from them, as exclusive
// where it admits no other kind and of unknown kind where it does.
func TestInspectOutputWithoutHolds(t *testing.T) {
	h := locker.Holder{Held: true, Token: "t1", Fence: 7, Fenced: true, TTL: 2 * time.Second, TTLKnown: true}
	for _, tc := range []struct {
		caps locker.Capabilities
		kind string
	}{
		{locker.Capabilities{Name: "old"}, "exclusive"},
		{locker.Capabilities{Name: "new", Shared: true}, ""},
		{locker.Capabilities{Name: "new", Permits: true}, ""},
	} {
		out := newInspectOutput(h, tc.caps)
		if len(out.Holds) != 1 {
			t.Fatalf("%+v: holds %+v, want one", tc.caps, out.Holds)
		}
		got := out.Holds[0]
		if got.Kind != tc.kind || got.Token != "t1" || got.Fence == nil || *got.Fence != 7 || got.TTLMS == nil || *got.TTLMS != 2000 {
			t.Errorf("%+v: the holder is %+v; want kind %q, token t1, fence 7, ttl 2000 ms", tc.caps, got, tc.kind)
		}
	}
	if out := newInspectOutput(locker.Holder{}, locker.Capabilities{}); out.Holds != nil {
		t.Errorf("a free key has holds %+v", out.Holds)
	}
}

// TestForceReleaseSharedHolders: release --force frees every shared
// holder of a key and says how many there were.
func TestForceReleaseSharedHolders(t *testing.T) {
	t.Parallel()
	k := newKindsKey(t)
	r1, r2 := k.hold(locker.Shared()), k.hold(locker.Shared())
	r := runApp(t, nil, "release", "--force", "--yes", "--json", "--url", k.url, k.key)
	var rel releaseOutput
	if err := json.Unmarshal([]byte(r.stdout), &rel); r.code != 0 || err != nil {
		t.Fatalf("release --force: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if !rel.Released || !strings.HasPrefix(rel.Holder, "2 holders, the first with token "+r1.Token()) {
		t.Errorf("release --force says %+v; want released, 2 holders, the first %s", rel, r1.Token())
	}
	for i, lk := range []locker.Lock{r1, r2} {
		select {
		case <-lk.Lost():
		case <-time.After(30 * time.Second):
			t.Errorf("reader %d still holds after release --force", i+1)
		}
	}
}

// TestInspectSharedServers: on every server backend that admits shared
// holds, inspect lists both shared holders two lockctl run --shared
// hold, each with the fence its command was given, and the writer that
// waits for them where the backend lists its queue. A backend that does
// not admit them is left to TestRunKinds, which checks the refusal.
func TestInspectSharedServers(t *testing.T) {
	t.Parallel() // waits for servers, as the others do
	forEachServer(t, func(t *testing.T, s server, url string) {
		if !capabilitiesOf(t, url).Shared {
			t.Logf("%s does not admit shared holds (Capabilities.Shared is false): nothing to list", s.name)
			return
		}
		logPath, goPath, key, _ := holderEnv(t, url)
		env := func(id string) []string {
			return testEnv(t, "LOCKER_URL="+url, "ID="+id, "LOG="+logPath, "GO="+goPath)
		}
		a := start(t, env("a"), "run", "--shared", key, "--", "sh", "-c", holdScript)
		b := start(t, env("b"), "run", "--shared", key, "--", "sh", "-c", holdScript)
		waitFor(t, 30*time.Second, "a and b hold the key together", func() bool { return len(readLines(t, logPath)) == 2 })
		w := start(t, env("w"), "run", "-v", key, "--", "true")
		waitFor(t, 30*time.Second, "the writer waits", func() bool { return strings.Contains(w.stderr.String(), "waiting") })

		var out inspectOutput
		var fences []string
		waitFor(t, 30*time.Second, "inspect lists the queued writer, where the backend lists its queue", func() bool {
			r := runLockctl(t, env("i"), "inspect", "--json", key)
			if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
				t.Fatalf("inspect --json: exit %d, %v\n%s%s", r.code, err, r.stdout, r.stderr)
			}
			return out.Waiters == nil || len(out.Queue) > 0
		})
		for _, line := range readLines(t, logPath) {
			fences = append(fences, lockVars(t, line)["fence"])
		}
		var listed []string
		for _, h := range out.Holds {
			if h.Kind != "shared" {
				t.Errorf("a holder of kind %q, want shared: %+v", h.Kind, h)
			}
			if h.Fence != nil {
				listed = append(listed, jsonNumber(*h.Fence))
			}
		}
		slices.Sort(fences)
		slices.Sort(listed)
		if len(out.Holds) != 2 || s.fencing && !slices.Equal(fences, listed) {
			t.Errorf("inspect lists %d holders with fences %v; the holders' LOCKER_FENCE are %v", len(out.Holds), listed, fences)
		}
		if out.Queue != nil && (len(out.Queue) != 1 || out.Queue[0].Kind != "exclusive") {
			t.Errorf("the queue %+v, want the writer", out.Queue)
		}
		os.WriteFile(goPath, nil, 0o600)
		for _, p := range []*proc{a, b, w} {
			if code := p.wait(t, time.Minute); code != 0 {
				t.Errorf("exit code %d; stderr:\n%s", code, p.stderr.String())
			}
		}
	})
}
