package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/etcd"
	"github.com/distlock/locker/internal/testenv"
)

// cluster is the three-member etcd cluster of scripts/services.sh: member
// i (from 1) serves hosts[i-1], lives in <dir>/etcd-cluster-i, is started
// by the run script there, and its pid is in <dir>/etcd-cluster-i.pid.
type cluster struct {
	url   string
	hosts []string
	dir   string
}

// newCluster finds the cluster and makes sure the test leaves it healthy,
// restarting any member the test killed.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{url: testenv.Get(t, testenv.EtcdClusterURL), dir: testenv.Get(t, testenv.ServicesDir)}
	c.hosts = testenv.Hosts(t, c.url)
	if len(c.hosts) != 3 {
		t.Fatalf("%s = %q: want three members", testenv.EtcdClusterURL, c.url)
	}
	c.waitHealthy(t)
	t.Cleanup(func() {
		for i := 1; i <= 3; i++ {
			if !c.alive(i) {
				c.restart(t, i)
			}
		}
		c.waitHealthy(t)
	})
	return c
}

func (c *cluster) pidFile(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("etcd-cluster-%d.pid", i))
}

func (c *cluster) pid(i int) int {
	b, err := os.ReadFile(c.pidFile(i))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// alive reports whether member i's process runs (a zombie does not count).
func (c *cluster) alive(i int) bool {
	pid := c.pid(i)
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	if j := strings.LastIndexByte(s, ')'); j >= 0 && j+2 < len(s) {
		return s[j+2] != 'Z' && s[j+2] != 'X'
	}
	return false
}

// leader returns the member every live member names as the leader, or 0.
func (c *cluster) leader(t *testing.T) int {
	t.Helper()
	raw := rawClient(t, c.hosts...)
	leaderID, who := uint64(0), 0
	for i, h := range c.hosts {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := raw.Status(ctx, h)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader == 0 || (leaderID != 0 && st.Leader != leaderID) {
			return 0
		}
		leaderID = st.Leader
		if st.Header.MemberId == st.Leader {
			who = i + 1
		}
	}
	return who
}

// waitHealthy waits until all three members run and agree on a leader.
func (c *cluster) waitHealthy(t *testing.T) {
	t.Helper()
	raw := rawClient(t, c.hosts...)
	testenv.WaitFor(t, 90*time.Second, "etcd cluster healthy", func() bool {
		var leader uint64
		for _, h := range c.hosts {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := raw.Status(ctx, h)
			cancel()
			if err != nil || st.Leader == 0 || (leader != 0 && st.Leader != leader) {
				return false
			}
			leader = st.Leader
		}
		return true
	})
}

func (c *cluster) kill(t *testing.T, i int) {
	t.Helper()
	pid := c.pid(i)
	if pid <= 0 {
		t.Fatalf("no pid for member %d", i)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill member %d (pid %d): %v", i, pid, err)
	}
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("member %d dies", i), func() bool { return !c.alive(i) })
}

