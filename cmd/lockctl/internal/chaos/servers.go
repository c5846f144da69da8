package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/freeport"
)

// redisServer is a redis-server the engine started for the scenarios
// that restart servers, on a loopback port of its own.
type redisServer struct {
	bin  string
	dir  string
	port int
	args []string
	// conf, if set, is a config file written before each start and
	// given first: a Sentinel's.
	conf func(s *redisServer) string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	// link is the proxy a replica reaches this master through, if any.
	link *conformance.Proxy
}

// startRedis starts redis-server bin in a directory of its own under dir,
// on a free loopback port, with args, and waits until it answers.
func startRedis(ctx context.Context, bin, dir string, args ...string) (*redisServer, error) {
	s, err := newRedis(bin, dir, args...)
	if err != nil {
		return nil, err
	}
	return s, s.start(ctx)
}

// newRedis prepares a redis-server on a free port, in a directory of its
// own under dir, without starting it.
func newRedis(bin, dir string, args ...string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &redisServer{bin: bin, dir: filepath.Join(dir, "redis-"+strconv.Itoa(port)), port: port, args: args}
	return s, os.MkdirAll(s.dir, 0o755)
}

// freePort returns a loopback port nothing listens on now, which no
// connection the machine opens can take while the server on it is down
// (freeport's package doc says why a kernel-chosen port could be).
func freePort() (int, error) { return freeport.Pick() }

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// start runs the server and waits until it answers PING. A server that
// exits first (the port was taken meanwhile) is an error that says so.
func (s *redisServer) start(ctx context.Context) error {
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir}, s.args...)
	if s.conf != nil {
		path := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(s.conf(s)), 0o644); err != nil {
			return err
		}
		args = append([]string{path, "--sentinel"}, args...)
	}
	s.cmd = exec.Command(s.bin, args...)
	out := &tail{}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.done = make(chan struct{})
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server on %s exited at start%s", s.addr(), out.say())
		case <-time.After(20 * time.Millisecond):
		}
		if s.ping(ctx) == nil {
			return nil
		}
	}
	s.kill()
	return fmt.Errorf("redis-server on %s did not answer within 15s%s", s.addr(), out.say())
}

func (s *redisServer) client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
}

func (s *redisServer) ping(ctx context.Context) error {
	c := s.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// kill kills the server with SIGKILL, as a crash would.
func (s *redisServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		<-s.done
	}
}

// stop kills the server for good, with the proxy its replica used.
func (s *redisServer) stop() {
	s.kill()
	if s.link != nil {
		s.link.Close()
	}
}

// restart kills the server and starts it again on its port after down:
// what it kept is what its persistence settings kept.
func (s *redisServer) restart(ctx context.Context, down time.Duration) error {
	s.kill()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return s.start(ctx)
}

// expireEarly does to the lock key of key on this server what a clock
// running ahead does: the key expires at once. It cuts the key's
// remaining TTL to 1 ms and returns the TTL it had. The key is found by
// its name, which holds the lock's key in braces ({k:KEY}).
func (s *redisServer) expireEarly(ctx context.Context, key string) (time.Duration, error) {
	c := s.client()
	defer c.Close()
	keys, err := c.Keys(ctx, "*{k:"+globEscape(key)+"}").Result()
	if err != nil {
		return 0, fmt.Errorf("clock agent on %s: %w", s.addr(), err)
	}
	if len(keys) != 1 {
		return 0, fmt.Errorf("clock agent on %s: want one lock key for %q, found %q", s.addr(), key, keys)
	}
	left, err := c.PTTL(ctx, keys[0]).Result()
	if err == nil {
		err = c.PExpire(ctx, keys[0], time.Millisecond).Err()
	}
	if err != nil {
		return 0, fmt.Errorf("clock agent on %s: %w", s.addr(), err)
	}
	return left, nil
}

// globEscape escapes what KEYS patterns treat specially.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// ownServersFor starts the servers a scenario of set needs on backend,
// and returns them with the URL that names them.
func ownServersFor(ctx context.Context, set serverSet, backend, bin, dir string) ([]*redisServer, string, error) {
	n, args := 1, []string{"--save", "", "--appendonly", "no"}
	if set == ownAOF {
		args = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}
	}
	if backend == "redlock" {
		n = 5
	}
	if set == ownFailover {
		return sentinelGroup(ctx, bin, dir)
	}
	var servers []*redisServer
	var hosts []string
	for range n {
		s, err := startRedis(ctx, bin, dir, args...)
		if err != nil {
			stopServers(servers)
			return nil, "", err
		}
		servers = append(servers, s)
		hosts = append(hosts, s.addr())
	}
	return servers, backend + "://" + strings.Join(hosts, ","), nil
}

func stopServers(servers []*redisServer) {
	for _, s := range servers {
		s.stop()
	}
}

// findRedisServer returns the redis-server binary to start: bin if given,
// else $LOCKER_TEST_REDIS_SERVER, else redis-server on $PATH.
func findRedisServer(bin string) (string, error) {
	return findBinary(bin, "LOCKER_TEST_REDIS_SERVER", "redis-server", "--redis-server")
}

// findBinary returns the binary flagValue names, else the one the
// variable env names, else name on $PATH.
func findBinary(flagValue, env, name, flag string) (string, error) {
	if flagValue != "" {
		p, err := exec.LookPath(flagValue)
		if err != nil {
			return "", fmt.Errorf("%s %s: not found or not executable", flag, flagValue)
		}
		return p, nil
	}
	for _, b := range []string{os.Getenv(env), name} {
		if p, err := exec.LookPath(b); b != "" && err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s on $PATH nor in $%s: the scenarios that start servers of their own need one (%s PATH)", name, env, flag)
}
