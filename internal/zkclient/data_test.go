package zkclient

import (
	"errors"
	"slices"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// TestSetAndGetAll: Set replaces a node's data (at any version, or at the
// one given) and returns its new Stat; GetAll reads many nodes in one
// write, a missing one reported in its place, and sets no watch.
func TestSetAndGetAll(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	o := observer(t)
	root := tree(t, c, "set")
	for _, p := range []string{root + "/a", root + "/b"} {
		if _, err := c.Create(p, []byte("v0"), 0, worldACL); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.Set(root+"/a", []byte("v1"), -1)
	data, ost, _ := o.Get(root + "/a")
	if err != nil || string(data) != "v1" || *st != *ost || st.Version != 1 {
		t.Fatalf("Set = %+v, %v; the server has %q, %+v", st, err, data, ost)
	}
	if _, err := c.Set(root+"/a", []byte("v2"), 0); !errors.Is(err, gozk.ErrBadVersion) {
		t.Fatalf("Set at an old version: %v, want ErrBadVersion", err)
	}
	if _, err := c.SetStop(Stop{}, root+"/a", []byte("v2"), 1); err != nil {
		t.Fatalf("SetStop at the node's version: %v", err)
	}
	if _, err := c.Set(root+"/none", nil, -1); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("Set of a missing node: %v, want ErrNoNode", err)
	}
	big := make([]byte, 64<<10) // larger than a request's inline buffer
	for i := range big {
		big[i] = byte(i)
	}
	if _, err := c.Set(root+"/b", big, -1); err != nil {
		t.Fatal(err)
	}

	paths := []string{root + "/a", root + "/none", root + "/b"}
	got, err := c.GetAll(Stop{}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Data) != "v2" || got[0].Stat.Version != 2 || !errors.Is(got[1].Err, gozk.ErrNoNode) || !slices.Equal(got[2].Data, big) {
		t.Fatalf("GetAll = %q %+v, %v, %d bytes; want v2 at version 2, ErrNoNode, the 64 KiB written", got[0].Data, got[0].Stat, got[1].Err, len(got[2].Data))
	}
	for i, g := range got {
		if g.Event != nil {
			t.Errorf("GetAll's read %d has a watch", i)
		}
	}
	c.wlk.Lock()
	n := len(c.watches)
	c.wlk.Unlock()
	if n != 0 {
		t.Errorf("GetAll left %d data watches", n)
	}
	if got, err := c.GetAll(Stop{}); got != nil || err != nil {
		t.Errorf("GetAll of nothing = %v, %v; want nothing, sent nowhere", got, err)
	}
}

// TestExistsWatch: an exists watch on a missing node fires when it is
// created, also when that happens while the connection is down (it is set
// again on the next one); on a node that exists it is a data watch.
func TestExistsWatch(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "exists")
	ok, st, created, err := c.ExistsW(root + "/n")
	if ok || st != nil || err != nil || created == nil {
		t.Fatalf("ExistsW of a missing node = %v, %v, %v, watch %v; want false and a watch", ok, st, err, created)
	}
	seen := len(ch.list())
	f.cut(true)
	ch.await(t, seen, StateDisconnected)
	if _, err := o.Create(root+"/n", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	f.restore()
	if ev := awaitEvent(t, created, "an exists watch whose node was created while away"); ev.Type != gozk.EventNodeCreated || ev.Path != root+"/n" {
		t.Fatalf("fired %+v, want EventNodeCreated on %s", ev, root+"/n")
	}

	ok, st, changed, err := c.ExistsW(root + "/n")
	if !ok || st == nil || err != nil {
		t.Fatalf("ExistsW of a node that exists = %v, %v, %v", ok, st, err)
	}
	if _, err := o.Set(root+"/n", []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, changed, "an exists watch on a node that exists"); ev.Type != gozk.EventNodeDataChanged {
		t.Fatalf("fired %+v, want EventNodeDataChanged", ev)
	}
}

// TestUnwatch: a watch taken out gets no event, and is not set again on a
// new connection; the others on the same path still fire.
func TestUnwatch(t *testing.T) {
	f := &faults{}
	c, ch := connect(t, 8*time.Second, f)
	o := observer(t)
	root := tree(t, c, "unwatch")
	p := root + "/n"
	if _, err := c.Create(p, nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	_, _, gone, err := c.GetW(p)
	if err != nil {
		t.Fatal(err)
	}
	_, _, kept, err := c.GetW(p)
	if err != nil {
		t.Fatal(err)
	}
	_, _, children, err := c.ChildrenW(root)
	if err != nil {
		t.Fatal(err)
	}
	_, _, missing, err := c.ExistsW(root + "/none")
	if err != nil {
		t.Fatal(err)
	}
	c.Unwatch(p, gone)
	c.Unwatch(root, children)
	c.Unwatch(root+"/none", missing)
	c.Unwatch(p, gone) // again: nothing
	c.wlk.Lock()
	data, child, exist := len(c.watches[p]), len(c.children), len(c.exists)
	c.wlk.Unlock()
	if data != 1 || child != 0 || exist != 0 {
		t.Fatalf("after Unwatch: %d data watches on %s, %d child and %d exists watches; want 1, 0, 0", data, p, child, exist)
	}
	seen := len(ch.list())
	f.cut(false)
	ch.await(t, seen, StateConnected)
	if _, err := o.Set(p, []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Create(root+"/none", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	if ev := awaitEvent(t, kept, "the watch not taken out"); ev.Type != gozk.EventNodeDataChanged {
		t.Fatalf("fired %+v, want EventNodeDataChanged", ev)
	}
	if _, err := c.Sync(root); err != nil {
		t.Fatal(err)
	}
	for what, w := range map[string]<-chan gozk.Event{"data": gone, "child": children, "exists": missing} {
		select {
		case ev := <-w:
			t.Errorf("the %s watch taken out fired %+v", what, ev)
		default:
		}
	}
}

// TestSyncChildren: the listing sent behind a sync lists the children,
// and fails as a listing does on a missing node.
func TestSyncChildren(t *testing.T) {
	c, _ := connect(t, 8*time.Second, nil)
	root := tree(t, c, "sync")
	if _, err := c.Create(root+"/a", nil, 0, worldACL); err != nil {
		t.Fatal(err)
	}
	children, st, err := c.SyncChildrenStop(Stop{}, root)
	if err != nil || !slices.Equal(children, []string{"a"}) || st.NumChildren != 1 {
		t.Fatalf("SyncChildrenStop = %v, %+v, %v; want [a]", children, st, err)
	}
	if _, _, err := c.SyncChildrenStop(Stop{}, root+"/none"); !errors.Is(err, gozk.ErrNoNode) {
		t.Fatalf("SyncChildrenStop of a missing node: %v, want ErrNoNode", err)
	}
}
