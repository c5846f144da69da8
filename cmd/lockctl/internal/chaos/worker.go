package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
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
//	acquire TTL WAIT [KIND]
//	                   take the key (the watchdog refreshes it), waiting at
//	                   most WAIT and trying again after errors (a server
//	                   down); answers "granted" or "error". KIND is none
//	                   for an exclusive hold, "shared" for a shared one,
//	                   "limit=N" or "limit=N weight=W" for W (default 1)
//	                   of a semaphore's N permits
//	campaign TTL WAIT [VALUE]
//	                   campaign for the leadership of the election named by
//	                   the key (locker.Election), with VALUE if given, as
//	                   acquire waits and retries; answers "elected", with
//	                   the term as the fence, or "error". The leadership is
//	                   the lock that write, write-if-held and release use
//	                   (release resigns)
//	leader             read the election's leader as the servers report it
//	                   (Election.Leader); answers "leader" with its term,
//	                   token and value, or with err "no leader"
//	write              write to the resource with the lock's fence, whether
//	                   or not the lock is still believed held: a write the
//	                   holder decided on before it was paused, in flight
//	write-if-held      the same, but only while Lost is open; else "skip"
//	release            release the lock; answers "released" or "error"
//	fault ARGS...      set the worker's proxies (Faults.apply: cut [HOST...],
//	                   latency D, hold on|off, restore); answers "faulted".
//	                   A worker without proxies has nothing to restore, and
//	                   answers "fault restore" alone
//
// A write is the holder's access to the resource: a read, for a shared
// holder.
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
	evElected  = "elected"
	evLeader   = "leader"
)

