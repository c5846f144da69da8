package redisconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// redigoConn adapts a redigo connection pool.
type redigoConn struct {
	pool  *redigo.Pool
	owned bool
}

// NewRedigo adapts p, which must not be nil. Close closes p only if owned.
func NewRedigo(p *redigo.Pool, owned bool) Conn {
	return guardRedigo(&redigoConn{pool: p, owned: owned}, p)
}

func (r *redigoConn) get(ctx context.Context) (redigo.Conn, error) {
	c, err := r.pool.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func evalArgs(s *Script, keys []string, args []any) []any {
	a := make([]any, 0, 2+len(keys)+len(args))
	a = append(a, s.sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	return append(a, args...)
}

func (r *redigoConn) Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	a := evalArgs(s, keys, args)
	v, err := redigo.DoContext(c, ctx, "EVALSHA", a...)
	if IsNoScript(err) {
		a[0] = s.src
		v, err = redigo.DoContext(c, ctx, "EVAL", a...)
	}
	return v, err
}

// KeyGroup: a redigo pool reaches one server.
func (r *redigoConn) KeyGroup(string) (int, bool) { return 0, true }

func (r *redigoConn) EvalMany(ctx context.Context, s *Script, calls []Call) []Reply {
	out := make([]Reply, len(calls))
	fail := func(err error) []Reply {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	c, err := r.get(ctx)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	for _, cl := range calls {
		if err := c.Send("EVALSHA", evalArgs(s, cl.Keys, cl.Args)...); err != nil {
			return fail(err)
		}
	}
	if err := c.Flush(); err != nil {
		return fail(err)
	}
	for i := range calls {
		v, err := redigo.ReceiveContext(c, ctx)
		var rerr redigo.Error
		if err != nil && !errors.As(err, &rerr) {
			// The connection broke: the remaining replies are lost too.
			for j := i; j < len(calls); j++ {
				out[j].Err = err
			}
			break
		}
		out[i] = Reply{v, err}
	}
	for i, o := range out {
		if IsNoScript(o.Err) {
			out[i].Val, out[i].Err = r.Eval(ctx, s, calls[i].Keys, calls[i].Args...)
		}
	}
	return out
}

func (r *redigoConn) Subscribe(ctx context.Context) (PubSub, error) {
	c, err := r.get(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := redigo.DoContext(c, ctx, "PING"); err != nil {
		c.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	return &redigoPubSub{psc: redigo.PubSubConn{Conn: c}, ctx: rctx, cancel: cancel}, nil
}

// redigoPubSub receives with a context that interrupt cancels: redigo ends
// a ReceiveContext whose context is done, whereas closing the connection
// under a receiving goroutine is a data race.
type redigoPubSub struct {
	psc    redigo.PubSubConn
	ctx    context.Context
	cancel context.CancelFunc
}

func toAny(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

func (p *redigoPubSub) Subscribe(_ context.Context, channels ...string) error {
	return p.psc.Subscribe(toAny(channels)...)
}

func (p *redigoPubSub) Unsubscribe(_ context.Context, channels ...string) error {
	return p.psc.Unsubscribe(toAny(channels)...)
}

func (p *redigoPubSub) Receive(ctx context.Context) (string, Event, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(p.ctx, stop)()
	for {
		switch m := p.psc.ReceiveContext(ctx).(type) {
		case error:
			return "", 0, m
		case redigo.Message:
			return m.Channel, EventMessage, nil
		case redigo.Subscription:
			switch m.Kind {
			case "subscribe":
				return m.Channel, EventSubscribed, nil
			case "unsubscribe":
				return m.Channel, EventUnsubscribed, nil
			}
		}
	}
}

func (p *redigoPubSub) Interrupt() { p.cancel() }

func (p *redigoPubSub) Close() error {
	p.cancel()
	return p.psc.Close()
}

func (r *redigoConn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	c, err := r.get(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	v, err := redigo.DoContext(c, ctx, "SET", key, value, "NX", "PX", Millis(ttl))
	if err != nil {
		return false, err
	}
	return v != nil, nil // "OK", or nil when the key exists
}

// Servers is the one server the pool dials; redigo has no cluster client.
func (r *redigoConn) Servers(context.Context) ([]Server, error) {
	return []Server{redigoServer{r}}, nil
}

type redigoServer struct{ r *redigoConn }

// Addr is unknown: the pool's Dial function decides where it connects.
func (redigoServer) Addr() string { return "" }

func (s redigoServer) ConfigGet(ctx context.Context, name string) (string, error) {
	c, err := s.r.get(ctx)
	if err != nil {
		return "", err
	}
	defer c.Close()
	kv, err := redigo.StringMap(redigo.DoContext(c, ctx, "CONFIG", "GET", name))
	if err != nil {
		return "", err
	}
	v, ok := kv[name]
	if !ok {
		return "", fmt.Errorf("redis: CONFIG GET %s returned nothing", name)
	}
	return v, nil
}

func (r *redigoConn) Close() error {
	if r.owned {
		return r.pool.Close()
	}
	return nil
}
