package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	goredis "github.com/redis/go-redis/v9"
)

// RouteClientLogs sends the lines that go-redis logs on its own to l, at
// level Warn with the attribute client=go-redis, instead of go-redis's
// default destination, stderr. A nil l means slog.Default(), looked up
// at each line.
//
// go-redis has one logger for the whole process, not one per client, so
// this changes what every go-redis client of the process logs, the
// Lockers' and the application's own: that is why the library never
// calls it, and why an application opts in. It may be called more than
// once, from any goroutine: the last call wins. It replaces whatever
// logger was set with goredis.SetLogger, and goredis.SetLogger or
// logging.Disable (github.com/redis/go-redis/v9/logging) replace it in
// turn.
//
// The Lockers' own lines go to their Config.Logger whether or not this is
// called; see the package documentation, # Client libraries' logs.
func RouteClientLogs(l *slog.Logger) {
	routedLogger.Store(l)
	goredis.SetLogger(routedLog{})
}

// routedLogger is the destination of RouteClientLogs: one value for the
// process, as go-redis's logger is, so that a second call only changes
// where the lines go.
var routedLogger atomic.Pointer[slog.Logger]

// routedLog is go-redis's logger after RouteClientLogs.
type routedLog struct{}

func (routedLog) Printf(ctx context.Context, format string, v ...any) {
	l := routedLogger.Load()
	if l == nil {
		l = slog.Default()
	}
	// go-redis starts most lines with its own "redis: ", which would read
	// as this package's; the attribute says whose they are.
	msg := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
	if ctx == nil {
		ctx = context.Background()
	}
	l.Log(ctx, slog.LevelWarn, msg, "client", "go-redis")
}
