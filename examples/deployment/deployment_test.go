// Package deployment is the README's deployment check: the conformance
// suite run from go test against the backend $LOCKER_URL names, the
// embedded one when it is unset.
package deployment

import (
	"os"
	"testing"

	"github.com/distlock/locker/conformance"
	_ "github.com/distlock/locker/etcd"
	_ "github.com/distlock/locker/memory"
	_ "github.com/distlock/locker/redis"
	_ "github.com/distlock/locker/redlock"
	_ "github.com/distlock/locker/zookeeper"
)

func TestMyDeployment(t *testing.T) {
	url := os.Getenv("LOCKER_URL") // your deployment, e.g. redis://10.0.0.5:6379
	if url == "" {
		url = "memory://" // the embedded backend
	}
	conformance.Run(t, conformance.URLHarness(url))
}
