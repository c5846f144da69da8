package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/distlock/locker/internal/zkclient"
)

// sessionRange is the span of session timeouts a server negotiates: its
// minSessionTimeout and maxSessionTimeout settings.
type sessionRange struct {
	min, max time.Duration
	server   string
}

func (r sessionRange) String() string {
	return fmt.Sprintf("from %v to %v (minSessionTimeout and maxSessionTimeout of %s)", r.min, r.max, r.server)
}

// probeRange learns a server's session timeout range by asking it for the
// shortest and the longest possible session and reading what it grants: a
// server clamps the timeout a client asks for to its range
// (zkclient.Probe). Each probe
// session is closed at once. The servers are tried in turn; the first that
// answers is used.
func probeRange(ctx context.Context, servers []string) (sessionRange, error) {
	var errs []error
	for _, s := range servers {
		lo, err := zkclient.Probe(ctx, s, 0, 0)
		if err == nil {
			var hi zkclient.Probed
			hi, err = zkclient.Probe(ctx, s, math.MaxInt64, 0)
			if err == nil {
				return sessionRange{min: lo.Granted, max: hi.Granted, server: s}, nil
			}
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return sessionRange{}, errors.Join(errs...)
}
