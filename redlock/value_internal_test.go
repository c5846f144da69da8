package redlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/locker/backend"
	"github.com/distlock/locker/internal/redisconn"
	"github.com/distlock/locker/internal/testenv"
)

// sharedNodesDriver is a driver over the shared test nodes, with clients
// that read them directly, and a key of the test's own.
func sharedNodesDriver(t *testing.T) (*driver, []redisconn.Conn, string) {
	d, cs := driverOn(t, testenv.Hosts(t, testenv.Get(t, testenv.RedlockURL)), defaults)
	var conns []redisconn.Conn
	for _, c := range cs {
		conns = append(conns, redisconn.NewGoRedis(c, false))
	}
	return d, conns, fmt.Sprintf("%s/%d", t.Name(), time.Now().UnixNano())
}

// TestObserveEveryNode: Observe subscribes to the key's release and change
// channels on every node, and tells of a grant with a value, of a value
// set, and of a release.
func TestObserveEveryNode(t *testing.T) {
	d, conns, key := sharedNodesDriver(t)
	ctx := context.Background()
	events, stop, err := d.Observe(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	numsub := redisconn.NewScript("numsub", "return redis.call('PUBSUB', 'NUMSUB', ARGV[1], ARGV[2])", 0)
	for i, c := range conns {
		testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("node %d to have the observer's subscriptions", i), func() bool {
			v, err := c.Eval(ctx, numsub, nil, channelOf(key), changedOf(key))
			a, _ := v.([]any)
			return err == nil && len(a) == 4 && a[1] == int64(1) && a[3] == int64(1)
		})
	}
	notice := func(what string) {
		t.Helper()
		select {
		case <-events:
		case <-time.After(10 * time.Second):
			t.Fatalf("the observer had no notice within 10s of %s", what)
		}
	}
	acq, err := d.TryAcquire(ctx, backend.Request{Key: key, Token: "a", TTL: time.Minute, Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	notice("a grant with a value")
	if err := acq.Held.(backend.ValueSetter).SetValue(ctx, []byte("w")); err != nil {
		t.Fatal(err)
	}
	notice("SetValue")
	if err := acq.Held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	notice("Release")
}

// TestValueVersions: Inspect reports the latest version of a holder's
// value among its nodes, not one a majority happens to keep (a SetValue
// under way, or one that reached a minority), and a node never takes an
// older version than its own.
func TestValueVersions(t *testing.T) {
	d, conns, key := sharedNodesDriver(t)
	ctx := context.Background()
	acq, err := d.TryAcquire(ctx, backend.Request{Key: key, Token: "a", TTL: time.Minute, Value: []byte("first")})
	if err != nil {
		t.Fatal(err)
	}
	defer acq.Held.Release(ctx)
	set := func(nodes []redisconn.Conn, value string, version uint64) {
		t.Helper()
		for _, c := range nodes {
			ok, err := redisconn.SetValue(ctx, c, redisconn.ValueUpdate{Key: lockKey(key), Token: "a", Value: []byte(value), Version: version, Channel: changedOf(key)})
			if err != nil || !ok {
				t.Fatalf("SetValue on a node = %v, %v", ok, err)
			}
		}
	}
	value := func() string {
		t.Helper()
		h, err := d.Inspect(ctx, key)
		if err != nil || !h.Held {
			t.Fatalf("Inspect = %+v, %v", h, err)
		}
		return string(h.Value)
	}
	set(conns[:2], "second", 2) // reached 2 of 5 nodes so far
	if v := value(); v != "second" {
		t.Errorf("with version 2 on 2 of 5 nodes and version 1 on 3: value %q, want the later, second", v)
	}
	set(conns, "older", 2) // never replaces version 2 where it is
	set(conns[2:], "third", 3)
	if v := value(); v != "third" {
		t.Errorf("with version 3 on 3 nodes: value %q, want third", v)
	}
	for i, c := range conns[:2] {
		st, err := redisconn.InspectKey(ctx, c, lockKey(key), "")
		if err != nil || len(st.Holds) != 1 || string(st.Holds[0].Value) != "second" {
			t.Errorf("node %d after version 2 was sent again with another value: %+v, %v; want it to keep its second", i, st, err)
		}
	}
}
