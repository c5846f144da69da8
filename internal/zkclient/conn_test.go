package zkclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/distlock/locker/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var worldACL = gozk.WorldACL(gozk.PermAll)

// server returns the standalone test server's address.
func server(t testing.TB) string {
	t.Helper()
	return testenv.Hosts(t, testenv.Get(t, testenv.ZooKeeperURL))[0]
}

// uniq returns a path no other test run uses.
func uniq(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return "/zkclient-" + prefix + "-" + hex.EncodeToString(b[:])
}

// changes records a Conn's changes of state, and lets a test wait for one.
type changes struct {
	mu  sync.Mutex
	all []Change
	new chan struct{}
}

func newChanges() *changes { return &changes{new: make(chan struct{}, 1)} }

func (c *changes) add(ch Change) {
	c.mu.Lock()
	c.all = append(c.all, ch)
	c.mu.Unlock()
	select {
	case c.new <- struct{}{}:
	default:
	}
}

func (c *changes) list() []Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.all)
}

// await waits until a change in state s has been recorded after the
// first from of them, and returns it and the number recorded.
func (c *changes) await(t *testing.T, from int, s State) (Change, int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		all := c.list()
		for i := from; i < len(all); i++ {
			if all[i].State == s {
				return all[i], i + 1
			}
		}
		select {
		case <-c.new:
		case <-deadline:
			t.Fatalf("no change to %v within 30s; changes: %+v", s, all)
		}
	}
}

// faults makes a Conn's connections, and lets a test cut them, refuse new
// ones, or cut one in the middle of a reply.
type faults struct {
	mu     sync.Mutex
	refuse bool
	gate   chan struct{} // if not nil, dials wait until it is closed
	conns  []*faultConn
	dials  int
}

type faultConn struct {
	net.Conn
	truncate atomic.Bool // the next read delivers a few bytes, then the connection ends
	writes   atomic.Int64
}

func (f *faults) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if f.refuse {
		return nil, errors.New("test: dials refused")
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: nc}
	f.conns = append(f.conns, fc)
	return fc, nil
}

// cut drops every connection made so far and, with refuse, fails new
// dials until restore.
func (f *faults) cut(refuse bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
	for _, c := range f.conns {
		c.Conn.Close()
	}
	f.conns = nil
}

func (f *faults) restore() {
	f.mu.Lock()
	f.refuse = false
	f.mu.Unlock()
}

func (f *faults) last() *faultConn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[len(f.conns)-1]
}

func (c *faultConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 6 && c.truncate.Load() {
		// Less than a reply header: the rest never comes.
		c.Conn.Close()
		return 6, nil
	}
	return n, err
}

