package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// eventWait bounds every wait for a worker's event, so that a Serve that
// hangs fails the test instead of blocking it.
const eventWait = 5 * time.Second

// served is a Serve running in-process: commands go in through a pipe,
// events come out through another, read line by line.
type served struct {
	t      *testing.T
	in     *io.PipeWriter
	events chan event // every line Serve wrote, in order; closed when its output ends
	done   chan error // Serve's result
	cancel context.CancelFunc
}

// serve runs Serve on l for key until the test ends (or closeInput).
func serve(t *testing.T, l locker.Locker, key string) *served {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{t: t, in: inW, events: make(chan event, 256), done: make(chan error, 1), cancel: cancel}
	go func() {
		err := Serve(ctx, l, nil, key, inR, outW)
		outW.Close()
		s.done <- err
	}()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(s.events)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				e = event{Ev: "unparseable", Err: sc.Text()}
			}
			s.events <- e
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		cancel()
		select {
		case <-s.done:
		case <-time.After(eventWait):
			t.Errorf("Serve did not return within %v of the end of its input", eventWait)
		}
		outR.Close() // unblocks the reader if Serve never returned
		<-readDone
	})
	return s
}

// send writes one command line.
func (s *served) send(cmd string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, cmd+"\n"); err != nil {
		s.t.Fatalf("sending %q: %v", cmd, err)
	}
}

// next returns the next event, failing the test if none comes in time.
func (s *served) next() event {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if !ok {
			s.t.Fatalf("the worker's output ended while an event was awaited")
		}
		return e
	case <-time.After(eventWait):
		s.t.Fatalf("no event within %v", eventWait)
	}
	return event{}
}

// expect returns the next event, which must be of kind ev.
func (s *served) expect(ev string) event {
	s.t.Helper()
	e := s.next()
	if e.Ev != ev {
		s.t.Fatalf("got event %+v, want %q", e, ev)
	}
	return e
}

// do sends cmd and returns the event it answers, which must be of kind ev.
func (s *served) do(cmd, ev string) event {
	s.t.Helper()
	s.send(cmd)
	return s.expect(ev)
}

// closeInput ends Serve's input and waits for it to return.
func (s *served) closeInput() error {
	s.t.Helper()
	s.in.Close()
	select {
	case err := <-s.done:
		s.done <- err // for the cleanup
		return err
	case <-time.After(eventWait):
		s.t.Fatalf("Serve did not return within %v of the end of its input", eventWait)
	}
	return nil
}

// quiet checks that no event comes within d.
func (s *served) quiet(d time.Duration) {
	s.t.Helper()
	select {
	case e, ok := <-s.events:
		if ok {
			s.t.Errorf("unasked event %+v", e)
		}
	case <-time.After(d):
	}
}

