// Package redislog records, in tests, what go-redis logs through its
// process-wide logger. It is a package of its own so that internal/testenv,
// which every test module imports, does not bring go-redis with it.
package redislog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// Log records what go-redis logs through its process-wide logger, as
// an application that routes it with go-redis's SetLogger does.
type Log struct {
	mu    sync.Mutex
	lines []string
}

// Record makes go-redis log to a new Log for the rest of the
// test; go-redis's default logger is back once the test ends. go-redis's
// logger is the process's: tests that record it must not run in parallel
// with each other.
func Record(t testing.TB) *Log {
	l := &Log{}
	goredis.SetLogger(l)
	t.Cleanup(logging.Enable)
	return l
}

// Printf is go-redis's logging interface.
func (l *Log) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

// Len returns how many lines go-redis logged.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

// Since returns the lines logged after the first n.
func (l *Log) Since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[min(n, len(l.lines)):]...)
}

// About returns the lines that name addr.
func (l *Log) About(addr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, addr) {
			out = append(out, s)
		}
	}
	return out
}
