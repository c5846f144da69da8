package redlock

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/internal/redisconn"
)

// TestDiagnoseClockSkewRule: the clock check warns when the nodes' clocks
// are further apart than the drift allowance for the TTL, less what the
// measurement cannot tell apart. (No real server's clock can be set apart
// from the machine's, so the rule is checked on measured values.)
func TestDiagnoseClockSkewRule(t *testing.T) {
	set, err := (&Options{}).settings()
	if err != nil {
		t.Fatal(err)
	}
	ttl := 10 * time.Second // allowance: 100ms + 2ms
	node := func(addr string, offset, uncertainty time.Duration) *redisconn.Node {
		return &redisconn.Node{Addr: addr, Offset: offset, Uncertainty: uncertainty}
	}
	for _, tc := range []struct {
		name  string
		nodes []*redisconn.Node
		want  locker.Status
	}{
		{"within", []*redisconn.Node{node("a", 0, 0), node("b", 101*time.Millisecond, 0), node("c", 50*time.Millisecond, 0)}, locker.Pass},
		{"beyond", []*redisconn.Node{node("a", -60*time.Millisecond, 0), node("b", 50*time.Millisecond, 0), node("c", 0, 0)}, locker.Warn},
		{"beyond but unsure", []*redisconn.Node{node("a", -60*time.Millisecond, 5*time.Millisecond), node("b", 50*time.Millisecond, 5*time.Millisecond)}, locker.Pass},
	} {
		f := clockSkew(tc.nodes, ttl, set)
		if f.Status != tc.want || !strings.Contains(f.Detail, "102ms") {
			t.Errorf("%s: clockSkew = [%v] %s; want [%v], naming the 102ms allowance", tc.name, f.Status, f.Detail, tc.want)
		}
	}
}

// TestDiagnoseNodeTimeoutRule: a node's round trip warns above a quarter
// of node_timeout and fails at node_timeout.
func TestDiagnoseNodeTimeoutRule(t *testing.T) {
	for _, tc := range []struct {
		rtt  time.Duration
		want locker.Status
	}{
		{25 * time.Millisecond, locker.Pass},
		{26 * time.Millisecond, locker.Warn},
		{100 * time.Millisecond, locker.Fail},
	} {
		if f := nodeTimeout(&redisconn.Node{Addr: "a", RTT: tc.rtt}, 100*time.Millisecond); f.Status != tc.want {
			t.Errorf("nodeTimeout(%v of 100ms) = [%v] %s, want [%v]", tc.rtt, f.Status, f.Detail, tc.want)
		}
	}
}
