package redlock_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/doctortest"
	"github.com/distlock/locker/internal/testenv"
)

// TestDiagnoseDevNodes: the development nodes have no failing finding,
// and each is checked as a Redis server and against node_timeout.
func TestDiagnoseDevNodes(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	d := doctortest.Diagnose(t, raw)
	if d.Worst() == locker.Fail {
		t.Errorf("a failing finding on the development nodes: %s", doctortest.Show(d))
	}
	hosts := testenv.Hosts(t, raw)
	all := strings.Join(hosts, ",")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", all), locker.Pass, "5 of 5 nodes answer")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "independence", all), locker.Pass, "distinct servers")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "clock-skew", all), locker.Pass, "drift allowance for the TTL 30s is 302ms")
	for _, h := range hosts {
		for _, check := range []string{"reachable", "maxmemory-policy", "persistence", "replication", "rtt", "node-timeout"} {
			doctortest.Finding(t, d, check, h)
		}
	}
}

// TestDiagnoseDeadNodes: a node that does not answer fails its
// reachability check; the quorum check fails only once no majority
// answers.
func TestDiagnoseDeadNodes(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.RedlockURL))
	dead1, dead2 := testenv.ClosedAddr(t), testenv.ClosedAddr(t)

	nodes := []string{hosts[0], hosts[1], dead1}
	d := doctortest.Diagnose(t, "redlock://"+strings.Join(nodes, ","))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", dead1), locker.Fail, "unreachable")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", hosts[0]), locker.Pass, "answers")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", strings.Join(nodes, ",")), locker.Pass, "2 of 3 nodes answer")
	if d.Worst() != locker.Fail {
		t.Errorf("worst = %v with a node down, want fail", d.Worst())
	}

	nodes = []string{hosts[0], dead1, dead2}
	d = doctortest.Diagnose(t, "redlock://"+strings.Join(nodes, ","))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", strings.Join(nodes, ",")), locker.Fail, "1 of 3 nodes answer")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "clock-skew", strings.Join(nodes, ",")), locker.Warn, "too few")
}

// TestDiagnoseNodeCount: fewer than three nodes fail, unless the URL
// allows it; an even number warns.
func TestDiagnoseNodeCount(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.RedlockURL))
	two := "redlock://" + strings.Join(hosts[:2], ",")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, two), "nodes", ""), locker.Fail, "2 node(s)")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, two+"?allow_few_nodes=true"), "nodes", ""), locker.Warn, "allow_few_nodes=true")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, "redlock://"+strings.Join(hosts[:4], ",")), "nodes", ""), locker.Warn, "an even number")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, "redlock://"+strings.Join(hosts[:3], ",")), "nodes", ""), locker.Pass, "tolerate 1 failure")
}

// TestDiagnoseTTL: the TTL is judged against Redlock's range and drift
// rule; one that Open refuses fails.
func TestDiagnoseTTL(t *testing.T) {
	raw := testenv.Get(t, testenv.RedlockURL)
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw+"?min_drift=5ms"), "ttl", ""), locker.Pass, "leaves 29.695s of validity after the clock-drift allowance of 305ms")
	short := raw + "?ttl=8ms"
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, short), "ttl", ""), locker.Fail, "TTL 8ms is below this backend's minimum of 10ms")
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, raw+"?ttl=20ms&min_drift=20ms"), "ttl", ""), locker.Fail, "leaves no validity after the clock-drift allowance")
}

// TestDiagnoseSameServerTwice: one server listed under two names is
// counted twice by Redlock, which the independence check fails.
func TestDiagnoseSameServerTwice(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.RedlockURL))
	_, port, _ := net.SplitHostPort(hosts[0])
	nodes := []string{hosts[0], hosts[1], net.JoinHostPort("localhost", port)}
	d := doctortest.Diagnose(t, "redlock://"+strings.Join(nodes, ","))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "independence", strings.Join(nodes, ",")), locker.Fail, hosts[0]+" and localhost:"+port+" are one server")
}

// TestDiagnoseURLErrors: a URL that Open refuses before it looks at a
// server gets Open's error from Diagnose, word for word.
func TestDiagnoseURLErrors(t *testing.T) {
	for _, raw := range []string{
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?colour=blue",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:1",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?drift_factor=lots",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?drift_factor=1.5",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?node_timeout=-1s",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?allow_few_nodes=perhaps",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?client=hiredis",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/db",
		"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?cacert=" + os.DevNull,
		"redlock://127.0.0.1:1,,127.0.0.1:3",
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
