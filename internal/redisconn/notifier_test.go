package redisconn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/locker/internal/testenv"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gate stands for a network that delays the SUBSCRIBE commands a notifier
// sends for one channel: from hold on, they are kept here, reported on
// held, and sent to the server only by release. Everything else goes
// through at once.
type gate struct {
	channel string
	held    chan struct{} // one send per SUBSCRIBE kept

	mu      sync.Mutex
	holding bool
	kept    []func()
}

func newGate(channel string) *gate {
	return &gate{channel: channel, held: make(chan struct{}, 16)}
}

func (g *gate) hold() {
	g.mu.Lock()
	g.holding = true
	g.mu.Unlock()
}

// release sends the SUBSCRIBEs kept, in order, and stops holding.
func (g *gate) release() {
	g.mu.Lock()
	kept := g.kept
	g.kept, g.holding = nil, false
	g.mu.Unlock()
	for _, send := range kept {
		send()
	}
}

// gatedConn is a Conn whose subscriber connections pass through g.
type gatedConn struct {
	Conn
	g *gate
}

func (c gatedConn) Subscribe(ctx context.Context) (PubSub, error) {
	ps, err := c.Conn.Subscribe(ctx)
	if err != nil {
		return nil, err
	}
	return gatedPubSub{ps, c.g}, nil
}

type gatedPubSub struct {
	PubSub
	g *gate
}

func (p gatedPubSub) Subscribe(ctx context.Context, channels ...string) error {
	g := p.g
	g.mu.Lock()
	if g.holding && slices.Contains(channels, g.channel) {
		// Written, as far as the notifier can tell; on its way.
		g.kept = append(g.kept, func() {
			if err := p.PubSub.Subscribe(context.Background(), channels...); err != nil {
				panic(err)
			}
		})
		g.mu.Unlock()
		g.held <- struct{}{}
		return nil
	}
	g.mu.Unlock()
	return p.PubSub.Subscribe(ctx, channels...)
}

// watchReady reports whether the notifier takes channel's subscription as
// confirmed, so that a Watch of it returns (or has returned) ready.
func watchReady(n *Notifier, channel string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := n.subs[channel]
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// TestStaleConfirmation: watcher A subscribes to a channel and gives up
// before the server's confirmation arrives, so the notifier unsubscribes;
// watcher B subscribes to the same channel at once. The confirmation of
// A's SUBSCRIBE then reaches the notifier while B's SUBSCRIBE has not yet
// reached the server. It must not make B's Watch return ready: a release
// published right after would find nobody subscribed and be lost, and B
// would wait for its poll interval instead of the release.
//
// The interleaving is driven, not timed: a proxy holds the server's
// replies back, and a gate holds B's SUBSCRIBE until the test lets it go.
func TestStaleConfirmation(t *testing.T) {
	u, err := url.Parse(testenv.Get(t, testenv.RedisURL))
	if err != nil {
		t.Fatal(err)
	}
	addr := u.Host
	// Room for a loaded machine: B's Watch waits here while the test
	// drives the interleaving.
	old := subscribeTimeout
	subscribeTimeout = time.Minute
	t.Cleanup(func() { subscribeTimeout = old })

	for name, dial := range libraries {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			raw := goredis.NewClient(&goredis.Options{Addr: addr})
			defer raw.Close()
			p := testenv.Proxy(t, addr)
			ch := fmt.Sprintf("stale-confirmation/%s/%d", name, time.Now().UnixNano())
			subscribers := func() int64 {
				m, err := raw.PubSubNumSub(ctx, ch).Result()
				if err != nil {
					t.Fatal(err)
				}
				return m[ch]
			}
			g := newGate(ch)
			c := dial(p.Addr())
			defer c.Close()
			n := NewNotifier(gatedConn{c, g}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			defer n.Close()

			// The subscriber connection is up and in use.
			_, stopW, err := n.Watch(ctx, ch+"/warm-up")
			if err != nil {
				t.Fatal(err)
			}
			defer stopW()

			// A subscribes; the server applies it, its confirmation is held.
			p.HoldReplies(true)
			actx, cancelA := context.WithCancel(ctx)
			defer cancelA()
			aDone := make(chan error, 1)
			go func() {
				stop, err := n.WatchInto(actx, ch, make(chan struct{}, 1))
				if err == nil {
					stop()
				}
				aDone <- err
			}()
			testenv.WaitFor(t, 10*time.Second, "the server applies A's SUBSCRIBE", func() bool { return subscribers() == 1 })
			// A gives up: the notifier unsubscribes (applied, reply held).
			cancelA()
			if err := <-aDone; err == nil {
				t.Fatal("A's Watch succeeded with its confirmation held back")
			}
			testenv.WaitFor(t, 10*time.Second, "the server applies A's UNSUBSCRIBE", func() bool { return subscribers() == 0 })

			// B subscribes to the same channel; its SUBSCRIBE is on its way.
			bEvents := make(chan struct{}, 1)
			type watched struct {
				stop func()
				err  error
			}
			bDone := make(chan watched, 1)
			g.hold()
			go func() {
				stop, err := n.WatchInto(ctx, ch, bEvents)
				bDone <- watched{stop, err}
			}()
			<-g.held

			// The held replies arrive: the confirmation of A's SUBSCRIBE,
			// then of its UNSUBSCRIBE. A watch of another channel, confirmed
			// after them on the same connection, shows they were handled.
			p.HoldReplies(false)
			_, stopS, err := n.Watch(ctx, ch+"/sentinel")
			if err != nil {
				t.Fatal(err)
			}
			defer stopS()

			if !watchReady(n, ch) {
				// B waits for its own confirmation: let its SUBSCRIBE
				// reach the server.
				g.release()
			}
			w := <-bDone
			if w.err != nil {
				t.Fatalf("B's Watch: %v", w.err)
			}
			defer w.stop()
			// B's Watch returned ready: a release published now must
			// reach it.
			got, err := raw.Publish(ctx, ch, "").Result()
			if err != nil {
				t.Fatal(err)
			}
			g.release()
			if got == 0 {
				t.Fatalf("B's Watch returned ready on the confirmation of A's old SUBSCRIBE, before its own SUBSCRIBE reached the server: the release published right after reached no subscriber and was missed")
			}
			select {
			case <-bEvents:
			case <-time.After(10 * time.Second):
				t.Fatalf("the release published after B's Watch returned ready (%d subscriber) was not delivered", got)
			}
		})
	}
}

