package redisconn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
}

// NewGoRedis adapts c. Close closes c only if owned.
func NewGoRedis(c goredis.UniversalClient, owned bool) Conn {
	return &goredisConn{c: c, owned: owned}
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

// blockSlice bounds one BLPOP so that it stays well inside go-redis's
// default read timeout (3 s), which applies to raw commands.
const blockSlice = time.Second

func (g *goredisConn) BLPop(ctx context.Context, key string, timeout time.Duration) (bool, error) {
	var node *goredis.Client
	switch c := g.c.(type) {
	case *goredis.Client:
		node = c
	case *goredis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, key); err != nil {
			return false, err
		}
	default:
		return false, fmt.Errorf("redis: blocking wake-up list needs a *Client or *ClusterClient, not %T", g.c)
	}
	cn := node.Conn()
	defer cn.Close()
	id, err := cn.ClientID(ctx).Result()
	if err != nil {
		return false, err
	}
	// A cancelled wait is ended by CLIENT UNBLOCK from another connection,
	// so the blocked connection goes back to the pool clean.
	stop := context.AfterFunc(ctx, func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		node.ClientUnblock(uctx, id)
	})
	defer stop()
	timeout = min(timeout, blockSlice)
	// The raw command: go-redis's BLPop rounds timeouts below 1 s up to 1 s.
	secs := strconv.FormatFloat(max(timeout.Seconds(), 0.001), 'f', 3, 64)
	err = cn.Do(context.WithoutCancel(ctx), "BLPOP", key, secs).Err()
	if errors.Is(err, goredis.Nil) {
		return false, ctx.Err()
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

func (g *goredisConn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	return g.c.SetNX(ctx, key, value, ttl).Result()
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
	if g.owned {
		return g.c.Close()
	}
	return nil
}
