package redis

import (
	_ "embed"

	"github.com/distlock/locker/internal/redisconn"
)

// The scripts, one round trip each. See scripts/ for what each does.
var (
	//go:embed scripts/acquire.lua
	acquireLua string
	//go:embed scripts/release.lua
	releaseLua string
	//go:embed scripts/refresh.lua
	refreshLua string
	//go:embed scripts/pttl.lua
	pttlLua string

	acquireScript = redisconn.NewScript("acquire", acquireLua, 2)
	releaseScript = redisconn.NewScript("release", releaseLua, 2)
	refreshScript = redisconn.NewScript("refresh", refreshLua, 1)
	pttlScript    = redisconn.NewScript("pttl", pttlLua, 1)
)