// event is one line of a worker's output.
type event struct {
	Ev     string `json:"ev"`
	Fence  uint64 `json:"fence,omitempty"`
	Fenced bool   `json:"fenced,omitempty"`
	Token  string `json:"token,omitempty"`
	// Kind, Limit and Weight, at a grant, are what the hold takes: kind
	// "shared" or "permit" (of Limit permits, taking Weight), empty for
	// an exclusive hold.
	Kind   string `json:"kind,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Weight int    `json:"weight,omitempty"`
	// Value, at an election and a reading of the leader, is the
	// leader's value.
	Value string `json:"value,omitempty"`
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
	// elect is the election whose leadership lock is, after campaign.
	elect *locker.Election
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
		if w.f == nil && slices.Equal(args[1:], []string{"restore"}) {
			w.emit(event{Ev: evFaulted}) // nothing stands between it and the servers
			return nil
		}
		if w.f == nil {
			return errors.New("fault: this worker has no proxies")
		}
		if err := w.f.apply(args[1:]); err != nil {
			return err
		}
		w.emit(event{Ev: evFaulted})
		return nil
	case "campaign":
		return w.campaign(ctx, args[1:])
	case "leader":
		return w.leader(ctx)
	case "write", "write-if-held":
		return w.write(args[0] == "write-if-held")
	case "release":
		return w.release(ctx)
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// release releases the lock held, or resigns the leadership.
func (w *server) release(ctx context.Context) error {
	if w.lock == nil {
		return errors.New("release: no lock held")
	}
	var err error
	if w.elect != nil {
		err = w.elect.Resign(ctx)
	} else {
		err = w.lock.Release(ctx)
	}
	w.lock, w.elect = nil, nil
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	w.emit(event{Ev: evReleased})
	return nil
}

// acquire takes the key with the TTL args[0], waiting at most args[1],
// of the kind the rest of args say.
func (w *server) acquire(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return errors.New("acquire TTL WAIT [shared | limit=N [weight=W]]: want two durations")
	}
	ttl, err1 := time.ParseDuration(args[0])
	wait, err2 := time.ParseDuration(args[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	k, err := parseKind(args[2:])
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	if w.lock != nil {
		return errors.New("acquire: a lock is held already")
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	lock, err := acquireRetrying(actx, w.l, w.key, append(k.options(), locker.WithTTL(ttl)))
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	fence, fenced := lock.Fence()
	w.hold(lock, event{Ev: evGranted, Fence: fence, Fenced: fenced, Token: lock.Token(), Kind: k.kind, Limit: k.limit, Weight: k.weight})
	return nil
}

// hold makes lock the worker's, reports e, and reports the lock's loss
// when it comes.
func (w *server) hold(lock locker.Lock, e event) {
	w.lock = lock
	w.emit(e)
	go func() {
		<-lock.Lost()
		if err := lock.Err(); err != nil && !errors.Is(err, locker.ErrReleased) {
			w.emit(event{Ev: evLost, Err: err.Error()})
		}
	}()
}

// campaign campaigns for the election named by the key with the TTL
// args[0], waiting at most args[1], with the value args[2] if given.
func (w *server) campaign(ctx context.Context, args []string) error {
	if len(args) < 2 || len(args) > 3 {
		return errors.New("campaign TTL WAIT [VALUE]: want two durations and perhaps a value")
	}
	ttl, err1 := time.ParseDuration(args[0])
	wait, err2 := time.ParseDuration(args[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if w.lock != nil {
		return errors.New("campaign: a lock is held already")
	}
	var value []byte
	if len(args) == 3 {
		value = []byte(args[2])
	}
	actx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e := locker.NewElection(w.l, w.key, locker.WithTTL(ttl))
	lead, err := retrying(actx, func() (locker.Lock, error) { return e.Campaign(actx, value) })
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	w.elect = e
	term, termed := lead.Fence()
	w.hold(lead, event{Ev: evElected, Fence: term, Fenced: termed, Token: lead.Token(), Value: string(value)})
	return nil
}

// leader reports the election's leader as the servers have it.
func (w *server) leader(ctx context.Context) error {
	ldr, err := locker.NewElection(w.l, w.key).Leader(ctx)
	switch {
	case errors.Is(err, locker.ErrNoLeader):
		w.emit(event{Ev: evLeader, Err: "no leader"})
		return nil
	case err != nil:
		return fmt.Errorf("leader: %w", err)
	}
	w.emit(event{Ev: evLeader, Fence: ldr.Term, Fenced: ldr.Termed, Token: ldr.Token, Value: string(ldr.Value)})
	return nil
}

// acquireRetrying acquires key, trying again after an error (a server
// down, a failover under way) until ctx ends, as an application that
// needs the lock would; it returns the last error.
func acquireRetrying(ctx context.Context, l locker.Locker, key string, opts []locker.Option) (locker.Lock, error) {
	return retrying(ctx, func() (locker.Lock, error) { return l.Acquire(ctx, key, opts...) })
}

// retrying calls take until it succeeds, fails for good or ctx ends.
func retrying(ctx context.Context, take func() (locker.Lock, error)) (locker.Lock, error) {
	for {
		lock, err := take()
		if err == nil || ctx.Err() != nil || permanent(err) {
			return lock, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(retryPause):
		}
	}
}

// permanent reports whether an acquisition's error would come again
// however often it is tried: bad input, a closed Locker, a kind the
// backend does not admit or that disagrees with the key's holders.
func permanent(err error) bool {
	for _, e := range []error{locker.ErrClosed, locker.ErrInvalidKey, locker.ErrInvalidTTL, locker.ErrUnsupported, locker.ErrKindMismatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// holdKind is what an acquire command asks of the key.
type holdKind struct {
	kind          string // "", "shared" or "permit"
	limit, weight int
}

// parseKind reads the KIND of an acquire command: nothing, "shared", or
// "limit=N" with an optional "weight=W".
func parseKind(args []string) (holdKind, error) {
	const want = `want nothing, "shared", or "limit=N" and perhaps "weight=W"`
	switch {
	case len(args) == 0:
		return holdKind{}, nil
	case len(args) == 1 && args[0] == "shared":
		return holdKind{kind: "shared"}, nil
	case len(args) > 2:
		return holdKind{}, fmt.Errorf("kind %q: %s", strings.Join(args, " "), want)
	}
	k := holdKind{kind: "permit", weight: 1}
	n, ok := strings.CutPrefix(args[0], "limit=")
	limit, err := strconv.Atoi(n)
	if !ok || err != nil {
		return holdKind{}, fmt.Errorf("kind %q: %s", strings.Join(args, " "), want)
	}
	k.limit = limit
	if len(args) == 2 {
		ws, ok := strings.CutPrefix(args[1], "weight=")
		weight, err := strconv.Atoi(ws)
		if !ok || err != nil {
			return holdKind{}, fmt.Errorf("kind %q: %s", strings.Join(args, " "), want)
		}
		k.weight = weight
	}
	return k, nil
}

// options are the library's options for k; the library judges their
// values (a limit below 1, a weight above the limit).
func (k holdKind) options() []locker.Option {
	switch k.kind {
	case "shared":
		return []locker.Option{locker.Shared()}
	case "permit":
		return []locker.Option{locker.Limit(k.limit), locker.Weight(k.weight)}
	}
	return nil
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
