package testenv

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/internal/freeport"
)

// Redis is a private redis-server that a test starts, stops and restarts,
// on a free loopback port, without persistence: a restart loses its data,
// as a crashed server without AOF does.
type Redis struct {
	t    testing.TB
	addr string
	args []string
	dir  string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server with extra args and stops it when the
// test ends. It needs the binary from scripts/services.sh's environment.
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	Get(t, RedisServer) // the servers-required policy applies
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Redis{t: t, addr: addr, args: args, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Redis) Addr() string { return s.addr }

// Start starts the server again after Stop; it is empty.
func (s *Redis) Start() {
	s.t.Helper()
	if s.cmd != nil {
		return
	}
	_, port, _ := net.SplitHostPort(s.addr)
	args := append([]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", s.dir}, s.args...)
	s.cmd = exec.Command(Get(s.t, RedisServer), args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	for i := 0; !redisPing(s.addr); i++ {
		if i == 500 {
			s.t.Fatalf("redis-server on %s did not answer within 5s", s.addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server, as a crash would.
func (s *Redis) Stop() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}
