package redis

import (
	_ "embed"

	"github.com/distlock/locker/internal/redisconn"
)

// acquireLua takes a lock and mints its fencing token in one round trip;
// see the script. Release, refresh and TTL are redisconn's scripts, which
// the redlock backend runs too.
//
//go:embed scripts/acquire.lua
var acquireLua string

var acquireScript = redisconn.NewScript("acquire", acquireLua, 2)
