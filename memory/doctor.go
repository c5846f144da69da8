package memory

import (
	"context"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/memstore"
)

func init() {
	locker.RegisterDiagnoser("memory", diagnose)
}

// diagnose is the locker.Diagnoser of memory:// URLs: the URL is read by
// open, with its errors, and there is nothing to check but the TTL, as
// the store lives in the process.
func diagnose(ctx context.Context, u *locker.URL) ([]locker.Finding, error) {
	l, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	l.Close()
	d := memstore.NewDriver(memstore.NewStore()) // only its range is read
	defer d.Close()
	return []locker.Finding{{
		Check: "backend", Status: locker.Pass,
		Detail: "in-process store: its locks are shared by the goroutines of this process only, and there is no server to check",
	}, locker.TTLFinding(d, u.DefaultTTL())}, nil
}
