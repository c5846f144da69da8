package zookeeper_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/doctortest"
	"github.com/distlock/locker/internal/testenv"
)

// TestDiagnoseDevEnsemble: the development ensemble of three has no
// failing or warning finding; each server is checked, and one leads.
func TestDiagnoseDevEnsemble(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	d := doctortest.Diagnose(t, raw)
	if d.Worst() != locker.Pass {
		t.Errorf("the development ensemble does not pass: %s", doctortest.Show(d))
	}
	hosts := testenv.Hosts(t, raw)
	all := strings.Join(hosts, ",")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ensemble", all), locker.Pass, "3 voting member(s); the URL names 3; the leader is")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", all), locker.Pass, "3 of the 3")
	for _, h := range hosts {
		for _, check := range []string{"reachable", "session-timeout", "rtt"} {
			doctortest.Finding(t, d, check, h)
		}
	}
}

// TestDiagnoseDevServer: the single development server warns that it is
// alone, and fails nothing; a TTL outside its session timeouts, which
// Open refuses, fails.
func TestDiagnoseDevServer(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	d := doctortest.Diagnose(t, raw)
	if d.Worst() == locker.Fail {
		t.Errorf("a failing finding on the development server: %s", doctortest.Show(d))
	}
	host := testenv.Hosts(t, raw)[0]
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ensemble", host), locker.Warn, "a single server")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "session-timeout", host), locker.Pass, "the TTL 30s is within")

	short := raw + "?ttl=1ms"
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	doctortest.WantStatus(t, doctortest.Finding(t, doctortest.Diagnose(t, short), "session-timeout", host), locker.Fail, "the TTL 1ms is outside")
}

// TestDiagnoseServerDown: a server the URL names that grants no session
// fails; while the others are fewer than a majority of the URL's, the
// quorum check warns.
func TestDiagnoseServerDown(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperEnsembleURL))
	dead := testenv.ClosedAddr(t)
	named := []string{hosts[0], dead}
	d := doctortest.Diagnose(t, "zk://"+strings.Join(named, ","))
	doctortest.WantStatus(t, doctortest.Finding(t, d, "reachable", dead), locker.Fail, "no session")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", strings.Join(named, ",")), locker.Warn, "1 of the 2")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ensemble", strings.Join(named, ",")), locker.Warn, "the URL names 2")

	d = doctortest.Diagnose(t, "zk://"+dead)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "quorum", dead), locker.Fail, "0 of the 1")
}

// TestDiagnoseNoMntr: a server that does not allow mntr still tells its
// role through srvr; the four-letter-word check warns what is missing.
func TestDiagnoseNoMntr(t *testing.T) {
	s := startZK(t, time.Second, 4*time.Second) // allows ruok, srvr, cons
	d := doctortest.Diagnose(t, "zk://"+s.addr)
	doctortest.WantStatus(t, doctortest.Finding(t, d, "four-letter-words", s.addr), locker.Warn, "mntr: not in the server's 4lw.commands.whitelist")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "ensemble", s.addr), locker.Warn, "a single server")
	doctortest.WantStatus(t, doctortest.Finding(t, d, "session-timeout", s.addr), locker.Fail, "the TTL 30s is outside the session timeouts the server grants, from 1s to 4s")
}

// TestDiagnoseURLErrors: a URL that Open refuses before it looks at a
// server gets Open's error from Diagnose, word for word.
func TestDiagnoseURLErrors(t *testing.T) {
	for _, raw := range []string{
		"zk://127.0.0.1:1?colour=blue",
		"zookeeper://127.0.0.1:1,,127.0.0.1:2",
		"zk://127.0.0.1:1/a//b",
		"zk://127.0.0.1:1/a/../b",
		"zk://user@127.0.0.1:1",
		"zk://127.0.0.1:1?ttl=-5s",
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

// TestDiagnoseConnectionLimit: doctor reports the maxClientCnxns a server
// tells through conf, and says plainly when the server does not allow
// conf. A server at its limit closes a new connection before answering,
// and doctor's reachable finding names that limit as the likely cause.
func TestDiagnoseConnectionLimit(t *testing.T) {
	t.Run("conf not allowed", func(t *testing.T) {
		s := startZK(t, time.Second, 4*time.Second) // allows ruok, srvr, cons
		d := doctortest.Diagnose(t, "zk://"+s.addr)
		doctortest.WantStatus(t, doctortest.Finding(t, d, "connection-limit", s.addr), locker.Pass, "does not allow the four-letter word conf")
	})
	t.Run("limit", func(t *testing.T) {
		addr := startZKConf(t, "maxClientCnxns=3\n4lw.commands.whitelist=ruok,srvr,mntr,conf\n")
		d := doctortest.Diagnose(t, "zk://"+addr)
		doctortest.WantStatus(t, doctortest.Finding(t, d, "connection-limit", addr), locker.Pass, "maxClientCnxns is 3: ")

		// Hold the three connections the server allows this address.
		for range 3 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
		// The server counts a connection once its selector thread has
		// taken it in: the fourth is refused once it has.
		var f locker.Finding
		testenv.WaitFor(t, 30*time.Second, "a fourth connection refused", func() bool {
			f = doctortest.Finding(t, doctortest.Diagnose(t, "zk://"+addr), "reachable", addr)
			return f.Status == locker.Fail
		})
		doctortest.WantStatus(t, f, locker.Fail, "maxClientCnxns")
	})
	t.Run("no limit", func(t *testing.T) {
		addr := startZKConf(t, "maxClientCnxns=0\n4lw.commands.whitelist=ruok,srvr,mntr,conf\n")
		d := doctortest.Diagnose(t, "zk://"+addr)
		doctortest.WantStatus(t, doctortest.Finding(t, d, "connection-limit", addr), locker.Pass, "maxClientCnxns is 0: no limit")
	})
}
