package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker"
)

// The worker protocol. A holder is a process of its own ("lockctl
// chaos-worker"), so that it can be paused with SIGSTOP and killed with
// SIGKILL like any process that holds a lock. It reads one command a line
// on its standard input and writes one JSON event a line on its standard
// output; the engine stamps each event with its own clock as it reads it,
// so that every event of a round is on one clock.
//
// Commands:
//
//	acquire TTL WAIT   take the key (the watchdog refreshes it), waiting at
//	                   most WAIT and trying again after errors (a server
//	                   down); answers "granted" or "error"
//	write              write to the resource with the lock's fence, whether
//	                   or not the lock is still believed held: a write the
//	                   holder decided on before it was paused, in flight
//	write-if-held      the same, but only while Lost is open; else "skip"
//	release            release the lock; answers "released" or "error"
//	fault ARGS...      set the worker's proxies (Faults.apply: cut [HOST...],
//	                   latency D, hold on|off, restore); answers "faulted"
//
// Unasked, the worker reports "lost" when its lock's Lost channel closes.
// End of input ends the worker, releasing what it holds.

// Event kinds a worker writes.
const (
	evReady    = "ready"
	evGranted  = "granted"
	evWrite    = "write"
	evSkip     = "skip"
	evLost     = "lost"
	evReleased = "released"
	evError    = "error"
	evFaulted  = "faulted"
)

// event is one line of a worker's output.
type event struct {
	Ev     string `json:"ev"`
	Fence  uint64 `json:"fence,omitempty"`
	Fenced bool   `json:"fenced,omitempty"`
	Token  string `json:"token,omitempty"`
	// Believes: at a write, whether the lock's Lost channel was still open.
	Believes bool   `json:"believes,omitempty"`
	Err      string `json:"err,omitempty"`
	// At is when the engine read the event, since the round began; not
	// sent by the worker.
	At time.Duration `json:"-"`
}

// Serve runs the worker side of the protocol on l for key, reading
// commands from in and writing events to out, until in ends; ctx bounds
// the acquisitions. f are the proxies l's connections go through (nil:
// none, and fault commands fail). It releases what it holds before it
// returns.
func Serve(ctx context.Context, l locker.Locker, f *Faults, key string, in io.Reader, out io.Writer) error {
	w := &server{l: l, f: f, key: key, enc: json.NewEncoder(out)}
	defer w.drop()
	w.emit(event{Ev: evReady})
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if err := w.do(ctx, strings.Fields(sc.Text())); err != nil {
			w.emit(event{Ev: evError, Err: err.Error()})
		}
	}
	return sc.Err()
}

// server is the worker's state: the lock it holds, if any.
type server struct {
	l   locker.Locker
	f   *Faults
	key string

	mu   sync.Mutex // serialises writes to enc
	enc  *json.Encoder
	lock locker.Lock
}

func (w *server) emit(e event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.enc.Encode(e)
}

// do runs one command.
func (w *server) do(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return nil
	}
	switch args[0] {
	case "acquire":
		return w.acquire(ctx, args[1:])
	case "fault":
		if w.f == nil {
			return errors.New("fault: this worker has no proxies")
		}
		if err := w.f.apply(args[1:]); err != nil {
			return err
		}
		w.emit(event{Ev: evFaulted})
		return nil
	case "write", "write-if-held":
		return w.write(args[0] == "write-if-held")
	case "release":
		if w.lock == nil {
			return errors.New("release: no lock held")
		}
		err := w.lock.Release(ctx)
		w.lock = nil
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		w.emit(event{Ev: evReleased})
		return nil
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// acquire takes the key with the TTL args[0], waiting at most args[1].
func (w *server) acquire(ctx context.Context, args []string) error {
	if len(args) != 2 {
		return errors.New("acquire TTL WAIT: want two durations")
	}
	ttl, err1 := time.ParseDuration(args[0])
	wait, err2 := time.ParseDuration(args[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if w.lock != nil {
		return errors.New("acquire: a lock is held already")
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	lock, err := acquireRetrying(actx, w.l, w.key, ttl)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	w.lock = lock
	fence, fenced := lock.Fence()
	w.emit(event{Ev: evGranted, Fence: fence, Fenced: fenced, Token: lock.Token()})
	go func() {
		<-lock.Lost()
		if err := lock.Err(); err != nil && !errors.Is(err, locker.ErrReleased) {
			w.emit(event{Ev: evLost, Err: err.Error()})
		}
	}()
	return nil
}

// acquireRetrying acquires key, trying again after an error (a server
// down, a failover under way) until ctx ends, as an application that
// needs the lock would; it returns the last error.
func acquireRetrying(ctx context.Context, l locker.Locker, key string, ttl time.Duration) (locker.Lock, error) {
	for {
		lock, err := l.Acquire(ctx, key, locker.WithTTL(ttl))
		if err == nil || ctx.Err() != nil || errors.Is(err, locker.ErrClosed) ||
			errors.Is(err, locker.ErrInvalidKey) || errors.Is(err, locker.ErrInvalidTTL) {
			return lock, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(retryPause):
		}
	}
}

// retryPause is how long a worker waits before it tries again after a
// failed acquisition.
const retryPause = 100 * time.Millisecond

// write reports a write with the lock's fence; with ifHeld, only while
// the lock is believed held.
func (w *server) write(ifHeld bool) error {
	if w.lock == nil && ifHeld {
		w.emit(event{Ev: evSkip, Err: "no lock held"})
		return nil
	}
	if w.lock == nil {
		return errors.New("write: no lock held")
	}
	fence, fenced := w.lock.Fence()
	believes := w.lock.Err() == nil
	if ifHeld && !believes {
		w.emit(event{Ev: evSkip, Err: w.lock.Err().Error()})
		return nil
	}
	w.emit(event{Ev: evWrite, Fence: fence, Fenced: fenced, Believes: believes})
	return nil
}

// drop releases the lock still held, briefly.
func (w *server) drop() {
	if w.lock == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.lock.Release(ctx)
}
