package redisconn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// goredisConn adapts a go-redis v9 UniversalClient: *Client (single node or
// a Sentinel failover client) or *ClusterClient.
type goredisConn struct {
	c     goredis.UniversalClient
	owned bool
	gate  *dialGate // nil for a client Dial did not build
}

// NewGoRedis adapts c, which must not be nil (see IsNil). Close closes c
// only if owned.
func NewGoRedis(c goredis.UniversalClient, owned bool) Conn {
	return guardGoRedis(&goredisConn{c: c, owned: owned}, c)
}

func (g *goredisConn) Eval(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	v, err := g.c.EvalSha(ctx, s.sha, keys, args...).Result()
	if IsNoScript(err) {
		v, err = g.c.Eval(ctx, s.src, keys, args...).Result()
	}
	return v, err
}

func (g *goredisConn) EvalMany(ctx context.Context, s *Script, calls []Call) []Reply {
	out := make([]Reply, len(calls))
	cmds := make([]*goredis.Cmd, len(calls))
	// Errors are read per command below; Pipelined's own error is the first
	// of them.
	_, _ = g.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = p.EvalSha(ctx, s.sha, c.Keys, c.Args...)
		}
		return nil
	})
	for i, cmd := range cmds {
		v, err := cmd.Result()
		if IsNoScript(err) {
			v, err = g.Eval(ctx, s, calls[i].Keys, calls[i].Args...)
		}
		out[i] = Reply{v, err}
	}
	return out
}

func (g *goredisConn) KeyGroup(key string) (int, bool) {
	switch g.c.(type) {
	case *goredis.Client:
		return 0, true
	case *goredis.ClusterClient:
		return Slot(key), true
	}
	return 0, false
}

func (g *goredisConn) Subscribe(ctx context.Context) (PubSub, error) {
	ps := g.c.Subscribe(ctx)
	// Subscribe with no channels connects lazily; a PING makes a dead server
	// show up here rather than at the first Watch.
	if err := ps.Ping(ctx); err != nil {
		ps.Close()
		return nil, err
	}
	return &goredisPubSub{ps}, nil
}

type goredisPubSub struct{ ps *goredis.PubSub }

func (p *goredisPubSub) Subscribe(ctx context.Context, channels ...string) error {
	return p.ps.Subscribe(ctx, channels...)
}

func (p *goredisPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	return p.ps.Unsubscribe(ctx, channels...)
}

func (p *goredisPubSub) Receive(ctx context.Context) (string, Event, error) {
	for {
		m, err := p.ps.Receive(ctx)
		if err != nil {
			return "", 0, err
		}
		switch m := m.(type) {
		case *goredis.Message:
			return m.Channel, EventMessage, nil
		case *goredis.Subscription:
			switch m.Kind {
			case "subscribe":
				return m.Channel, EventSubscribed, nil
			case "unsubscribe":
				return m.Channel, EventUnsubscribed, nil
			}
		}
	}
}

// go-redis's PubSub.Close is safe to call while another goroutine receives.
func (p *goredisPubSub) Interrupt()   { p.ps.Close() }
func (p *goredisPubSub) Close() error { return p.ps.Close() }

func (g *goredisConn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	return g.c.SetNX(ctx, key, value, time.Duration(Millis(ttl))*time.Millisecond).Result()
}

func (g *goredisConn) Servers(ctx context.Context) ([]Server, error) {
	var (
		mu  sync.Mutex
		out []Server
	)
	collect := func(_ context.Context, c *goredis.Client) error {
		mu.Lock()
		out = append(out, goredisServer{c, c.Options().Addr})
		mu.Unlock()
		return nil
	}
	var err error
	switch c := g.c.(type) {
	case *goredis.Client:
		return []Server{goredisServer{c, c.Options().Addr}}, nil
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, collect)
	case *goredis.Ring:
		err = c.ForEachShard(ctx, collect)
	default:
		// Some other UniversalClient: all it offers is the commands, which
		// it sends where it sees fit.
		return []Server{goredisServer{g.c, ""}}, nil
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Server) int { return strings.Compare(a.Addr(), b.Addr()) })
	return out, nil
}

// goredisServer is one server of a go-redis client.
type goredisServer struct {
	c    goredis.Cmdable
	addr string
}

func (s goredisServer) Addr() string { return s.addr }

func (s goredisServer) ConfigGet(ctx context.Context, name string) (string, error) {
	m, err := s.c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("redis: CONFIG GET %s returned nothing", name)
	}
	return v, nil
}

func (g *goredisConn) Close() error {
	if !g.owned {
		return nil
	}
	if g.gate != nil {
		g.gate.close()
	}
	return g.c.Close()
}
