package redis

import (
	_ "embed"

	"github.com/distlock/locker/internal/redisconn"
)

// acquireLua takes an exclusive lock and mints its fencing token in one
// round trip; see the script. Shared and permit holds (redisconn.Hold),
// release, refresh and TTL are redisconn's scripts, which the redlock
// backend runs too.
//
//go:embed scripts/acquire.lua
var acquireLua string

var acquireScript = redisconn.NewScript("acquire", redisconn.WithHolds(acquireLua), 2)
