package zookeeper_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/testenv"
)

// diagnose runs locker.Diagnose on raw and fails the test on an error.
func diagnose(t *testing.T, raw string) locker.Diagnosis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := locker.Diagnose(ctx, raw)
	if err != nil {
		t.Fatalf("Diagnose(%q): %v", raw, err)
	}
	return d
}

// finding returns d's finding of check about target, failing the test if
// there is none.
func finding(t *testing.T, d locker.Diagnosis, check, target string) locker.Finding {
	t.Helper()
	for _, f := range d.Findings {
		if f.Check == check && f.Target == target {
			return f
		}
	}
	t.Fatalf("no %s finding about %q in %s", check, target, show(d))
	return locker.Finding{}
}

func show(d locker.Diagnosis) string {
	var b strings.Builder
	b.WriteString(d.URL + ":")
	for _, f := range d.Findings {
		b.WriteString("\n  [" + f.Status.String() + "] " + f.Check + " " + f.Target + ": " + f.Detail)
	}
	return b.String()
}

// wantStatus checks a finding's status, and that it has a fix exactly
// when it did not pass.
func wantStatus(t *testing.T, f locker.Finding, want locker.Status, detail string) {
	t.Helper()
	if f.Status != want || !strings.Contains(f.Detail, detail) || (f.Fix == "") != (want == locker.Pass) {
		t.Errorf("%s %s = [%v] %q (fix %q); want [%v] with %q, and a fix unless it passes", f.Check, f.Target, f.Status, f.Detail, f.Fix, want, detail)
	}
}

// TestDiagnoseDevEnsemble: the development ensemble of three has no
// failing or warning finding; each server is checked, and one leads.
func TestDiagnoseDevEnsemble(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	d := diagnose(t, raw)
	if d.Worst() != locker.Pass {
		t.Errorf("the development ensemble does not pass: %s", show(d))
	}
	hosts := testenv.Hosts(t, raw)
	all := strings.Join(hosts, ",")
	wantStatus(t, finding(t, d, "ensemble", all), locker.Pass, "3 voting member(s); the URL names 3; the leader is")
	wantStatus(t, finding(t, d, "quorum", all), locker.Pass, "3 of the 3")
	for _, h := range hosts {
		for _, check := range []string{"reachable", "session-timeout", "rtt"} {
			finding(t, d, check, h)
		}
	}
}

// TestDiagnoseDevServer: the single development server warns that it is
// alone, and fails nothing; a TTL outside its session timeouts, which
// Open refuses, fails.
func TestDiagnoseDevServer(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	d := diagnose(t, raw)
	if d.Worst() == locker.Fail {
		t.Errorf("a failing finding on the development server: %s", show(d))
	}
	host := testenv.Hosts(t, raw)[0]
	wantStatus(t, finding(t, d, "ensemble", host), locker.Warn, "a single server")
	wantStatus(t, finding(t, d, "session-timeout", host), locker.Pass, "the TTL 30s is within")

	short := raw + "?ttl=1ms"
	if l, err := locker.Open(context.Background(), short); err == nil {
		l.Close()
		t.Fatalf("Open(%q) succeeded; the case is wrong", short)
	}
	wantStatus(t, finding(t, diagnose(t, short), "session-timeout", host), locker.Fail, "the TTL 1ms is outside")
}

// TestDiagnoseServerDown: a server the URL names that grants no session
// fails; while the others are fewer than a majority of the URL's, the
// quorum check warns.
func TestDiagnoseServerDown(t *testing.T) {
	hosts := testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperEnsembleURL))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	named := []string{hosts[0], dead}
	d := diagnose(t, "zk://"+strings.Join(named, ","))
	wantStatus(t, finding(t, d, "reachable", dead), locker.Fail, "no session")
	wantStatus(t, finding(t, d, "quorum", strings.Join(named, ",")), locker.Warn, "1 of the 2")
	wantStatus(t, finding(t, d, "ensemble", strings.Join(named, ",")), locker.Warn, "the URL names 2")

	d = diagnose(t, "zk://"+dead)
	wantStatus(t, finding(t, d, "quorum", dead), locker.Fail, "0 of the 1")
}

// TestDiagnoseNoMntr: a server that does not allow mntr still tells its
// role through srvr; the four-letter-word check warns what is missing.
func TestDiagnoseNoMntr(t *testing.T) {
	s := startZK(t, time.Second, 4*time.Second) // allows ruok, srvr, cons
	d := diagnose(t, "zk://"+s.addr)
	wantStatus(t, finding(t, d, "four-letter-words", s.addr), locker.Warn, "mntr: not in the server's 4lw.commands.whitelist")
	wantStatus(t, finding(t, d, "ensemble", s.addr), locker.Warn, "a single server")
	wantStatus(t, finding(t, d, "session-timeout", s.addr), locker.Fail, "the TTL 30s is outside the session timeouts the server grants, from 1s to 4s")
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
			t.Errorf("Diagnose(%q) = %s, %v; want Open's error %v", raw, show(d), err, openErr)
		}
	}
}
