package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/distlock/locker"
)

// TestLogHandler: the library's records read as lockctl's lines, and the
// records skip picks (a lock's loss, for run) are left out.
func TestLogHandler(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(newLogHandler(&b, slog.LevelWarn, isLockLoss))
	log.Info("locker: not shown, below the level")
	log.Warn("locker: refresh failed, retrying", "key", "jobs/nightly", "err", errors.New("dial tcp: connection refused"))
	log.Warn("locker: lock lost: the server no longer has it", "key", "jobs/nightly", "err", fmt.Errorf("x: %w", locker.ErrNotHeld))
	log.With("node", "h:1").WithGroup("g").Error("redlock: node skipped", "n", 3, slog.Group("s", "a", ""))
	want := `lockctl: warning: locker: refresh failed, retrying (key=jobs/nightly err="dial tcp: connection refused")
lockctl: error: redlock: node skipped (node=h:1 g.n=3 g.s.a="")
`
	if b.String() != want {
		t.Errorf("logged\n%s\nwant\n%s", b.String(), want)
	}
}
