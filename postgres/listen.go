package postgres

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener delivers the notices of a Locker's schema channel (releases of
// keys someone waits for, new values, force releases) to the Locker's
// waiters and observers, over one connection of its own that LISTENs:
// opened by the first watch, kept until Close, and opened again when it
// breaks. Each notice's payload is md5 of the key, so a watch is a
// subscription in this process only; the server knows of one listener
// per Locker.
//
// Notices sent while the connection is down are lost: once it is back,
// every watch gets a notice, which makes its waiter try again and its
// observer look again.
type listener struct {
	cfg     *pgx.ConnConfig
	channel string
	log     *slog.Logger

	mu      sync.Mutex
	subs    map[string]map[*sub]struct{} // by md5 of the key
	conn    *pgx.Conn                    // nil until the first dial succeeds
	dialing chan struct{}                // closed when the dial under way ends
	stop    context.CancelFunc           // ends the receive loop
	done    chan struct{}                // closed when the receive loop has ended
	closed  bool
	running sync.WaitGroup // notify's goroutines
}

type sub struct {
	events chan struct{}
	// onNotice, if set, runs before the notice is delivered, in a
	// goroutine of its own (Observe marks the key's row waited for).
	onNotice func(ctx context.Context)
	ctx      context.Context
	cancel   context.CancelFunc
}

func newListener(cfg *pgx.ConnConfig, channel string, log *slog.Logger) *listener {
	return &listener{cfg: cfg, channel: channel, log: log, subs: map[string]map[*sub]struct{}{}}
}

func keyHash(key string) string {
	h := md5.Sum([]byte(key))
	return hex.EncodeToString(h[:])
}

// watch subscribes to key's notices. The connection is listening before
// it returns, so a release after it is not missed. onNotice runs once at
// once (with ctx) and then before each notice.
func (l *listener) watch(ctx context.Context, key string, onNotice func(context.Context)) (<-chan struct{}, func(), error) {
	if err := l.up(ctx); err != nil {
		return nil, nil, err
	}
	subCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &sub{events: make(chan struct{}, 1), onNotice: onNotice, ctx: subCtx, cancel: cancel}
	h := keyHash(key)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		cancel()
		return nil, nil, errors.New("postgres: the Locker is closed")
	}
	if l.subs[h] == nil {
		l.subs[h] = map[*sub]struct{}{}
	}
	l.subs[h][s] = struct{}{}
	l.mu.Unlock()
	if onNotice != nil {
		onNotice(ctx)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			l.mu.Lock()
			delete(l.subs[h], s)
			if len(l.subs[h]) == 0 {
				delete(l.subs, h)
			}
			l.mu.Unlock()
		})
	}
	return s.events, stop, nil
}

// up makes sure the connection is listening, dialling it if need be.
func (l *listener) up(ctx context.Context) error {
	for {
		l.mu.Lock()
		switch {
		case l.closed:
			l.mu.Unlock()
			return errors.New("postgres: the Locker is closed")
		case l.conn != nil:
			l.mu.Unlock()
			return nil
		case l.dialing != nil:
			wait := l.dialing
			l.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		l.dialing = make(chan struct{})
		l.mu.Unlock()
		conn, err := l.dial(ctx)
		l.mu.Lock()
		close(l.dialing)
		l.dialing = nil
		if err != nil {
			l.mu.Unlock()
			return err
		}
		if l.closed {
			l.mu.Unlock()
			conn.Close(context.Background())
			return errors.New("postgres: the Locker is closed")
		}
		l.start(conn)
		l.mu.Unlock()
		return nil
	}
}

func (l *listener) dial(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: the connection that listens for releases: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("postgres: LISTEN %s: %w", l.channel, err)
	}
	return conn, nil
}

// start runs the receive loop on conn; l.mu is held.
func (l *listener) start(conn *pgx.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	l.conn, l.stop, l.done = conn, cancel, make(chan struct{})
	go l.receive(ctx, conn, l.done)
}

// receive delivers notices until conn breaks or the listener closes; a
// broken connection is dialled again, with back-off, while anyone
// watches, and every watch is then told to look again.
func (l *listener) receive(ctx context.Context, conn *pgx.Conn, done chan struct{}) {
	defer close(done)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err == nil {
			l.deliver(n.Payload)
			continue
		}
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		l.log.Debug("postgres: the listening connection broke; dialling again", "err", err)
		conn = l.redial(ctx)
		if conn == nil {
			return
		}
		l.deliverAll()
	}
}

// redial dials until it succeeds or ctx ends (nil). Meanwhile l.conn
// stays the broken connection, so that new watches are taken at once:
// the notice every watch gets once the connection is back covers them.
func (l *listener) redial(ctx context.Context) *pgx.Conn {
	wait := 50 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := l.dial(dctx)
		cancel()
		if err == nil {
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				conn.Close(context.Background())
				return nil
			}
			l.conn = conn
			l.mu.Unlock()
			return conn
		}
		l.log.Debug("postgres: dialling the listening connection failed; trying again", "err", err, "in", wait)
		wait = min(2*wait, 2*time.Second)
	}
}

func (l *listener) deliver(payload string) {
	l.mu.Lock()
	var to []*sub
	for s := range l.subs[payload] {
		to = append(to, s)
	}
	l.mu.Unlock()
	for _, s := range to {
		l.notify(s)
	}
}

func (l *listener) deliverAll() {
	l.mu.Lock()
	var to []*sub
	for _, subs := range l.subs {
		for s := range subs {
			to = append(to, s)
		}
	}
	l.mu.Unlock()
	for _, s := range to {
		l.notify(s)
	}
}

func (l *listener) notify(s *sub) {
	send := func() {
		select {
		case s.events <- struct{}{}:
		default:
		}
	}
	if s.onNotice == nil {
		send()
		return
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.running.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.running.Done()
		if s.ctx.Err() != nil {
			return
		}
		ctx, cancel := context.WithTimeout(s.ctx, cleanupTimeout)
		s.onNotice(ctx)
		cancel()
		send()
	}()
}

// close ends the receive loop and closes the connection.
func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	stop, done := l.stop, l.done
	for _, subs := range l.subs {
		for s := range subs {
			s.cancel()
		}
	}
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	l.running.Wait()
}