// openMemory opens a Locker on the process-wide memory store, closed when
// the test ends.
func openMemory(t *testing.T) locker.Locker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	l, err := locker.Open(ctx, "memory://")
	if err != nil {
		t.Fatalf("opening memory://: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func testKey(t *testing.T) string { return "chaos-test/" + t.Name() }

func TestServeProtocol(t *testing.T) {
	l := openMemory(t)
	key := testKey(t)
	a := serve(t, l, key)
	a.expect(evReady)

	g := a.do("acquire 1s 1s", evGranted)
	if !g.Fenced || g.Fence == 0 {
		t.Errorf("granted %+v: want fenced with a fence > 0 on the memory backend", g)
	}
	if g.Token == "" {
		t.Errorf("granted %+v: want a token", g)
	}
	w := a.do("write-if-held", evWrite)
	if !w.Believes || w.Fence != g.Fence || !w.Fenced {
		t.Errorf("write %+v: want believes=true with the granted fence %d", w, g.Fence)
	}
	w = a.do("write", evWrite)
	if !w.Believes || w.Fence != g.Fence {
		t.Errorf("write %+v: want believes=true with the granted fence %d", w, g.Fence)
	}
	if e := a.do("acquire 1s 1s", evError); !strings.Contains(e.Err, "held already") {
		t.Errorf("a second acquire while holding: error %q, want one saying a lock is held already", e.Err)
	}

	// A rival on the same Locker and key times out.
	b := serve(t, l, key)
	b.expect(evReady)
	start := time.Now()
	e := b.do("acquire 1s 50ms", evError)
	if !strings.Contains(e.Err, "deadline") {
		t.Errorf("rival's acquire: error %q, want one mentioning the deadline", e.Err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("rival's acquire with a 50ms wait took %v", took)
	}
	if e := b.do("write", evError); !strings.Contains(e.Err, "no lock") {
		t.Errorf("write with no lock: error %q, want one saying there is no lock", e.Err)
	}
	if e := b.do("release", evError); !strings.Contains(e.Err, "no lock") {
		t.Errorf("release with no lock: error %q, want one saying there is no lock", e.Err)
	}

	a.do("release", evReleased)
	a.quiet(100 * time.Millisecond) // a release is not a loss: no "lost" event

	// The rival can now take the key, with a larger fence.
	g2 := b.do("acquire 1s 1s", evGranted)
	if g2.Fence <= g.Fence {
		t.Errorf("the rival's fence %d is not larger than the first holder's %d", g2.Fence, g.Fence)
	}
	b.do("release", evReleased)

	// A worker that released can take the key again, as the scenarios'
	// check that the key can be taken again after the faults does.
	g3 := a.do("acquire 1s 1s", evGranted)
	if g3.Fence <= g2.Fence {
		t.Errorf("the re-acquired fence %d is not larger than %d", g3.Fence, g2.Fence)
	}
	a.do("release", evReleased)
}

// TestServeWriteIfHeldAfterRelease: the protocol says write-if-held makes
// the write "only while Lost is open; else skip"; after a release Lost
// is closed, so the worker must answer skip (and must never write).
func TestServeWriteIfHeldAfterRelease(t *testing.T) {
	l := openMemory(t)
	a := serve(t, l, testKey(t))
	a.expect(evReady)
	a.do("acquire 1s 1s", evGranted)
	a.do("release", evReleased)
	a.send("write-if-held")
	if e := a.next(); e.Ev != evSkip {
		t.Errorf("write-if-held after release: got %+v, want %q", e, evSkip)
	}
}

func TestServeBadCommands(t *testing.T) {
	l := openMemory(t)
	a := serve(t, l, testKey(t))
	a.expect(evReady)
	tests := []struct {
		cmd  string
		want []string // substrings of the error
	}{
		{"frobnicate now", []string{"unknown command", "frobnicate"}},
		{"ACQUIRE 1s 1s", []string{"unknown command", "ACQUIRE"}},
		{"acquire", []string{"acquire TTL WAIT"}},
		{"acquire 1s", []string{"acquire TTL WAIT"}},
		{"acquire 1s 1s 1s", []string{"acquire", `kind "1s"`}},
		{"acquire 1s 1s exclusive", []string{"acquire", `kind "exclusive"`}},
		{"acquire 1s 1s shared limit=2", []string{"acquire", `kind "shared limit=2"`}},
		{"acquire 1s 1s limit=two", []string{"acquire", `kind "limit=two"`}},
		{"acquire 1s 1s limit=2 weight=2 x", []string{"acquire", "kind"}},
		{"acquire 1s 1s limit=2 heavy=1", []string{"acquire", `kind "limit=2 heavy=1"`}},
		// The library judges the values, and is not retried.
		{"acquire 1s 1s limit=0", []string{"acquire", "Limit(0)"}},
		{"acquire 1s 1s limit=2 weight=3", []string{"acquire", "Weight(3)"}},
		{"acquire soon 1s", []string{"acquire", "soon"}},
		{"acquire 1s later", []string{"acquire", "later"}},
		// Not retried: the error is the cause, not the deadline.
		{"acquire 1ns 150ms", []string{"acquire", "TTL"}},
		{"write", []string{"write", "no lock"}},
		{"release", []string{"release", "no lock"}},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			a.t = t // Fatalf must run on the subtest's goroutine
			e := a.do(tt.cmd, evError)
			for _, w := range tt.want {
				if !strings.Contains(e.Err, w) {
					t.Errorf("%q: error %q does not mention %q", tt.cmd, e.Err, w)
				}
			}
		})
	}
	// Blank lines are ignored, and the worker still answers afterwards.
	a.t = t
	a.send("")
	a.send("   ")
	a.do("acquire 1s 1s", evGranted)
	a.do("release", evReleased)
}

func TestServeEndOfInputReleases(t *testing.T) {
	l := openMemory(t)
	key := testKey(t)
	a := serve(t, l, key)
	a.expect(evReady)
	a.do("acquire 30s 1s", evGranted)
	if err := a.closeInput(); err != nil {
		t.Errorf("Serve returned %v at the end of its input, want nil", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	lk, err := l.TryAcquire(ctx, key, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("the key is still held after Serve returned (it must release what it holds): %v", err)
	}
	lk.Release(ctx)
}

// TestServeEndOfInputReleasesOtherLocker: the same, seen from another
// Locker on the store, as another process would.
func TestServeEndOfInputReleasesOtherLocker(t *testing.T) {
	store := memory.NewStore()
	l1 := memory.NewClient(&memory.Options{Store: store})
	t.Cleanup(func() { l1.Close() })
	l2 := memory.NewClient(&memory.Options{Store: store})
	t.Cleanup(func() { l2.Close() })
	key := testKey(t)
	a := serve(t, l1, key)
	a.expect(evReady)
	a.do("acquire 30s 1s", evGranted)
	ctx, cancel := context.WithTimeout(context.Background(), eventWait)
	defer cancel()
	if _, err := l2.TryAcquire(ctx, key, locker.WithTTL(time.Second)); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("TryAcquire while the worker holds the key: %v, want ErrNotAcquired", err)
	}
	if err := a.closeInput(); err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
	lk, err := l2.TryAcquire(ctx, key, locker.WithTTL(time.Second))
	if err != nil {
		t.Fatalf("the key is still held after Serve returned: %v", err)
	}
	lk.Release(ctx)
}

// TestServeLost: a holder whose client crashes (nothing refreshes its
// lock any more) reports "lost" unasked once its validity runs out; then
// write-if-held skips, and write still writes, not believing.
func TestServeLost(t *testing.T) {
	// The crashed client's watchdog logs each refresh it retries; keep
	// them out of the test's output.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c := memory.NewClient(&memory.Options{Store: memory.NewStore(), Config: locker.Config{Logger: quiet}})
	t.Cleanup(func() { c.Close() })
	a := serve(t, c, testKey(t))
	a.expect(evReady)
	g := a.do("acquire 200ms 1s", evGranted)
	c.Crash()
	start := time.Now()
	lost := a.expect(evLost)
	if lost.Err == "" {
		t.Errorf("lost %+v: want the reason", lost)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("lost reported %v after the crash, with a 200ms TTL", took)
	}
	s := a.do("write-if-held", evSkip)
	if s.Err == "" {
		t.Errorf("skip %+v: want the reason the lock was lost", s)
	}
	w := a.do("write", evWrite)
	if w.Believes {
		t.Errorf("write after the loss %+v: believes=true, want false", w)
	}
	if w.Fence != g.Fence || !w.Fenced {
		t.Errorf("write after the loss %+v: want the granted fence %d", w, g.Fence)
	}
	a.quiet(100 * time.Millisecond) // one "lost", not more
}

// TestServeKinds: a worker takes shared holds and permits as asked, and
// says so when granted; readers share the key and keep a writer out; a
// semaphore admits its limit; a request that disagrees with the key's
// holders fails at once (it is not retried until its wait ends).
func TestServeKinds(t *testing.T) {
	l := openMemory(t)
	rw, sem := testKey(t)+"/rw", testKey(t)+"/sem"
	workers := make([]*served, 3)
	for i := range workers {
		workers[i] = serve(t, l, rw)
		workers[i].expect(evReady)
	}
	a, b, c := workers[0], workers[1], workers[2]
	ga := a.do("acquire 1s 1s shared", evGranted)
	gb := b.do("acquire 1s 1s shared", evGranted)
	if ga.Kind != "shared" || gb.Kind != "shared" || gb.Fence <= ga.Fence {
		t.Errorf("granted %+v and %+v: want two shared holds, fences increasing", ga, gb)
	}
	c.do("acquire 1s 50ms", evError) // a writer: the readers hold the key
	start := time.Now()
	if e := c.do("acquire 1s 10s limit=2", evError); !strings.Contains(e.Err, "disagrees") || time.Since(start) > 5*time.Second {
		t.Errorf("a permit on a read/write lock: %q after %v, want a kind mismatch at once", e.Err, time.Since(start))
	}
	a.do("release", evReleased)
	b.do("release", evReleased)
	gc := c.do("acquire 1s 1s", evGranted)
	if gc.Kind != "" || gc.Fence <= gb.Fence {
		t.Errorf("the writer's grant %+v: want exclusive, with a fence above the readers'", gc)
	}
	c.do("release", evReleased)

	p := make([]*served, 3)
	for i := range p {
		p[i] = serve(t, l, sem)
		p[i].expect(evReady)
	}
	g := p[0].do("acquire 1s 1s limit=3 weight=2", evGranted)
	if g.Kind != "permit" || g.Limit != 3 || g.Weight != 2 {
		t.Errorf("granted %+v: want a permit of weight 2 of 3", g)
	}
	if g := p[1].do("acquire 1s 1s limit=3", evGranted); g.Kind != "permit" || g.Limit != 3 || g.Weight != 1 {
		t.Errorf("granted %+v: want a permit of weight 1 of 3", g)
	}
	p[2].do("acquire 1s 50ms limit=3", evError) // all 3 taken
	p[0].do("release", evReleased)
	p[2].do("acquire 1s 1s limit=3", evGranted)
}

// TestServeRestoreWithoutProxies: a worker without proxies (one on the
// memory backend) has nothing to restore, and says so as a restore
// would; other faults it cannot apply.
func TestServeRestoreWithoutProxies(t *testing.T) {
	a := serve(t, openMemory(t), testKey(t))
	a.expect(evReady)
	a.do("fault restore", evFaulted)
	if e := a.do("fault cut", evError); !strings.Contains(e.Err, "no proxies") {
		t.Errorf("fault cut without proxies: %q", e.Err)
	}
}