// levelCounter counts a logger's records by level, and the failed
// connection attempts the notifier reports.
type levelCounter struct {
	mu       sync.Mutex
	byLevel  map[slog.Level]int
	failures int
}

func (c *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *levelCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *levelCounter) WithGroup(string) slog.Handler            { return c }
func (c *levelCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byLevel[r.Level]++
	if strings.Contains(r.Message, "unavailable") {
		c.failures++
	}
	return nil
}

func (c *levelCounter) counts() (warns, failures int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byLevel[slog.LevelWarn], c.failures
}

// TestNotifierWarnsOncePerOutage: with the server down, the notifier
// retries its connection for as long as it runs, but warns once while a
// waiter watches and not at all once none does.
func TestNotifierWarnsOncePerOutage(t *testing.T) {
	testenv.Get(t, testenv.RedisURL) // the same servers-required policy
	addr := testenv.ClosedAddr(t)    // nothing listens there
	c, err := Dial([]string{addr}, ClientOptions{FailFast: true})
	require.NoError(t, err)
	defer c.Close()
	lc := &levelCounter{byLevel: map[slog.Level]int{}}
	n := NewNotifier(c, slog.New(lc))
	defer n.Close()
	parked := make(chan struct{}, 10)
	setHooks(t, hooks{parked: func() { parked <- struct{}{} }})

	// Two watches in one outage: one warning. Once nobody watches, the
	// notifier stops dialling (parks) until the next watch.
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, _, err = n.Watch(ctx, "down")
		cancel()
		require.Error(t, err, "Watch %d with the server down", i)
		select {
		case <-parked:
		case <-time.After(30 * time.Second):
			t.Fatalf("watch %d: the notifier did not park within 30s of the last watch ending", i)
		}
	}
	warns, failures := lc.counts()
	require.GreaterOrEqual(t, failures, 2, "failed connections")
	require.Equal(t, 1, warns, "warnings over %d failed connections (one outage)", failures)
}

// setHooks installs h for the rest of the test.
func setHooks(t testing.TB, h hooks) {
	testHooks.Store(&h)
	t.Cleanup(func() { testHooks.Store(nil) })
}
