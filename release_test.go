package locker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/memstore"
)

// netDriver puts the memory store behind a simulated network: its
// releases honour their context as a network client does (a request whose
// context has ended is not sent), and fail in transit while drop is set;
// lostEarly makes the backend report every lock lost before TryAcquire
// returns it.
type netDriver struct {
	*memstore.Driver
	drop atomic.Bool
	// loseReply makes every Release reach the store and its reply fail
	// in transit.
	loseReply atomic.Bool
	lostEarly bool
	// stallRelease, if set, holds every Release until closed or its
	// context ends.
	stallRelease chan struct{}
	// stall, if set, holds every Acquire of key "stall" until closed,
	// whatever its context: a driver slow to give up. stalled is closed
	// once one waits there.
	stall, stalled chan struct{}
	// onRelease, if set, sees the context of every Release first.
	onRelease func(ctx context.Context)
}

func (d *netDriver) TryAcquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	acq, err := d.Driver.TryAcquire(ctx, req)
	return d.wrapped(req, acq, err)
}

func (d *netDriver) Acquire(ctx context.Context, req backend.Request) (backend.Acquisition, error) {
	if d.stall != nil && req.Key == "stall" {
		close(d.stalled)
		<-d.stall
		return backend.Acquisition{}, context.Canceled
	}
	acq, err := d.Driver.Acquire(ctx, req)
	return d.wrapped(req, acq, err)
}

// wrapped puts a lock granted for req behind the network.
func (d *netDriver) wrapped(req backend.Request, acq backend.Acquisition, err error) (backend.Acquisition, error) {
	if err != nil {
		return acq, err
	}
	if d.lostEarly {
		req.OnLost(errors.New("netDriver: lost before the grant was returned"))
	}
	acq.Held = &netHeld{Held: acq.Held, d: d}
	return acq, nil
}

type netHeld struct {
	backend.Held
	d *netDriver
}

var errInTransit = errors.New("netDriver: connection reset")

func (h *netHeld) Release(ctx context.Context) error {
	if h.d.onRelease != nil {
		h.d.onRelease(ctx)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if s := h.d.stallRelease; s != nil {
		select {
		case <-s:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h.d.drop.Load() {
		return errInTransit
	}
	if h.d.loseReply.Load() {
		h.Held.Release(ctx)
		return errInTransit
	}
	return h.Held.Release(ctx)
}

func newNet(t *testing.T) (*netDriver, locker.Locker, locker.Locker) {
	t.Helper()
	s := memstore.NewStore()
	d := &netDriver{Driver: memstore.NewDriver(s)}
	l := locker.New(d, nil)
	other := locker.New(memstore.NewDriver(s), nil)
	t.Cleanup(func() { l.Close(); other.Close() })
	return d, l, other
}

// TestReleaseWithCancelledContext: a Release whose context has already
// ended (a deferred Release with a handler's request context) still frees
// the key at once, and says so.
func TestReleaseWithCancelledContext(t *testing.T) {
	_, l, other := newNet(t)
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := lk.Release(cancelled); err != nil {
		t.Fatalf("Release with a cancelled context = %v, want the release sent anyway", err)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrReleased) {
		t.Errorf("Err() after Release = %v, want ErrReleased", err)
	}
	lk2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("the key after a Release with a cancelled context: %v, want it free", err)
	}
	lk2.Release(ctx)
}

// TestFailedReleaseTellsTheTruth: a release that fails in transit leaves
// Lost closed (the holder let go), but Err says that the server may still
// hold the lock, and a later Release tries again and frees the key.
func TestFailedReleaseTellsTheTruth(t *testing.T) {
	d, l, other := newNet(t)
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.drop.Store(true)
	if err := lk.Release(ctx); !errors.Is(err, errInTransit) {
		t.Fatalf("Release in transit = %v, want the transport's error", err)
	}
	select {
	case <-lk.Lost():
	default:
		t.Error("Lost() open after a Release that failed in transit: the holder let go")
	}
	err = lk.Err()
	if !errors.Is(err, locker.ErrNotHeld) || !errors.Is(err, locker.ErrReleased) || !strings.Contains(err.Error(), "may hold the lock") {
		t.Errorf("Err() after a failed release = %v, want it to say the server may still hold the lock", err)
	}
	if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Fatalf("the key after the failed release: %v, want it still held on the server", err)
	}
	d.drop.Store(false)
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release again once the network is back = %v, want it to free the key", err)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrReleased) || strings.Contains(err.Error(), "may hold") {
		t.Errorf("Err() after the release went through = %v, want plain ErrReleased", err)
	}
	lk2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("the key after the retried release: %v, want it free", err)
	}
	lk2.Release(ctx)
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("a third Release = %v, want ErrNotHeld", err)
	}
}