func (c *faultConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// connect opens a Conn to the test server through f (if not nil),
// recording its changes, and closes it when the test ends.
func connect(t *testing.T, timeout time.Duration, f *faults) (*Conn, *changes) {
	t.Helper()
	ch := newChanges()
	cfg := Config{Servers: []string{server(t)}, SessionTimeout: timeout, OnChange: ch.add}
	if f != nil {
		cfg.Dial = f.dial
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, ch
}

// observer opens a go-zookeeper connection, an independent client, for
// looking at the server's nodes.
func observer(t *testing.T) *gozk.Conn {
	t.Helper()
	c, _, err := gozk.Connect([]string{server(t)}, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	testenv.WaitFor(t, 10*time.Second, "the observer's session", func() bool { return c.State() == gozk.StateHasSession })
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// tree creates a persistent node for the test's nodes, removed (with
// them) when the test ends.
func tree(t *testing.T, c *Conn, name string) string {
	t.Helper()
	p := uniq(name)
	if _, err := c.Create(p, nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		o, _, err := gozk.Connect([]string{server(t)}, 10*time.Second, gozk.WithLogInfo(false), gozk.WithLogger(quiet{}))
		if err != nil {
			return
		}
		defer o.Close()
		children, _, _ := o.Children(p)
		for _, ch := range children {
			o.Delete(p+"/"+ch, -1)
		}
		o.Delete(p, -1)
	})
	return p
}

// TestOperations: each request against the real server, its reply read
// as the server stores the node (checked through go-zookeeper).
func TestOperations(t *testing.T) {
	c, ch := connect(t, 8*time.Second, nil)
	if all := ch.list(); len(all) != 1 || all[0].State != StateConnected || all[0].Timeout != 8*time.Second || all[0].Session != c.SessionID() || all[0].Server != server(t) {
		t.Fatalf("changes on connecting: %+v, want one StateConnected granting 8s to session %#x on %s", all, c.SessionID(), server(t))
	}
	o := observer(t)
	root := tree(t, c, "ops")

	p, err := c.Create(root+"/a", []byte("data"), 0, worldACL)
	if err != nil || p != root+"/a" {
		t.Fatalf("Create = %q, %v", p, err)
	}
	if _, err := c.Create(root+"/a", nil, 0, worldACL); !errors.Is(err, gozk.ErrNodeExists) {
		t.Fatalf("Create of an existing node: %v, want ErrNodeExists", err)
	}
	data, st, err := c.Get(root + "/a")
	_, ost, _ := o.Get(root + "/a")
	if err != nil || string(data) != "data" || *st != *ost {
		t.Fatalf("Get = %q, %+v, %v; the server has %+v", data, st, err, ost)
	}
	ok, st, err := c.Exists(root + "/a")
	if !ok || err != nil || *st != *ost {
		t.Fatalf("Exists = %v, %+v, %v; the server has %+v", ok, st, err, ost)
	}
	if ok, st, err := c.Exists(root + "/none"); ok || st != nil || err != nil {
		t.Fatalf("Exists of a missing node = %v, %v, %v; want false, nil, nil", ok, st, err)
	}
	if _, _, err := c.Get(root + "/none"); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("Get of a missing node: %v, want ErrNoNode", err)
	}

	// Sequential ephemeral nodes, and the listing sent behind the create.
	for i := range 3 {
		cr, l, err := c.CreateAndList(Stop{}, root+"/q/n-", []byte("x"), gozk.FlagEphemeralSequential, worldACL, root+"/q", nil)
		if i == 0 {
			if !errors.Is(err, gozk.ErrNoNode) {
				t.Fatalf("CreateAndList under a missing parent: %v, want ErrNoNode", err)
			}
			if _, err := c.CreateContainer(root+"/q", nil, gozk.FlagContainer, worldACL); err != nil {
				t.Fatal(err)
			}
			cr, l, err = c.CreateAndList(Stop{}, root+"/q/n-", []byte("x"), gozk.FlagEphemeralSequential, worldACL, root+"/q", nil)
		}
		if err != nil || l.Err != nil {
			t.Fatalf("CreateAndList: %v, listing %v", err, l.Err)
		}
		_, ost, err := o.Get(cr.Path)
		if err != nil || ost.Czxid != cr.Zxid || ost.EphemeralOwner != cr.Session || cr.Session != c.SessionID() {
			t.Fatalf("created %+v; the server has czxid %d, owner %#x (%v)", cr, ost.Czxid, ost.EphemeralOwner, err)
		}
		if len(l.Children) != i+1 || !slices.Contains(l.Children, cr.Path[len(root+"/q/"):]) {
			t.Fatalf("the listing behind create %d: %v, want it with %s", i, l.Children, cr.Path)
		}
	}
	children, st, err := c.Children(root + "/q")
	if err != nil || len(children) != 3 || st.NumChildren != 3 {
		t.Fatalf("Children = %v, %+v, %v", children, st, err)
	}
	_, ost, _ = o.Get(root + "/q")
	if ost.EphemeralOwner != 0 || ost.NumChildren != 3 {
		t.Fatalf("the container: %+v", ost)
	}
	if _, err := c.Create(root+"/bad", nil, 99, worldACL); !errors.Is(err, gozk.ErrInvalidFlags) {
		t.Fatalf("Create with flags 99: %v, want ErrInvalidFlags", err)
	}

	if p, err := c.Sync(root); err != nil || p != root {
		t.Fatalf("Sync = %q, %v", p, err)
	}
	if err := c.Delete(root+"/a", 5); !errors.Is(err, gozk.ErrBadVersion) {
		t.Fatalf("Delete of another version: %v, want ErrBadVersion", err)
	}
	if err := c.Delete(root+"/a", -1); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := o.Exists(root + "/a"); ok {
		t.Fatal("deleted node still there")
	}
	if err := c.Delete(root+"/a", -1); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("Delete of a missing node: %v, want ErrNoNode", err)
	}
}

// TestBadPaths: paths the server would refuse are refused before sending,
// with an error naming the path.
func TestBadPaths(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	for _, p := range []string{"", "a", "/a/", "/a//b", "/a/./b", "/a/..", "/a\x00b"} {
		_, err := c.Create(p, nil, 0, worldACL)
		if !errors.Is(err, gozk.ErrInvalidPath) || !strings.Contains(err.Error(), fmt.Sprintf("%q", p)) {
			t.Errorf("Create(%q): %v, want ErrInvalidPath naming it", p, err)
		}
	}
	if _, err := c.Create("/", nil, 0, worldACL); !errors.Is(err, gozk.ErrNodeExists) {
		t.Errorf("Create(/): %v, want ErrNodeExists from the server", err)
	}
}

// TestMulti: a multi is applied whole, and a failing one not at all, its
// results naming the op that failed.
func TestMulti(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	o := observer(t)
	root := tree(t, c, "multi")
	res, err := c.Multi(
		&gozk.CreateRequest{Path: root + "/a", Data: []byte("1"), Acl: worldACL},
		&gozk.SetDataRequest{Path: root + "/a", Data: []byte("2"), Version: 0},
		&gozk.CheckVersionRequest{Path: root + "/a", Version: 1},
	)
	if err != nil || len(res) != 3 || res[0].String != root+"/a" || res[1].Stat == nil || res[1].Stat.Version != 1 {
		t.Fatalf("Multi = %+v, %v", res, err)
	}
	data, _, _ := o.Get(root + "/a")
	if string(data) != "2" {
		t.Fatalf("after the multi the node holds %q, want 2", data)
	}

	res, err = c.Multi(
		&gozk.CreateRequest{Path: root + "/b", Acl: worldACL},
		&gozk.CheckVersionRequest{Path: root + "/none", Version: -1},
		&gozk.DeleteRequest{Path: root + "/a", Version: -1},
	)
	if !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("Multi with a failing check: %v, want ErrNoNode", err)
	}
	if len(res) != 3 || res[0].Error != nil || !errors.Is(res[1].Error, gozk.ErrNoNode) || !errors.Is(res[2].Error, ErrRuntimeInconsistency) {
		t.Fatalf("results of a failed multi: %+v", res)
	}
	if ok, _, _ := o.Exists(root + "/b"); ok {
		t.Fatal("the create of a failed multi was applied")
	}
	if ok, _, _ := o.Exists(root + "/a"); !ok {
		t.Fatal("the delete of a failed multi was applied")
	}
	if _, err := c.Multi("not an op"); err == nil || !strings.Contains(err.Error(), "string") {
		t.Fatalf("Multi of a string: %v, want an error naming the type", err)
	}
}

