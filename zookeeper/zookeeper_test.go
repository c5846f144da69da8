package zookeeper_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/distlock/locker"
	"github.com/distlock/locker/conformance"
	"github.com/distlock/locker/internal/freeport"
	"github.com/distlock/locker/internal/testenv"
	"github.com/distlock/locker/zookeeper"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestConformance runs the suite against the standalone server. Each
// client reaches it through its own proxy, so the crashed-holder cases cut
// a client off without closing its session: its locks move on only when
// the server expires the session.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.ZooKeeperURL)))
}

// TestConformanceEnsemble runs the suite against the three-member ensemble,
// where most clients talk to followers and every write goes through the
// leader.
func TestConformanceEnsemble(t *testing.T) {
	conformance.Run(t, conformance.URLHarness(testenv.Get(t, testenv.ZooKeeperEnsembleURL)))
}

// --- helpers ---

// uniq returns a name no other test run uses.
func uniq(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// dial opens a plain client connection for looking at the server's
// nodes directly, and waits for its session.
func dial(t testing.TB, servers []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, timeout, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	deadline := time.Now().Add(10 * time.Second)
	for c.State() != zk.StateHasSession {
		if time.Now().After(deadline) {
			t.Fatalf("no session with %v", servers)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c
}

func open(t testing.TB, raw string) locker.Locker {
	t.Helper()
	l, err := locker.Open(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// lockNodes returns the lock nodes queued for key under base, in queue
// order.
func lockNodes(t testing.TB, c *zk.Conn, base, key string) []string {
	t.Helper()
	children, _, err := c.Children(base + "/" + zookeeper.EncodeKey(key))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(children, func(a, b string) int { return strings.Compare(seqOf(a), seqOf(b)) })
	return children
}

func seqOf(name string) string { return name[strings.LastIndex(name, "-")+1:] }

// --- the recipe, seen from the server ---

// TestNodes checks what an acquisition leaves on the server: one ephemeral
// node, whose czxid is the fence, under the key's node; and nothing under
// it after Release.
func TestNodes(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("nodes")
	l := open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	key := "orders/42"
	var pipelined, first atomic.Int32
	zookeeper.SetHooks(t, zookeeper.Hooks{
		Pipelined: func(string) { pipelined.Add(1) },
		First:     func(string) { first.Add(1) },
	})
	var last uint64
	for i := range 3 {
		p0, f0 := pipelined.Load(), first.Load()
		lk, err := l.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// The queue was listed by the request sent right behind the
		// create, not by one sent after its reply; or, in the key node
		// the first round made, not at all: its node is the first there.
		// (Later rounds find the key node again, unless the server
		// collected it in between, empty, and they make it anew.)
		np, nf := pipelined.Load()-p0, first.Load()-f0
		if np+nf != 1 || i == 0 && nf != 1 {
			t.Errorf("round %d: %d listings sent behind the create used, %d first nodes; want one of either (first in round 0)", i, np, nf)
		}
		nodes := lockNodes(t, c, base, key)
		if len(nodes) != 1 {
			t.Fatalf("round %d: %d lock nodes %v, want 1", i, len(nodes), nodes)
		}
		_, st, err := c.Get(base + "/" + zookeeper.EncodeKey(key) + "/" + nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		if st.EphemeralOwner == 0 {
			t.Errorf("lock node is not ephemeral")
		}
		if data, _, err := c.Get(base + "/" + zookeeper.EncodeKey(key) + "/" + nodes[0]); err != nil || string(data) != zookeeper.NodeData {
			t.Errorf("lock node data %q, %v; want %q, which says that its moves are announced", data, err, zookeeper.NodeData)
		}
		f, ok := lk.Fence()
		if !ok || f != uint64(st.Czxid) {
			t.Errorf("Fence() = %d, %v; want the node's czxid %d", f, ok, st.Czxid)
		}
		if f <= last {
			t.Errorf("fence %d after %d", f, last)
		}
		last = f
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if nodes := lockNodes(t, c, base, key); len(nodes) != 0 {
			t.Fatalf("round %d: Release left %v", i, nodes)
		}
	}
}

// TestKeyEncoding: every key maps to one valid znode name of its own, and
// back; the server accepts every one of them.
func TestKeyEncoding(t *testing.T) {
	keys := []string{
		"a", "A", "orders/42", "orders%2F42", "/leading", "trailing/", "//", ".", "..", "...",
		"zookeeper", "with space", "ключ/鍵/🔒", "nul\x00byte", "\xff\xfe not utf-8", "%", "%25",
		"k-x", "_c_", "tab\there", "new\nline", "\u0085\u00a0", "\uf000\ufff0\uffff",
		strings.Repeat("m", 1024), strings.Repeat("/", 1024), strings.Repeat("é", 512),
	}
	seen := map[string]string{}
	for _, k := range keys {
		n := zookeeper.EncodeKey(k)
		if prev, dup := seen[n]; dup {
			t.Errorf("keys %q and %q both encode to %q", prev, k, n)
		}
		seen[n] = k
		if strings.ContainsAny(n, "/\x00") || n == "." || n == ".." || n == "zookeeper" {
			t.Errorf("EncodeKey(%q) = %q, not a valid node name", k, n)
		}
		for _, r := range n {
			if r < 0x21 || r > 0x7e {
				t.Errorf("EncodeKey(%q) = %q contains %U", k, n, r)
				break
			}
		}
		if back, err := zookeeper.DecodeKey(n); err != nil || back != k {
			t.Errorf("DecodeKey(EncodeKey(%q)) = %q, %v", k, back, err)
		}
	}

	// The server takes every one, each as a node of its own.
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("keys")
	l := open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	var held []locker.Lock
	for _, k := range keys {
		lk, err := l.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k, err)
		}
		held = append(held, lk)
	}
	names, _, err := c.Children(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !slices.Contains(names, zookeeper.EncodeKey(k)) {
			t.Errorf("no node %q for key %q under %s", zookeeper.EncodeKey(k), k, base)
		}
	}
	if len(names) != len(keys) {
		t.Errorf("%d key nodes for %d keys", len(names), len(keys))
	}
	for _, lk := range held {
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCancelledAcquireRemovesNode: a waiter whose context ends takes its
// node out of the queue before Acquire returns.
func TestCancelledAcquireRemovesNode(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("cancel")
	a, b := open(t, raw+base), open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	key := "k"
	lk, err := a.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	holder := lockNodes(t, c, base, key)
	for _, how := range []string{"cancel", "deadline"} {
		var wctx context.Context
		var cancel context.CancelFunc
		if how == "cancel" {
			wctx, cancel = context.WithCancel(ctx)
		} else {
			wctx, cancel = context.WithTimeout(ctx, time.Second) // long enough to see it queued on a loaded machine
		}
		errc := make(chan error, 1)
		go func() {
			lk, err := b.Acquire(wctx, key)
			if err == nil {
				lk.Release(ctx)
			}
			errc <- err
		}()
		testenv.WaitFor(t, 5*time.Second, "the waiter queued", func() bool { return len(lockNodes(t, c, base, key)) == 2 })
		if how == "cancel" {
			cancel()
		}
		err := <-errc
		cancel()
		if want := map[string]error{"cancel": context.Canceled, "deadline": context.DeadlineExceeded}[how]; !errors.Is(err, want) {
			t.Fatalf("%s: Acquire = %v, want %v", how, err, want)
		}
		if nodes := lockNodes(t, c, base, key); !slices.Equal(nodes, holder) {
			t.Fatalf("%s: after the waiter returned the queue is %v, want only the holder's %v", how, nodes, holder)
		}
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNoHerd: each waiter watches only the node just before its own, so a
// release wakes exactly one waiter, and waiters get the lock in the order
// they queued. The watches are read back from the servers ('wchp'), on the
// ensemble, whose members allow that command.
func TestNoHerd(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	base := "/" + uniq("herd")
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	key := "k"
	keyPath := base + "/" + zookeeper.EncodeKey(key)

	var mu sync.Mutex
	watched := map[string]string{} // waiter's node -> the node it watches
	listings := map[string]int{}   // waiter's node -> queue listings
	zookeeper.SetHooks(t, zookeeper.Hooks{
		Watching: func(self, pred string) {
			mu.Lock()
			watched[self] = pred
			mu.Unlock()
		},
		Listed: func(self string, _ int) {
			mu.Lock()
			listings[self]++
			mu.Unlock()
		},
	})

	holder := open(t, raw+base)
	lk, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	type grant struct {
		i  int
		lk locker.Lock
	}
	grants := make(chan grant, waiters)
	for i := range waiters {
		l := open(t, raw+base)
		go func() {
			lk, err := l.Acquire(ctx, key)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			grants <- grant{i, lk}
		}()
		// Queue them one after another, so the queue order is known.
		testenv.WaitFor(t, 5*time.Second, "waiter queued", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(watched) == i+1
		})
	}
	queue := lockNodes(t, c, base, key)
	if len(queue) != waiters+1 {
		t.Fatalf("queue %v, want %d nodes", queue, waiters+1)
	}
	mu.Lock()
	for i := 1; i < len(queue); i++ {
		self, pred := keyPath+"/"+queue[i], keyPath+"/"+queue[i-1]
		if watched[self] != pred {
			t.Errorf("waiter %s watches %q, want its predecessor %q", queue[i], watched[self], pred)
		}
	}
	mu.Unlock()

	// What the servers say: one watch per lock node but the last from
	// another session, the next in line. The first waiter, next to the
	// holder, also watches its own node (see handover); no other does.
	watches := serverWatches(t, testenv.Hosts(t, raw), keyPath+"/")
	for i, n := range queue {
		_, st, err := c.Get(keyPath + "/" + n)
		if err != nil {
			t.Fatal(err)
		}
		var others []string
		own := 0
		for _, s := range watches[keyPath+"/"+n] {
			if s == fmt.Sprintf("0x%x", st.EphemeralOwner) {
				own++
			} else {
				others = append(others, s)
			}
		}
		wantOthers, wantOwn := 1, 0
		if i == len(queue)-1 {
			wantOthers = 0
		}
		if i == 1 {
			wantOwn = 1
		}
		if len(others) != wantOthers || own != wantOwn {
			t.Errorf("node %s is watched by %d other sessions %v and %d times by its own, want %d and %d", n, len(others), others, own, wantOthers, wantOwn)
		}
	}

	// Hand the lock down the queue: each release wakes one waiter, the next.
	for i := range waiters {
		mu.Lock()
		before := copyCounts(listings)
		mu.Unlock()
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var g grant
		select {
		case g = <-grants:
		case <-time.After(10 * time.Second):
			t.Fatalf("release %d woke no waiter", i)
		}
		if g.i != i {
			t.Errorf("release %d: waiter %d got the lock, want %d (queue order)", i, g.i, i)
		}
		time.Sleep(50 * time.Millisecond) // time for a herd to show itself
		mu.Lock()
		for self, n := range listings {
			if self != keyPath+"/"+queue[i+1] && n != before[self] {
				t.Errorf("release %d: waiter %s, not next in line, looked at the queue again", i, self)
			}
		}
		mu.Unlock()
		lk = g.lk
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// serverWatches asks every server for its watches by path ('wchp') and
// returns those under prefix, with the sessions that set them.
func serverWatches(t testing.TB, servers []string, prefix string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range servers {
		text := fourLetter(t, s, "wchp")
		if strings.Contains(text, "not in the whitelist") {
			t.Fatalf("%s does not allow wchp: %s", s, text)
		}
		var path string
		for _, line := range strings.Split(text, "\n") {
			switch {
			case strings.HasPrefix(line, "/"):
				path = line
			case strings.HasPrefix(strings.TrimSpace(line), "0x") && strings.HasPrefix(path, prefix):
				out[path] = append(out[path], strings.TrimSpace(line))
			}
		}
	}
	return out
}

func fourLetter(t testing.TB, server, word string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", server, 2*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", word, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		t.Fatalf("%s: %v", word, err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

// sessionRange is the span of session timeouts a server grants.
type sessionRange struct{ min, max time.Duration }

func (r sessionRange) clamp(d time.Duration) time.Duration { return min(max(d, r.min), r.max) }

// outside returns a timeout the server does not grant.
func (r sessionRange) outside() time.Duration {
	if r.min >= 2*time.Millisecond {
		return r.min / 2
	}
	return r.max + time.Second
}

// readRange reads the session range of the server at addr from its
// settings, not from the Locker under test: through the 4lw 'conf' if the
// server allows it, else from the zoo.cfg under the services directory
// that has addr's port.
func readRange(t testing.TB, addr string) sessionRange {
	t.Helper()
	if conf := fourLetter(t, addr, "conf"); strings.Contains(conf, "maxSessionTimeout=") {
		return parseRange(t, conf)
	}
	dir := os.Getenv(testenv.ServicesDir)
	_, port, _ := net.SplitHostPort(addr)
	cfgs, _ := filepath.Glob(filepath.Join(dir, "*", "zoo.cfg"))
	for _, p := range cfgs {
		if b, err := os.ReadFile(p); err == nil && cfgValue(string(b), "clientPort") == port {
			return parseRange(t, string(b))
		}
	}
	t.Fatalf("cannot read the session range of %s: it does not allow 'conf' (4lw.commands.whitelist), and no zoo.cfg under %s=%q has its port", addr, testenv.ServicesDir, dir)
	return sessionRange{}
}

// parseRange reads minSessionTimeout and maxSessionTimeout from the
// key=value lines of cfg; ZooKeeper's defaults are 2 and 20 ticks.
func parseRange(t testing.TB, cfg string) sessionRange {
	t.Helper()
	ms := func(key string, dflt int) time.Duration {
		v, err := strconv.Atoi(cfgValue(cfg, key))
		if err != nil || v < 0 {
			v = dflt
		}
		return time.Duration(v) * time.Millisecond
	}
	tick := int(ms("tickTime", 3000) / time.Millisecond)
	return sessionRange{min: ms("minSessionTimeout", 2*tick), max: ms("maxSessionTimeout", 20*tick)}
}

// cfgValue returns the value of key in the key=value lines of cfg, or "".
func cfgValue(cfg, key string) string {
	for _, line := range strings.Split(cfg, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestHandoffStress hands one key around three Lockers for a few seconds,
// through contexts that can be cancelled (so each request runs on a
// goroutine of its own, whose outcome must reach the caller and nothing
// else): every Release finds its node, holders never overlap, and fences
// strictly increase. A longer run of this kind found a race in which a
// create whose reply had reached the caller was also undone, deleting a
// held lock's node; TestCallOutcome reproduces that one deterministically.
func TestHandoffStress(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := raw + "/" + uniq("stress")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  int
		last    uint64
		rounds  int
		lockers []locker.Locker
	)
	for range 3 {
		lockers = append(lockers, open(t, base))
	}
	for w, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lk, err := l.Acquire(ctx, "k", locker.WithAutoRefresh(false))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("waiter %d: Acquire: %v", w, err)
					}
					return
				}
				f, _ := lk.Fence()
				mu.Lock()
				inside++
				if inside > 1 {
					t.Errorf("waiter %d: two holders at once", w)
				}
				if f <= last {
					t.Errorf("waiter %d: fence %d after %d", w, f, last)
				}
				last = f
				rounds++
				inside--
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = lk.Release(rctx)
				rcancel()
				if err != nil {
					t.Errorf("waiter %d: Release of a held lock: %v", w, err)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d acquisitions", rounds)
}

// TestLostReplyFoundAgain provokes the case the protected create exists
// for: the create reaches the server and is applied, and the connection
// drops before the reply comes back. The acquisition must find its node
// again by its guid (the session survives the drop) rather than create a
// second one, which would stay queued and block the key for as long as the
// session lives.
func TestLostReplyFoundAgain(t *testing.T) { testLostReply(t, false) }

// TestLostReplyShared: the same for a shared hold and a permit, whose
// nodes' names carry their claim: found again, and nothing left behind.
func TestLostReplyShared(t *testing.T) {
	t.Run("shared", func(t *testing.T) { testLostReply(t, false, locker.Shared()) })
	t.Run("permit", func(t *testing.T) { testLostReply(t, false, locker.Limit(3), locker.Weight(2)) })
}

// TestLostReplyFoundWhileUnreachable: the server cannot be reached for a
// while after the create's reply was lost, so that the first look for the
// node fails; the acquisition looks again once the connection is back,
// rather than failing an acquisition that succeeded.
func TestLostReplyFoundWhileUnreachable(t *testing.T) { testLostReply(t, true) }

func testLostReply(t *testing.T, unreachable bool, kind ...locker.Option) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("lostreply")
	l := open(t, "zookeeper://"+p.Addr()+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	ttl := locker.WithTTL(10 * time.Second) // the session outlives the drop
	opts := append([]locker.Option{ttl}, kind...)
	// Open the session and create the key's node, so that the create
	// below is the only request in flight.
	warm, err := l.Acquire(ctx, "k", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// From the moment the create is about to be sent, the server's replies
	// are held back: the create is applied, its reply waits in the proxy.
	// Once another client sees the node, the connection is cut, which loses
	// the reply; the session survives, and the acquisition must find the
	// node again.
	recovered := make(chan string, 1)
	var lookFailed sync.Once
	zookeeper.SetHooks(t, zookeeper.Hooks{
		BeforeCreate: func(prefix string) {
			if strings.Contains(prefix, zookeeper.EncodeKey("k")+"/") {
				p.HoldReplies(true)
			}
		},
		Recovered: func(path string) { recovered <- path },
		FindFailed: func(error) {
			if unreachable {
				lookFailed.Do(p.Restore)
			}
		},
	})
	type result struct {
		lk  locker.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		lk, err := l.TryAcquire(ctx, "k", opts...)
		done <- result{lk, err}
	}()
	testenv.WaitFor(t, 5*time.Second, "the create applied on the server", func() bool {
		return len(lockNodes(t, c, base, "k")) > 0
	})
	p.Cut()
	p.HoldReplies(false)
	if !unreachable {
		p.Restore()
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		p.Restore()
		t.Fatal("TryAcquire across a lost create reply: no outcome within a minute")
	}
	if r.err != nil {
		t.Fatalf("TryAcquire across a lost create reply: %v", r.err)
	}
	var path string
	select {
	case path = <-recovered:
	default:
		r.lk.Release(ctx)
		t.Fatal("the acquisition got its lock without recovering the create whose reply was lost")
	}
	nodes := lockNodes(t, c, base, "k")
	if len(nodes) != 1 || !strings.HasSuffix(path, "/"+nodes[0]) {
		t.Fatalf("queue %v after the recovered create of %s: want exactly that node", nodes, path)
	}
	if err := r.lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if nodes := lockNodes(t, c, base, "k"); len(nodes) != 0 {
		t.Fatalf("Release left %v behind", nodes)
	}
}

// TestLostBeforeExpiry: a holder cut off from the server closes Lost
// before the server expires its session and the next waiter gets the lock.
func TestLostBeforeExpiry(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("lost")
	a := open(t, "zookeeper://"+p.Addr()+base)
	b := open(t, raw+base)
	ctx := context.Background()
	ttl := 2 * time.Second
	lk, err := a.Acquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	// The next holder notes, once it holds the lock, whether the cut-off
	// holder's Lost has closed: timestamps taken by two goroutines after
	// they wake would order them by the scheduler, not by the events.
	type taken struct {
		at        time.Time
		lostFirst bool
	}
	got := make(chan taken, 1)
	go func() {
		next, err := b.Acquire(ctx, "k", locker.WithTTL(ttl))
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- taken{time.Now(), testenv.Closed(lk.Lost())}
		next.Release(ctx)
	}()
	time.Sleep(ttl) // a few refreshes
	if testenv.Closed(lk.Lost()) {
		t.Fatal("Lost closed while connected")
	}
	cut := time.Now()
	p.Cut()
	var lost time.Time
	select {
	case <-lk.Lost():
		lost = time.Now()
	case <-time.After(3 * ttl):
		t.Fatalf("Lost still open %v after the holder was cut off (TTL %v)", 3*ttl, ttl)
	}
	next, ok := <-got
	if !ok {
		return
	}
	if !next.lostFirst {
		t.Fatalf("the next holder got the lock %v after the cut, before the cut-off holder's Lost closed (seen %v after the cut)", next.at.Sub(cut), lost.Sub(cut))
	}
	t.Logf("cut-off holder's Lost after %v, next holder after %v", lost.Sub(cut).Round(time.Millisecond), next.at.Sub(cut).Round(time.Millisecond))
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Release by the cut-off holder = %v, want ErrNotHeld", err)
	}
}

// TestSessionExpiredRecovers: after the server expired its session, a
// Locker reports its old locks gone and takes new ones in a new session.
func TestSessionExpiredRecovers(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("expired")
	a := open(t, "zookeeper://"+p.Addr()+base)
	b := open(t, raw+base)
	ctx := context.Background()
	ttl := locker.WithTTL(time.Second)
	lk, err := a.Acquire(ctx, "k", ttl)
	if err != nil {
		t.Fatal(err)
	}
	p.Cut()
	lkB, err := b.Acquire(ctx, "k", ttl) // once the session expired
	if err != nil {
		t.Fatal(err)
	}
	p.Restore()
	if !testenv.Closed(lk.Lost()) {
		t.Error("Lost open although the session expired and another client holds the key")
	}
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) {
		t.Errorf("Release after expiry = %v, want ErrNotHeld", err)
	}
	if _, err := a.TryAcquire(ctx, "k", ttl); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("TryAcquire of the key B holds = %v, want ErrNotAcquired", err)
	}
	lk2, err := a.Acquire(ctx, "other", ttl)
	if err != nil {
		t.Fatalf("Acquire after the session expired: %v", err)
	}
	lk2.Release(ctx)
	lkB.Release(ctx)
}

// TestCutOffWaiterGivesUp: a waiter cut off from the server gives up once
// its session may have expired (its node then goes with the session), and
// says so; it does not wait for its context.
func TestCutOffWaiterGivesUp(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	p := testenv.Proxy(t, testenv.Hosts(t, raw)[0])
	base := "/" + uniq("cutoff")
	a, b := open(t, raw+base), open(t, "zookeeper://"+p.Addr()+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	lk, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		_, err := b.Acquire(wctx, "k", locker.WithTTL(time.Second))
		errc <- err
	}()
	testenv.WaitFor(t, 5*time.Second, "the waiter queued", func() bool { return len(lockNodes(t, c, base, "k")) == 2 })
	cut := time.Now()
	p.Cut()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("a cut-off waiter was still waiting 10s after the cut, with a 1s session")
	}
	if err == nil || !strings.Contains(err.Error(), "disconnected for longer than the 1s session timeout") {
		t.Fatalf("Acquire of a cut-off waiter = %v, want an error saying the session may have expired", err)
	}
	t.Logf("gave up %v after the cut", time.Since(cut).Round(time.Millisecond))
	testenv.WaitFor(t, 5*time.Second, "the cut-off waiter's node gone with its session", func() bool { return len(lockNodes(t, c, base, "k")) == 1 })
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionPerTTL: locks with the same TTL share a session, locks with
// another TTL get one of their own, and a session that holds nothing is
// closed after a while and opened again when needed.
func TestSessionPerTTL(t *testing.T) {
	zookeeper.SetSessionIdle(t, 300*time.Millisecond)
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("sessions")
	l := open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	owner := func(key string) int64 {
		t.Helper()
		nodes := lockNodes(t, c, base, key)
		if len(nodes) != 1 {
			t.Fatalf("queue of %q: %v", key, nodes)
		}
		_, st, err := c.Get(base + "/" + zookeeper.EncodeKey(key) + "/" + nodes[0])
		if err != nil {
			t.Fatal(err)
		}
		return st.EphemeralOwner
	}
	var held []locker.Lock
	for _, k := range []struct {
		key string
		ttl time.Duration
	}{{"a", 2 * time.Second}, {"b", 3 * time.Second}, {"c", 2 * time.Second}} {
		lk, err := l.Acquire(ctx, k.key, locker.WithTTL(k.ttl))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	a, b, cc := owner("a"), owner("b"), owner("c")
	if a != cc || a == b {
		t.Fatalf("sessions: a %#x, b %#x, c %#x; want a and c (2s) to share one, b (3s) its own", a, b, cc)
	}
	if !serverHas(t, testenv.Hosts(t, raw)[0], a) || !serverHas(t, testenv.Hosts(t, raw)[0], b) {
		t.Fatal("the server does not list the sessions")
	}
	for _, lk := range held {
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "idle sessions closed", func() bool {
		return !serverHas(t, testenv.Hosts(t, raw)[0], a) && !serverHas(t, testenv.Hosts(t, raw)[0], b)
	})
	lk, err := l.Acquire(ctx, "a", locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the session was closed: %v", err)
	}
	if o := owner("a"); o == a {
		t.Errorf("a closed session %#x still owns the new lock", o)
	}
	lk.Release(ctx)
}

// serverHas reports whether the server lists session id among its
// connections ('cons').
func serverHas(t testing.TB, server string, id int64) bool {
	return strings.Contains(fourLetter(t, server, "cons"), fmt.Sprintf("sid=0x%x", id))
}

// TestRefreshToNewTTL: Refresh with another TTL moves the lock to the
// session with that timeout, keeping its place: the waiter behind it still
// waits, and gets it on release.
func TestRefreshToNewTTL(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	base := "/" + uniq("move")
	a, b := open(t, raw+base), open(t, raw+base)
	c := dial(t, testenv.Hosts(t, raw), 10*time.Second)
	ctx := context.Background()
	lk, err := a.Acquire(ctx, "k", locker.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	fence, _ := lk.Fence()
	path := base + "/" + zookeeper.EncodeKey("k") + "/" + lockNodes(t, c, base, "k")[0]
	_, st1, err := c.Get(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan locker.Lock, 1)
	go func() {
		lk, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- lk
	}()
	testenv.WaitFor(t, 5*time.Second, "waiter queued", func() bool { return len(lockNodes(t, c, base, "k")) == 2 })
	if err := lk.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, st2, err := c.Get(path)
	if err != nil {
		t.Fatalf("the lock node after the move: %v", err)
	}
	if st2.EphemeralOwner == st1.EphemeralOwner {
		t.Error("the lock node stayed in the 2s session")
	}
	if d, err := lk.TTL(ctx); err != nil || d <= 2*time.Second {
		t.Errorf("TTL() after Refresh(5s) = %v, %v", d, err)
	}
	if f, _ := lk.Fence(); f != fence {
		t.Errorf("fence changed from %d to %d", fence, f)
	}
	select {
	case <-got:
		t.Fatal("the waiter got the lock when it moved")
	case <-time.After(3 * time.Second): // past the old TTL, too
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lkB := <-got:
		if lkB == nil {
			return
		}
		if f, _ := lkB.Fence(); f <= fence {
			t.Errorf("next fence %d not above %d", f, fence)
		}
		lkB.Release(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// TestACL: with credentials in the URL, the nodes carry a digest ACL: a
// client without them can read the queue but neither queue nor delete a
// lock node.
func TestACL(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	host := testenv.Hosts(t, raw)[0]
	base := "/" + uniq("acl")
	owner := open(t, "zookeeper://locker:s3cret@"+host+base)
	ctx := context.Background()
	lk, err := owner.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release(ctx)

	c := dial(t, []string{host}, 10*time.Second) // no credentials
	keyPath := base + "/" + zookeeper.EncodeKey("k")
	nodes := lockNodes(t, c, base, "k") // reading is allowed
	if len(nodes) != 1 {
		t.Fatalf("queue %v", nodes)
	}
	// The server shows digests only to clients with the credentials.
	authed := dial(t, []string{host}, 10*time.Second)
	if err := authed.AddAuth("digest", []byte("locker:s3cret")); err != nil {
		t.Fatal(err)
	}
	want := append(zk.DigestACL(zk.PermAll, "locker", "s3cret"), zk.WorldACL(zk.PermRead)...)
	for _, p := range []string{base, keyPath, keyPath + "/" + nodes[0]} {
		acl, _, err := authed.GetACL(p)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(acl, want) {
			t.Errorf("ACL of %s = %v, want %v", p, acl, want)
		}
	}
	if err := c.Delete(keyPath+"/"+nodes[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("delete of the lock node without credentials = %v, want ErrNoAuth", err)
	}
	if _, err := c.Create(keyPath+"/intruder", nil, 0, zk.WorldACL(zk.PermAll)); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("create under the key without credentials = %v, want ErrNoAuth", err)
	}

	for _, u := range []string{"zookeeper://" + host + base, "zookeeper://locker:wrong@" + host + base} {
		l := open(t, u)
		_, err := l.TryAcquire(ctx, "k")
		if err == nil || errors.Is(err, locker.ErrNotAcquired) || !strings.Contains(err.Error(), "not permitted") {
			t.Errorf("%s: TryAcquire = %v, want a permission error", u, err)
		}
	}
	same := open(t, "zookeeper://locker:s3cret@"+host+base)
	if _, err := same.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
		t.Errorf("with the same credentials: TryAcquire = %v, want ErrNotAcquired", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lk2, err := same.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	lk2.Release(ctx)
}

// TestNew: a Locker over the caller's own connection, whose session holds
// every lock; the connection stays open after Close.
func TestNew(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	host := testenv.Hosts(t, raw)[0]
	rng := readRange(t, host)
	timeout := rng.clamp(5 * time.Second) // what the server grants c
	c := dial(t, []string{host}, timeout)
	base := "/" + uniq("new")
	ctx := context.Background()
	newRejects(t, c, rng, timeout)

	l, err := zookeeper.New(c, &zookeeper.Options{SessionTimeout: timeout, Path: base})
	if err != nil {
		t.Fatal(err)
	}
	if caps := l.Capabilities(); caps.MinTTL != timeout || caps.MaxTTL != timeout || caps.LossSignal {
		t.Errorf("Capabilities = %+v, want MinTTL and MaxTTL %v", caps, timeout)
	}
	lk, err := l.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lk.TTL(ctx); err != nil || d > timeout || d < timeout*4/5 {
		t.Errorf("TTL() = %v, %v; want the session timeout, %v", d, err, timeout)
	}
	nodes := lockNodes(t, c, base, "k")
	_, st, err := c.Get(base + "/" + zookeeper.EncodeKey("k") + "/" + nodes[0])
	if err != nil || st.EphemeralOwner != c.SessionID() {
		t.Errorf("lock node owner %#x, want the given connection's session %#x (%v)", st.EphemeralOwner, c.SessionID(), err)
	}
	// The connection cannot report the create's zxid: the fence is read
	// back from the node.
	if f, ok := lk.Fence(); !ok || f != uint64(st.Czxid) {
		t.Errorf("Fence() = %d, %v; want the node's czxid %d", f, ok, st.Czxid)
	}
	if _, err := l.Acquire(ctx, "other", locker.WithTTL(timeout+time.Second)); !errors.Is(err, locker.ErrInvalidTTL) {
		t.Errorf("Acquire with another TTL = %v, want ErrInvalidTTL", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !testenv.Closed(lk.Lost()) {
		t.Error("Close left the lock open")
	}
	if nodes := lockNodes(t, c, base, "k"); len(nodes) != 0 {
		t.Errorf("Close left %v", nodes)
	}
	if c.State() != zk.StateHasSession {
		t.Errorf("the Locker closed the caller's connection: state %v", c.State())
	}
}

// newRejects checks that New refuses bad options, naming the problem; for
// a session timeout c's server cannot have granted, its range.
func newRejects(t *testing.T, c *zk.Conn, rng sessionRange, timeout time.Duration) {
	t.Helper()
	for _, tc := range []struct {
		opts *zookeeper.Options
		want string
	}{
		{nil, "SessionTimeout is required"},
		{&zookeeper.Options{SessionTimeout: rng.outside()}, "cannot have it"},
		{&zookeeper.Options{SessionTimeout: timeout, Path: "/a//b"}, "empty element"},
	} {
		if _, err := zookeeper.New(c, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	_, err := zookeeper.New(c, &zookeeper.Options{SessionTimeout: rng.outside()})
	if want := fmt.Sprintf("from %v to %v", rng.min, rng.max); !errors.Is(err, locker.ErrInvalidTTL) || !strings.Contains(err.Error(), want) {
		t.Errorf("New with an impossible SessionTimeout = %v, want ErrInvalidTTL naming the server's range, %s", err, want)
	}
}

func TestOpenErrors(t *testing.T) {
	closedPort := testenv.ClosedAddr(t)
	testenv.WantOpenErrors(t, [][2]string{
		{"zookeeper://", "no host"},
		{"zk:///locks", "no host"},
		{"zookeeper://127.0.0.1:2181,,127.0.0.1:2182", "empty host"},
		{"zookeeper://127.0.0.1:2181/a//b", "empty element"},
		{"zookeeper://127.0.0.1:2181/a/../b", `".." element`},
		{"zookeeper://127.0.0.1:2181/zookeeper/x", "reserved"},
		{"zookeeper://127.0.0.1:2181?colour=red", `"colour"`},
		{"zookeeper://user@127.0.0.1:2181", "user:password"},
		{"zookeeper://127.0.0.1:2181?ttl=0s", "ttl"},
		{"zookeeper://" + closedPort, "unreachable"},
		{"zookeeper://" + closedPort, "refused"},
	})
}

// TestURL: both schemes, the path as base node, a default port, and the
// server's session range as the TTL bounds.
func TestURL(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	host := testenv.Hosts(t, raw)[0]
	c := dial(t, []string{host}, 10*time.Second)
	ctx := context.Background()
	rng := readRange(t, host)
	ttl := rng.clamp(3 * time.Second)
	for _, scheme := range []string{"zookeeper", "zk"} {
		base := "/" + uniq(scheme) + "/nested"
		l := open(t, fmt.Sprintf("%s://%s%s?ttl=%v&prefix=app/", scheme, host, base, ttl))
		caps := l.Capabilities()
		if caps.MinTTL != rng.min || caps.MaxTTL != rng.max || !caps.Fencing || !caps.FIFO || !caps.LossSignal {
			t.Errorf("%s: Capabilities = %+v, want MinTTL %v and MaxTTL %v from the server", scheme, caps, rng.min, rng.max)
		}
		lk, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d, err := lk.TTL(ctx); err != nil || d > ttl || d < ttl*2/3 {
			t.Errorf("%s: TTL() = %v, %v; want the URL's %v", scheme, d, err, ttl)
		}
		if nodes := lockNodes(t, c, base, "app/k"); len(nodes) != 1 {
			t.Errorf("%s: no lock node for app/k under %s: %v", scheme, base, nodes)
		}
		if _, err := l.Acquire(ctx, "k2", locker.WithTTL(rng.outside())); !errors.Is(err, locker.ErrInvalidTTL) {
			t.Errorf("%s: TTL outside the server's session range: %v, want ErrInvalidTTL", scheme, err)
		}
		lk.Release(ctx)
	}
	// No port: ZooKeeper's default, 2181. Either a server answers there,
	// or the error names the address tried.
	l, err := locker.Open(ctx, "zookeeper://127.0.0.1/x")
	if err == nil {
		l.Close()
	} else if !strings.Contains(err.Error(), "127.0.0.1:2181") {
		t.Errorf("Open without a port = %v, want an attempt on port 2181", err)
	}
}

// --- a private server, for changing its settings ---

// zkServer is a standalone ZooKeeper the test starts and restarts with
// other settings, keeping its data.
type zkServer struct {
	t     *testing.T
	dir   string
	addr  string
	flags []string // extra JVM flags
	conf  string   // zoo.cfg's lines after the address and data directory; "": start's
	cmd   *exec.Cmd
}

// startZK starts a private server granting session timeouts from
// minTimeout to maxTimeout, with flags for the JVM.
func startZK(t *testing.T, minTimeout, maxTimeout time.Duration, flags ...string) *zkServer {
	t.Helper()
	s := newZK(t, "", flags)
	s.start(minTimeout, maxTimeout)
	return s
}

// startZKConf starts a private server whose zoo.cfg has conf after its
// address and data directory (the server's defaults otherwise), and
// returns its address.
func startZKConf(t *testing.T, conf string) string {
	t.Helper()
	s := newZK(t, conf, nil)
	s.start(0, 0)
	return s.addr
}

func newZK(t *testing.T, conf string, flags []string) *zkServer {
	t.Helper()
	testenv.Get(t, testenv.ZooKeeperURL) // the servers-required policy applies
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &zkServer{t: t, dir: t.TempDir(), addr: addr, flags: flags, conf: conf}
	t.Cleanup(s.stop)
	return s
}

// start starts the server, granting session timeouts from minTimeout to
// maxTimeout unless s.conf says otherwise.
func (s *zkServer) start(minTimeout, maxTimeout time.Duration) {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	conf := s.conf
	if conf == "" {
		conf = fmt.Sprintf("minSessionTimeout=%d\nmaxSessionTimeout=%d\n4lw.commands.whitelist=ruok,srvr,cons\n", minTimeout.Milliseconds(), maxTimeout.Milliseconds())
	}
	cfg := fmt.Sprintf("tickTime=500\ndataDir=%s/data\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\nforceSync=no\n%s",
		s.dir, port, conf)
	if err := os.WriteFile(filepath.Join(s.dir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
		s.t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "zookeeper.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	defer logf.Close()
	args := append([]string{"-Xmx128m", "-XX:+UseSerialGC"}, s.flags...)
	args = append(args, "-cp", testenv.Get(s.t, testenv.ZKClasspath),
		"org.apache.zookeeper.server.ZooKeeperServerMain", filepath.Join(s.dir, "zoo.cfg"))
	s.cmd = exec.Command("java", args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start ZooKeeper: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !serving(s.addr, "standalone") {
		if time.Now().After(deadline) {
			s.t.Fatalf("ZooKeeper on %s did not start (log in %s)", s.addr, s.dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *zkServer) stop() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// serving reports whether the server at addr answers 'srvr' in one of the
// modes given.
func serving(addr string, modes ...string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return false
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if mode, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return slices.Contains(modes, mode)
		}
	}
	return false
}

// TestSessionTimeoutMismatch: when the server grants a session timeout
// other than the TTL asked for, the acquisition fails with ErrInvalidTTL
// naming the server's range, instead of holding a lock for another time.
// The Locker learned the range when it opened; the server is then
// restarted with a narrower one.
func TestSessionTimeoutMismatch(t *testing.T) {
	s := startZK(t, time.Second, 4*time.Second)
	ctx := context.Background()
	l := open(t, "zookeeper://"+s.addr)
	if caps := l.Capabilities(); caps.MinTTL != time.Second || caps.MaxTTL != 4*time.Second {
		t.Fatalf("Capabilities = %+v, want the server's range 1s..4s", caps)
	}
	lk, err := l.Acquire(ctx, "k", locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lk.Release(ctx)

	s.stop()
	s.start(2*time.Second, 2500*time.Millisecond)
	for _, tc := range []struct {
		ttl     time.Duration
		granted string
	}{{3500 * time.Millisecond, "2.5s"}, {1500 * time.Millisecond, "2s"}} {
		_, err = l.Acquire(ctx, "k", locker.WithTTL(tc.ttl))
		if !errors.Is(err, locker.ErrInvalidTTL) {
			t.Fatalf("TTL %v: Acquire = %v, want ErrInvalidTTL", tc.ttl, err)
		}
		for _, want := range []string{"granted a session timeout of " + tc.granted, tc.ttl.String() + " was asked for", "from 2s to 2.5s"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("TTL %v: error %q does not say %q", tc.ttl, err, want)
			}
		}
	}
	// A TTL the server still grants works.
	lk, err = l.Acquire(ctx, "k", locker.WithTTL(2200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lk.Release(ctx)
}

// TestReconnectGrantsShorter: a session that reconnects to a server which
// grants it a shorter timeout than the TTL of its locks loses them, with a
// cause that names the grant; nothing is taken or kept in it on the
// strength of the old timeout. The private server is restarted with a
// narrower range while a lock is held and another Acquire waits in the
// queue; the clients re-attach their sessions (which the server keeps in
// its data directory) and get what the new range allows. Every check
// waits for an answer from the restarted server, never for time to pass.
func TestReconnectGrantsShorter(t *testing.T) {
	s := startZK(t, time.Second, 2*time.Minute)
	ctx := context.Background()
	base := "/" + uniq("shorter")
	a, b := open(t, "zookeeper://"+s.addr+base), open(t, "zookeeper://"+s.addr+base)
	c := dial(t, []string{s.addr}, 10*time.Second)
	long := locker.WithTTL(time.Minute)
	lk, err := a.Acquire(ctx, "k", long, locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	lkB, waited := queueBehind(t, b, a, "q", long)
	testenv.WaitFor(t, 5*time.Second, "the waiter queued", func() bool { return len(lockNodes(t, c, base, "q")) == 2 })
	// The observer, go-zookeeper's client, would reconnect as the server
	// starts, and may meet a connection the server accepts and never
	// answers (ZooKeeper 3.8 leaves one open when it fails to refuse it
	// before its database is loaded): go-zookeeper then waits ten times its
	// receive timeout for the answer, past the checks below. A new one,
	// dialled once the server serves, is not exposed to that.
	c.Close()

	s.stop()
	s.start(2*time.Second, 4*time.Second)
	c = dial(t, []string{s.addr}, 10*time.Second)

	// Any answer now comes over a connection the restarted server granted
	// 4s: the Locker has read that grant before anything was sent on it.
	const short = "granted a session timeout of 4s"
	err = untilAnswered(t, func(ctx context.Context) error { return lk.Refresh(ctx, time.Minute) })
	if !errors.Is(err, locker.ErrNotHeld) || !strings.Contains(err.Error(), short+", shorter than the 1m0s TTL") {
		t.Fatalf("Refresh in a session the server now keeps for 4s = %v, want ErrNotHeld naming the grant: the lock's TTL is 1m", err)
	}
	if !testenv.Closed(lk.Lost()) {
		t.Error("Lost open after the shorter grant")
	}
	if err := lk.Release(ctx); !errors.Is(err, locker.ErrNotHeld) || !strings.Contains(err.Error(), short) {
		t.Errorf("Release after the shorter grant = %v, want ErrNotHeld naming the grant", err)
	}
	testenv.WaitFor(t, 10*time.Second, "the lost lock's node deleted", func() bool { return len(lockNodes(t, c, base, "k")) == 0 })
	// Let the waiter have the key: it may only take it in a session the
	// server keeps for its TTL.
	untilAnswered(t, lkB.Release)
	select {
	case err := <-waited:
		if !errors.Is(err, locker.ErrInvalidTTL) || !strings.Contains(err.Error(), short) {
			t.Errorf("Acquire waiting in the session during the shorter grant = %v, want ErrInvalidTTL naming the grant", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Acquire waiting in the session during the shorter grant still waits a minute later")
	}
	if _, err := a.Acquire(ctx, "k2", long); !errors.Is(err, locker.ErrInvalidTTL) || !strings.Contains(err.Error(), short) {
		t.Errorf("Acquire with the 1m TTL after the shorter grant = %v, want ErrInvalidTTL naming the grant", err)
	}
	lk, err = a.Acquire(ctx, "k", locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatalf("Acquire with a TTL the server grants: %v", err)
	}
	lk.Release(ctx)
}

// queueBehind takes key in holder, with a 3s TTL, and starts an Acquire
// of it in waiter, with opt; its outcome goes to waited.
func queueBehind(t *testing.T, holder, waiter locker.Locker, key string, opt locker.Option) (locker.Lock, <-chan error) {
	t.Helper()
	ctx := context.Background()
	lk, err := holder.Acquire(ctx, key, locker.WithTTL(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		lk, err := waiter.Acquire(ctx, key, opt)
		if err == nil {
			lk.Release(ctx)
		}
		waited <- err
	}()
	return lk, waited
}

// TestReconnectGrantsLonger: a session that reconnects to a server which
// grants it a longer timeout than its own keeps its locks (the server
// keeps them at least as long as promised), but takes no new ones, whose
// crashed holder would block others for longer than their TTL; it closes
// once it holds nothing.
func TestReconnectGrantsLonger(t *testing.T) {
	s := startZK(t, time.Second, 2*time.Minute)
	ctx := context.Background()
	base := "/" + uniq("longer")
	a := open(t, "zookeeper://"+s.addr+base)
	lk, err := a.Acquire(ctx, "k", locker.WithTTL(30*time.Second), locker.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, []string{s.addr}, 10*time.Second)
	_, st, err := c.Get(base + "/" + zookeeper.EncodeKey("k") + "/" + lockNodes(t, c, base, "k")[0])
	if err != nil {
		t.Fatal(err)
	}

	s.stop()
	s.start(time.Minute, 2*time.Minute)

	if err := untilAnswered(t, func(ctx context.Context) error { return lk.Refresh(ctx, 30*time.Second) }); err != nil {
		t.Fatalf("Refresh in a session the server now keeps for 1m = %v, want nil: that covers the 30s TTL", err)
	}
	_, err = a.Acquire(ctx, "k2", locker.WithTTL(30*time.Second))
	if !errors.Is(err, locker.ErrInvalidTTL) || !strings.Contains(err.Error(), "granted a session timeout of 1m0s where 30s was asked for") {
		t.Errorf("Acquire with the 30s TTL after the longer grant = %v, want ErrInvalidTTL naming the grant", err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("Release in the retired session: %v", err)
	}
	testenv.WaitFor(t, 10*time.Second, "the retired session closed", func() bool { return !serverHas(t, s.addr, st.EphemeralOwner) })
}

// untilAnswered calls op (a Refresh or Release) until a server answers,
// one way or the other, and returns the answer; failures to reach one (the
// server is restarting) are tried again, for up to a minute.
func untilAnswered(t *testing.T, op func(context.Context) error) error {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := op(ctx)
		cancel()
		if err == nil || errors.Is(err, locker.ErrNotHeld) {
			return err
		}
		if time.Now().After(deadline) {
			t.Fatalf("still no answer a minute after the restart: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestKeysDoNotAccumulate: key nodes (and the base node) are containers,
// which the server deletes once their last child is gone. The server
// checks every 200 ms here instead of every minute.
func TestKeysDoNotAccumulate(t *testing.T) {
	s := startZK(t, time.Second, time.Minute, "-Dznode.container.checkIntervalMs=200")
	ctx := context.Background()
	l := open(t, "zookeeper://"+s.addr+"/app/locks")
	c := dial(t, []string{s.addr}, 10*time.Second)
	for _, k := range []string{"a", "b/c"} {
		lk, err := l.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _, err := c.Exists("/app/locks/" + zookeeper.EncodeKey(k)); !ok || err != nil {
			t.Fatalf("no key node for %q while held: %v", k, err)
		}
		if err := lk.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "empty key and base nodes collected", func() bool {
		ok, _, err := c.Exists("/app")
		return err == nil && !ok
	})
	// And they come back when needed.
	lk, err := l.Acquire(ctx, "a")
	if err != nil {
		t.Fatalf("Acquire after the nodes were collected: %v", err)
	}
	lk.Release(ctx)
}

// --- the ensemble ---

// member is one member of the ensemble scripts/services.sh started.
type member struct {
	dir     string // holds zoo.cfg and the run script
	pidfile string
	addr    string // client address
}

func ensemble(t *testing.T) []member {
	t.Helper()
	dir := testenv.Get(t, testenv.ServicesDir)
	cfgs, _ := filepath.Glob(filepath.Join(dir, "zk-ensemble-*", "zoo.cfg"))
	if len(cfgs) != 3 {
		t.Fatalf("found %d ensemble members under %s, want 3", len(cfgs), dir)
	}
	var ms []member
	for _, cfg := range cfgs {
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		host, port := cfgValue(string(b), "clientPortAddress"), cfgValue(string(b), "clientPort")
		d := filepath.Dir(cfg)
		ms = append(ms, member{dir: d, pidfile: filepath.Join(dir, filepath.Base(d)+".pid"), addr: net.JoinHostPort(host, port)})
	}
	return ms
}

// healthy waits until every member serves as leader or follower, with one
// leader among them, and returns the leader.
func healthy(t *testing.T, ms []member, within time.Duration) member {
	t.Helper()
	var leader member
	testenv.WaitFor(t, within, "ensemble healthy", func() bool {
		leaders := 0
		for _, m := range ms {
			switch {
			case serving(m.addr, "leader"):
				leaders++
				leader = m
			case serving(m.addr, "follower"):
			default:
				return false
			}
		}
		return leaders == 1
	})
	return leader
}

// kill stops m as a crash would, and waits until its port is closed.
func (m member) kill(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(m.pidfile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
	testenv.WaitFor(t, 10*time.Second, "killed member's port closed", func() bool {
		c, err := net.DialTimeout("tcp", m.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// restart starts m again with the run script services.sh wrote, as its
// own process group so that it outlives the test binary, and records its
// pid where services.sh will find it to stop it.
func (m member) restart(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(m.dir, "zookeeper.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(m.dir, "run"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("restart %s: %v", m.dir, err)
	}
	if err := os.WriteFile(m.pidfile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Release()
}

// TestLeaderKill kills the ensemble's leader while a lock is held and a
// waiter is queued behind it. No second holder may appear: whenever the
// waiter gets the lock, the holder's Lost must already be closed, and its
// fence must be larger. The holder either keeps the lock (its session
// survives the election) or sees Lost. The leader is restarted from its
// config, and the ensemble left healthy.
func TestLeaderKill(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperEnsembleURL)
	ms := ensemble(t)
	leader := healthy(t, ms, 60*time.Second)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			leader.restart(t)
		}
		healthy(t, ms, 90*time.Second)
	})

	base := "/" + uniq("leaderkill")
	holder, waiter := open(t, raw+base), open(t, raw+base)
	ctx := context.Background()
	ttl := 3 * time.Second
	lk, err := holder.Acquire(ctx, "k", locker.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	fence, _ := lk.Fence()
	type grant struct {
		lk         locker.Lock
		holderLost bool // when the waiter got the lock
	}
	granted := make(chan grant, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		lk2, err := waiter.Acquire(wctx, "k", locker.WithTTL(ttl))
		if err != nil {
			if wctx.Err() == nil {
				t.Errorf("waiter: %v", err)
			}
			close(granted)
			return
		}
		granted <- grant{lk: lk2, holderLost: testenv.Closed(lk.Lost())}
	}()
	time.Sleep(500 * time.Millisecond) // the waiter queues

	killedAt := time.Now()
	leader.kill(t)
	newLeader := healthyExcept(t, ms, leader, 30*time.Second)
	t.Logf("leader %s killed; %s leads after %v", leader.addr, newLeader.addr, time.Since(killedAt).Round(time.Millisecond))

	// Watch through the election and well past any session expiry.
	var g grant
	var gotGrant bool
	select {
	case g, gotGrant = <-granted:
	case <-time.After(4 * ttl):
	}
	if gotGrant {
		if !g.holderLost {
			t.Fatalf("second holder: the waiter got the lock while the holder's Lost was open")
		}
		if f, _ := g.lk.Fence(); f <= fence {
			t.Errorf("the waiter's fence %d is not above the holder's %d", f, fence)
		}
		t.Logf("the holder lost the lock (Lost closed) and the waiter got it")
	} else if testenv.Closed(lk.Lost()) {
		t.Logf("the holder saw Lost; the waiter has not got the lock yet")
	} else {
		// Kept: the lock must still be there, and still exclusive.
		if _, err := lk.TTL(ctx); err != nil {
			t.Fatalf("the holder's Lost is open but TTL() = %v", err)
		}
		if _, err := waiter.TryAcquire(ctx, "k"); !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryAcquire while the holder keeps the lock = %v, want ErrNotAcquired", err)
		}
		t.Logf("the holder kept the lock through the election")
	}

	leader.restart(t)
	restarted = true
	healthy(t, ms, 90*time.Second)

	lk.Release(ctx)
	if !gotGrant {
		select {
		case g, gotGrant = <-granted:
		case <-time.After(3 * ttl):
			t.Fatal("the waiter did not get the lock after the holder let go")
		}
	}
	if g.lk != nil {
		g.lk.Release(ctx)
	}
}

// healthyExcept waits until the members other than down serve, one of
// them as leader, and returns it.
func healthyExcept(t *testing.T, ms []member, down member, within time.Duration) member {
	t.Helper()
	var rest []member
	for _, m := range ms {
		if m.addr != down.addr {
			rest = append(rest, m)
		}
	}
	return healthy(t, rest, within)
}

// TestOpenTTLRange: a default TTL outside the server's session range fails
// Open, naming the range, rather than every Acquire.
func TestOpenTTLRange(t *testing.T) {
	raw := testenv.Get(t, testenv.ZooKeeperURL)
	testenv.WantOpenErrors(t, [][2]string{
		{raw + "?ttl=5m", "above this backend's maximum"},
		{raw + "?ttl=10ms", "below this backend's minimum"},
	})
}
