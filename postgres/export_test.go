package postgres

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/locker/backend"
)

// NewDriver returns the driver of a Locker over p whose tables are in
// schema (created when missing), as newLocker makes it, for tests that
// call the driver directly. It is closed when the test ends.
func NewDriver(t testing.TB, p *pgxpool.Pool, schema string) backend.Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	if err := ensureSchema(ctx, p, schema, true); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := &driver{pool: p, schema: schema, channel: schema, sql: newStatements(schema), log: log, stopSweep: make(chan struct{})}
	d.listen = newListener(p.Config().ConnConfig, d.channel, log)
	d.swept.Add(1)
	go d.sweep(time.Hour)
	t.Cleanup(func() { d.Close() })
	return d
}