// TestRetriedReleaseFindsItDone: a Release whose reply was lost after it
// freed the key, retried, finds the key gone: the retry reports
// ErrNotHeld, and Err no longer says that the server may hold the lock.
func TestRetriedReleaseFindsItDone(t *testing.T) {
	d, l, other := newNet(t)
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.loseReply.Store(true)
	if err := lk.Release(ctx); !errors.Is(err, errInTransit) {
		t.Fatalf("Release whose reply was lost = %v, want the transport's error", err)
	}
	d.loseReply.Store(false)
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Fatalf("Release again = %v, want ErrNotHeld (the first one took it)", err)
	}
	if err := lk.Err(); !errors.Is(err, locker.ErrReleased) || strings.Contains(err.Error(), "may hold") {
		t.Errorf("Err() once a retry found the key gone = %v, want plain ErrReleased", err)
	}
	lk2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lk2.Release(ctx)
}

// TestLostDuringAcquireNotTracked: a lock the backend reports lost before
// Acquire returns it is not left among the Locker's held locks (where it
// would stay until Close).
func TestLostDuringAcquireNotTracked(t *testing.T) {
	d, l, _ := newNet(t)
	d.lostEarly = true
	lk, err := l.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lk.Lost():
	default:
		t.Fatal("Lost() open on a lock the backend reported lost")
	}
	if n := locker.HeldCount(l); n != 0 {
		t.Fatalf("the Locker tracks %d held locks after its only lock was lost during Acquire, want 0", n)
	}
}

// TestReleaseWhileClosing: a Release made once Close has begun, before
// Close has got to its lock (it waits for an acquisition in flight
// first), returns ErrClosed with the lock let go: Lost closed, as after
// any Release, so that Do returns with its lock let go; Close then
// deletes it from the server.
func TestReleaseWhileClosing(t *testing.T) {
	d, l, other := newNet(t)
	d.stall, d.stalled = make(chan struct{}), make(chan struct{})
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	acquiring := make(chan struct{})
	go func() {
		defer close(acquiring)
		l.Acquire(ctx, "stall")
	}()
	<-d.stalled // in flight: Close waits for it before it releases locks
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		l.Close()
	}()
	for !locker.IsClosed(l) {
		runtime.Gosched()
	}
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrClosed) {
		t.Errorf("Release while the Locker closes = %v, want ErrClosed", err)
	}
	select {
	case <-lk.Lost():
	default:
		t.Error("Lost() open after a Release while the Locker closes: the holder let go")
	}
	close(d.stall)
	<-acquiring
	<-closed
	lk2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("the key once Close returned: %v, want Close to have released it", err)
	}
	lk2.Release(ctx)
}

// TestReleaseKeepsLiveDeadline: a deadline of Release's context that has
// not passed when Release is called still bounds the wait (only an ended
// context is set aside); a release that runs out of it fails and can be
// retried.
func TestReleaseKeepsLiveDeadline(t *testing.T) {
	d, l, other := newNet(t)
	ctx := context.Background()
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	d.stallRelease = make(chan struct{})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := lk.Release(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Release with a live 50ms deadline over a stalled network = %v, want DeadlineExceeded", err)
	}
	close(d.stallRelease)
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release again: %v", err)
	}
	lk2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lk2.Release(ctx)
}

// TestDoReleasesPastItsDeadline: Do's own release is not bounded by the
// deadline of Do's context: fn may return just before it, and a release
// cut short there would leave the key held for the rest of its TTL. It
// goes out detached, with the bound of a Release whose context has ended.
func TestDoReleasesPastItsDeadline(t *testing.T) {
	d, l, other := newNet(t)
	outer, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := outer.Deadline()
	var got time.Time
	d.onRelease = func(ctx context.Context) {
		got, _ = ctx.Deadline()
	}
	if err := locker.Do(outer, l, "k", func(context.Context, locker.Lock) error { return nil }); err != nil {
		t.Fatalf("Do = %v", err)
	}
	// A second is what the context had left; a detached release has ten.
	if !got.After(deadline.Add(5 * time.Second)) {
		t.Fatalf("Do's release had a deadline of %v, within a few seconds of its context's (%v): fn returning just before it would leave the key held", got, deadline)
	}
	lk, err := other.TryAcquire(context.Background(), "k")
	if err != nil {
		t.Fatalf("the key after Do returned: %v, want it free", err)
	}
	lk.Release(context.Background())
}