// restart starts member i again with the flags it was created with, and
// records its pid where scripts/services.sh looks for it.
func (c *cluster) restart(t *testing.T, i int) {
	t.Helper()
	dir := filepath.Join(c.dir, fmt.Sprintf("etcd-cluster-%d", i))
	log, err := os.OpenFile(filepath.Join(dir, "etcd.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(dir, "run"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives the test, like the other members
	if err := cmd.Start(); err != nil {
		t.Fatalf("restart member %d: %v", i, err)
	}
	if err := os.WriteFile(c.pidFile(i), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Release()
}

type acquired struct {
	lk  locker.Lock
	err error
	at  time.Time
	// holderLost: the previous holder's Lost had closed when the lock was
	// taken (acquireLater only).
	holderLost bool
}

// TestLeaderKill: the cluster's leader is killed while a lock is held and
// another client waits for it. Across the election, for longer than the
// lock's TTL, the holder keeps the lock (its keepalives reach the new
// leader, and etcd extends leases on a leader change), the waiter keeps
// waiting and a third client cannot take the key. Once the holder
// releases, the waiter gets the lock with a larger fence. The killed
// member is restarted from its own flags and the cluster left healthy.
func TestLeaderKill(t *testing.T) {
	c := newCluster(t)
	raw := rawClient(t, c.hosts...)
	ctx := context.Background()
	h, w, o := open(t, c.url), open(t, c.url), open(t, c.url)
	key := uniqueKey("leader-kill")
	prefix := etcd.QueuePrefix(etcd.DefaultNamespace, key)
	const ttl = 8 * time.Second

	lkH, err := h.Acquire(ctx, key, locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	fenceH, _ := lkH.Fence()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	got := make(chan acquired, 1)
	go func() {
		lk, err := w.Acquire(wctx, key, locker.WithTTL(ttl))
		got <- acquired{lk: lk, err: err, at: time.Now()}
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter queues", func() bool { return len(queue(t, raw, prefix)) == 2 })

	var leader int
	testenv.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = c.leader(t); return leader != 0 })
	c.kill(t, leader)
	killed := time.Now()
	var next int
	testenv.WaitFor(t, 30*time.Second, "a new leader", func() bool { next = c.leader(t); return next != 0 && next != leader })
	t.Logf("killed member %d, the leader; member %d elected within %v", leader, next, time.Since(killed).Round(time.Millisecond))

	refused := 0
	for time.Since(killed) < ttl+ttl/2 {
		select {
		case r := <-got:
			t.Fatalf("the waiter returned while the holder holds the lock (err %v)", r.err)
		default:
		}
		if testenv.Closed(lkH.Lost()) {
			t.Fatalf("the holder's Lost closed %v after the leader was killed", time.Since(killed))
		}
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lk, err := o.TryAcquire(tctx, key)
		cancel()
		switch {
		case err == nil:
			lk.Release(ctx)
			t.Fatalf("a third client acquired the key %v after the leader was killed, while the holder holds it", time.Since(killed))
		case errors.Is(err, locker.ErrNotAcquired):
			refused++
		default:
			t.Logf("TryAcquire during the election: %v", err) // no answer is not a second holder
		}
		time.Sleep(300 * time.Millisecond)
	}
	if refused == 0 {
		t.Fatal("the third client never got an answer after the leader was killed")
	}
	if d, err := lkH.TTL(ctx); err != nil || d <= 0 {
		t.Fatalf("the holder's TTL %v after the leader was killed = %v, %v", time.Since(killed), d, err)
	}

	c.restart(t, leader)
	c.waitHealthy(t)

	released := time.Now()
	if err := lkH.Release(ctx); err != nil {
		t.Fatalf("the holder's Release: %v", err)
	}
	var r acquired
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock within 10s of the release")
	}
	if r.err != nil {
		t.Fatalf("the waiter's Acquire: %v", r.err)
	}
	defer r.lk.Release(ctx)
	if r.at.Before(released) {
		t.Fatalf("the waiter got the lock before the holder released it")
	}
	if f, _ := r.lk.Fence(); f <= fenceH {
		t.Errorf("the waiter's fence %d is not larger than the holder's %d", f, fenceH)
	}
	if _, err := o.TryAcquire(ctx, key); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("TryAcquire while the waiter holds the key = %v, want ErrNotAcquired", err)
	}
}

// TestPartitionLostBeforeTakeover: a holder cut off from every member of
// the cluster (its connections dropped and refused, as in a partition)
// sees Lost close before another client acquires the key. Both instants
// are taken on this process's monotonic clock.
func TestPartitionLostBeforeTakeover(t *testing.T) {
	c := newCluster(t)
	raw := rawClient(t, c.hosts...)
	ctx := context.Background()
	const ttl = 3 * time.Second
	for round := range 3 {
		var proxies []*conformance.Proxy
		var addrs []string
		for _, h := range c.hosts {
			p := testenv.Proxy(t, h)
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		holder := open(t, "etcd://"+strings.Join(addrs, ","))
		other := open(t, c.url)
		key := uniqueKey(fmt.Sprintf("partition-%d", round))
		lk, err := holder.Acquire(ctx, key, locker.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		lost := make(chan time.Time, 1)
		go func() {
			<-lk.Lost()
			lost <- time.Now()
		}()
		got := make(chan acquired, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			lk, err := other.Acquire(actx, key, locker.WithTTL(ttl))
			got <- acquired{lk: lk, err: err, at: time.Now()}
		}()
		testenv.WaitFor(t, 5*time.Second, "the other client queues", func() bool {
			return len(queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, key))) == 2
		})
		for _, p := range proxies {
			p.Cut()
		}
		cut := time.Now()
		r := <-got
		if r.err != nil {
			t.Fatalf("round %d: the other client's Acquire after the holder was cut off: %v", round, r.err)
		}
		var lostAt time.Time
		select {
		case lostAt = <-lost:
		default:
			t.Fatalf("round %d: another client acquired the key %v after the holder was cut off, and the holder's Lost is still open",
				round, r.at.Sub(cut))
		}
		if !lostAt.Before(r.at) {
			t.Fatalf("round %d: the holder saw Lost %v after the cut, not before the other client acquired the key (%v after the cut)",
				round, lostAt.Sub(cut), r.at.Sub(cut))
		}
		t.Logf("round %d: Lost %v after the cut; the other client acquired %v after the cut (margin %v)",
			round, lostAt.Sub(cut).Round(time.Millisecond), r.at.Sub(cut).Round(time.Millisecond), r.at.Sub(lostAt).Round(time.Millisecond))
		r.lk.Release(ctx)
	}
}

// TestNoStaleAnswers: Refresh and TTL must not answer from a member that
// is behind. A Locker connected to one follower holds a lock; the follower
// is stopped, the lock's entry deleted through the other members (as the
// lease's expiry would), and the follower resumed. Its first answers about
// the lock must already know the entry is gone.
func TestNoStaleAnswers(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	var leader int
	testenv.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = c.leader(t); return leader != 0 })
	follower := leader%3 + 1
	var others []string
	for i, h := range c.hosts {
		if i+1 != follower {
			others = append(others, h)
		}
	}
	raw := rawClient(t, others...)
	for round := range 5 {
		l := open(t, "etcd://"+c.hosts[follower-1])
		key := uniqueKey(fmt.Sprintf("stale-%d", round))
		lk, err := l.Acquire(ctx, key, locker.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		q := queue(t, raw, etcd.QueuePrefix(etcd.DefaultNamespace, key))
		if len(q) != 1 {
			t.Fatalf("queue %q", q)
		}
		pid := c.pid(follower)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		resume := func() {
			if !resumed {
				syscall.Kill(pid, syscall.SIGCONT)
				resumed = true
			}
		}
		t.Cleanup(resume)
		if _, err := raw.Delete(ctx, q[0]); err != nil {
			resume()
			t.Fatal(err)
		}
		resume()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = lk.Refresh(rctx, locker.DefaultTTL)
		cancel()
		if !errors.Is(err, locker.ErrNotHeld) {
			t.Fatalf("round %d: Refresh through a member that was behind = %v, want ErrNotHeld: the entry was deleted before the call", round, err)
		}
	}
}
