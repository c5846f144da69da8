package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The variables that scripts/services.sh sets for the test servers.
const (
	envRedis   = "LOCKER_TEST_REDIS_URL"
	envRedlock = "LOCKER_TEST_REDLOCK_URL"
	envZK      = "LOCKER_TEST_ZK_URL"
	envEtcd    = "LOCKER_TEST_ETCD_URL"
	// envPostgres names the primary, as role locker, which may create
	// the schemas the Locker and the raw designs need.
	envPostgres = "LOCKER_TEST_POSTGRES_URL"
)

// serverURL returns the URL in the variable env. When it is unset the
// test skips, or fails under LOCKER_REQUIRE_SERVERS=1 (as make test
// sets), so that a run that silently tested nothing cannot pass.
func serverURL(t testing.TB, env string) string {
	t.Helper()
	if v := os.Getenv(env); v != "" {
		return v
	}
	msg := env + " is not set; start the servers with `make services-up` and `eval $(scripts/services.sh env)`, or run `make test`"
	if os.Getenv("LOCKER_REQUIRE_SERVERS") == "1" {
		t.Fatalf("%s (and LOCKER_REQUIRE_SERVERS=1 forbids skipping)", msg)
	}
	t.Skip(msg)
	return ""
}