// TestWatch: a data watch fires once, on a change of data or a deletion;
// one on a missing node is not set.
func TestWatch(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	o := observer(t)
	root := tree(t, c, "watch")
	for _, p := range []string{root + "/a", root + "/b"} {
		if _, err := o.Create(p, []byte("v"), 0, worldACL); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{root + "/a", root + "/none", root + "/b", root + "/b"}
	ws, err := c.GetWAll(Stop{}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	if ws[0].Err != nil || string(ws[0].Data) != "v" || !errors.Is(ws[1].Err, gozk.ErrNoNode) || ws[1].Event != nil {
		t.Fatalf("GetWAll = %+v", ws)
	}
	if _, err := o.Set(root+"/a", []byte("w"), -1); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(root+"/b", -1); err != nil {
		t.Fatal(err)
	}
	want := map[int]gozk.EventType{0: gozk.EventNodeDataChanged, 2: gozk.EventNodeDeleted, 3: gozk.EventNodeDeleted}
	for i, typ := range want {
		select {
		case ev := <-ws[i].Event:
			if ev.Type != typ || ev.Path != paths[i] {
				t.Errorf("watch %d fired %+v, want %v", i, ev, typ)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("watch %d did not fire", i)
		}
	}
	// A watch fires once: the next change is not reported.
	if _, err := o.Set(root+"/a", []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sync(root + "/a"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-ws[0].Event:
		t.Fatalf("a fired watch fired again: %+v", ev)
	default:
	}
}

// TestChildWatch: a child watch fires once, on a child created or deleted
// or on the node's deletion, which also fires a data watch on the node;
// one on a missing node is not set.
func TestChildWatch(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	o := observer(t)
	root := tree(t, c, "childwatch")
	dir := root + "/dir"
	if _, err := o.Create(dir, nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := c.ChildrenW(root + "/none"); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("ChildrenW of a missing node: %v, want ErrNoNode", err)
	}
	children, _, created, err := c.ChildrenW(dir)
	if err != nil || len(children) != 0 {
		t.Fatalf("ChildrenW = %v, %v; want no children", children, err)
	}
	if _, err := o.Create(dir+"/a", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, created, "a child created"); ev.Type != gozk.EventNodeChildrenChanged || ev.Path != dir {
		t.Fatalf("fired %+v, want EventNodeChildrenChanged on %s", ev, dir)
	}
	// Fired once: the next change is not reported on that watch.
	if _, err := o.Create(dir+"/b", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	children, _, deleted, err := c.ChildrenW(dir)
	if err != nil || !slices.Equal(sorted(children), []string{"a", "b"}) {
		t.Fatalf("ChildrenW = %v, %v; want [a b]", children, err)
	}
	select {
	case ev := <-created:
		t.Fatalf("a fired child watch fired again: %+v", ev)
	default:
	}
	// A data change of the node or a child is no change of the children.
	if _, err := o.Set(dir, []byte("v"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Set(dir+"/a", []byte("v"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sync(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-deleted:
		t.Fatalf("a child watch fired on a change of data: %+v", ev)
	default:
	}
	if err := o.Delete(dir+"/a", -1); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, deleted, "a child deleted"); ev.Type != gozk.EventNodeChildrenChanged {
		t.Fatalf("fired %+v, want EventNodeChildrenChanged", ev)
	}
	// The node's deletion fires both kinds of watch on it, with one event.
	if err := o.Delete(dir+"/b", -1); err != nil {
		t.Fatal(err)
	}
	_, _, gone, err := c.ChildrenW(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, _, dataGone, err := c.GetW(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(dir, -1); err != nil {
		t.Fatal(err)
	}
	for what, ch := range map[string]<-chan gozk.Event{"child": gone, "data": dataGone} {
		if ev := awaitEvent(t, ch, what+" watch on a deleted node"); ev.Type != gozk.EventNodeDeleted || ev.Path != dir {
			t.Errorf("the %s watch fired %+v, want EventNodeDeleted on %s", what, ev, dir)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
