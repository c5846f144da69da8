package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/doctortest"
	"github.com/distlock/locker/internal/testenv"
)

// TestDiagnoseDevCluster: the development cluster of three passes every
// check: its members, their leader, the lease TTL, no alarm, and each
// member's health and round trip.
func TestDiagnoseDevCluster(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdClusterURL)
	d := doctortest.Diagnose(t, raw)
	if d.Worst() != locker.Pass {
		t.Errorf("the development cluster does not pass: %s", doctortest.Show(d))
	}
	hosts := testenv.Hosts(t, raw)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "members", strings.Join(hosts, ",")), locker.Pass, "3 voting member(s)")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "leader", ""), locker.Pass, "agree that the leader is")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "lease-ttl", ""), locker.Pass, "the TTL 30s gets a lease of 30s")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "alarms", ""), locker.Pass, "no alarm")
	for _, h := range hosts {
		doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", h), locker.Pass, "answers")
		doctortest.Finding(t, d, "rtt", h)
	}
}

// TestDiagnoseDevServer: the single development member warns that it is
// alone, and fails nothing; a TTL below the shortest lease the server
// grants (learnt here from a lease of our own), which Open refuses, fails; a URL naming one member of three warns.
func TestDiagnoseDevServer(t *testing.T) {
	raw := testenv.Get(t, testenv.EtcdURL)
	d := doctortest.Diagnose(t, raw)
	if d.Worst() == locker.Fail {
		t.Errorf("a failing finding on the development server: %s", doctortest.Show(d))
	}
	doctortest.WantStatus(t, doctortest.Finding(t, d, "members", testenv.Hosts(t, raw)[0]), locker.Warn, "a single member")

	// The shortest lease, as the server grants it to a client of our own.
	cli, err := clientv3.New(clientv3.Config{Endpoints: testenv.Hosts(t, raw), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	cli.Revoke(ctx, lease.ID)
	minTTL := time.Duration(lease.TTL) * time.Second
	short := fmt.Sprintf("%s?ttl=%v", raw, minTTL-500*time.Millisecond)
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, short), "lease-ttl", ""), locker.Fail, fmt.Sprintf("the TTL %v is below the shortest lease the cluster grants, %v", minTTL-500*time.Millisecond, minTTL))

	one := testenv.Hosts(t, testenv.Get(t, testenv.EtcdClusterURL))[0]
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, "etcd://"+one), "members", one), locker.Warn, "the URL names 1 endpoint(s): when the members")
}

// TestDiagnoseUnreachable: a cluster that does not answer is one failing
// finding, within the dial timeout.
func TestDiagnoseUnreachable(t *testing.T) {
	testenv.Get(t, testenv.EtcdURL) // the servers-required policy applies
	dead := testenv.ClosedAddr(t)
	d := doctortest.Diagnose(t, "etcd://"+dead+"?dial_timeout=500ms")
	if len(d.Findings) != 1 {
		t.Fatalf("want one finding: %s", doctortest.Show(d))
	}
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", dead), locker.Fail, "no endpoint answers")
}

// TestDiagnoseURLErrors: a URL that Open refuses before it looks at a
// server gets Open's error from Diagnose, word for word.
func TestDiagnoseURLErrors(t *testing.T) {
	for _, raw := range []string{
		"etcd://127.0.0.1:1?colour=blue",
		"etcd://127.0.0.1:1?dial_timeout=soon",
		"etcd://127.0.0.1:1?dial_timeout=-1s",
		"etcd://127.0.0.1:1?cacert=" + os.DevNull,
		"etcds://127.0.0.1:1?cacert=/nonexistent/ca.pem",
		"etcd://127.0.0.1:1,,127.0.0.1:2",
	} {
		l, openErr := locker.Open(context.Background(), raw)
		if openErr == nil {
			l.Close()
			t.Fatalf("Open(%q) succeeded; the case is wrong", raw)
		}
		d, err := locker.Diagnose(context.Background(), raw)
		if err == nil || err.Error() != openErr.Error() {
			t.Errorf("Diagnose(%q) = %s, %v; want Open's error %v", raw, doctortest.Show(d), err, openErr)
		}
	}
}
