package zkclient

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gozk "github.com/go-zookeeper/zk"
)

// A request is one numbered request and, once done is closed, its
// outcome. The connection's goroutine sets the outcome; whoever waits on
// done reads it.
type request struct {
	op        opcode
	xid       int32
	frame     []byte          // the packet; its xid is set when it is sent
	watchPath string          // getData or getChildren with a watch: the watch is set
	watch     chan gozk.Event // on success, on this channel
	asked     string          // the path the request names, which its reply must agree with
	seq       bool            // a sequential create: the server appends a sequence number to asked
	done      chan struct{}

	err      error
	zxid     int64 // the reply header's
	session  int64 // the session of the connection the reply came on
	path     string
	stat     gozk.Stat
	data     []byte
	children []string
	multi    []gozk.MultiResponse

	small [160]byte // holds the packet when it fits: no allocation for it
}

// begin starts a request's packet.
func begin(op opcode) (*request, encoder) {
	r := &request{op: op, done: make(chan struct{})}
	e := encoder{b: r.small[:0]}
	e.begin(0, op)
	return r, e
}

// end finishes the packet begun by begin.
func (r *request) end(e encoder) {
	e.end(0)
	r.frame = e.b
}

func (r *request) complete(err error) {
	r.err = err
	close(r.done)
}

// decode reads the body of a successful reply.
func (r *request) decode(d *decoder) {
	switch r.op {
	case opCreate2, opCreateContainer:
		r.path = d.string()
		d.stat(&r.stat)
	case opExists, opSetData:
		d.stat(&r.stat)
	case opGetData:
		r.data = clone(d.bytes())
		d.stat(&r.stat)
	case opGetChildren2:
		r.children = d.strings()
		d.stat(&r.stat)
	case opSync:
		r.path = d.string()
	case opMulti:
		r.multi = decodeMulti(d)
	}
}

// contradiction returns why the decoded reply of a successful request
// cannot answer that request, or nil: a create's path that the create
// cannot have made, a sync's path that is not the one synced, a child's
// name that is no name. The server is not to be believed on such a reply,
// whose outcome is then unknown, as for a reply lost with the connection.
func (r *request) contradiction() error {
	switch r.op {
	case opCreate2, opCreateContainer:
		return CheckCreated(r.asked, r.path, r.seq)
	case opSync:
		if r.path != r.asked {
			return fmt.Errorf("%w: the reply to the sync of %q names %q", errMalformed, r.asked, r.path)
		}
	case opGetChildren2:
		for _, c := range r.children {
			if c == "" || strings.Contains(c, "/") {
				return fmt.Errorf("%w: the listing of %q names a child %q", errMalformed, r.asked, c)
			}
		}
	}
	return nil
}

// CheckCreated returns nil if got can be the path of the node that a
// create of path made: path itself or, for a sequential node (seq), path
// and a sequence number as the server formats it (%010d of its parent's
// child version): so a direct child of path's parent whose name starts
// with path's last segment. Otherwise it returns an error that wraps
// ErrProtocol and, the create's outcome being unknown, as for a reply
// lost with the connection, gozk.ErrConnectionClosed.
func CheckCreated(path, got string, seq bool) error {
	n, ok := strings.CutPrefix(got, path)
	if ok && seq {
		v, err := strconv.ParseInt(n, 10, 32)
		ok = err == nil && fmt.Sprintf("%010d", v) == n
	} else if ok {
		ok = n == ""
	}
	if !ok {
		return fmt.Errorf("%w: the reply to the create of %q names %q, which that create cannot have made; its outcome is unknown (%w)", ErrProtocol, path, got, gozk.ErrConnectionClosed)
	}
	return nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// decodeMulti reads a multi's results, up to the header that ends them.
func decodeMulti(d *decoder) []gozk.MultiResponse {
	var out []gozk.MultiResponse
	for d.err == nil {
		typ := opcode(d.int32())
		last := d.bool()
		d.int32() // the header's error; an error result repeats it
		if last || d.err != nil {
			break
		}
		var res gozk.MultiResponse
		switch typ {
		case opError:
			res.Error = codeError(d.int32())
		case opCreate:
			res.String = d.string()
		case opCreate2, opCreateContainer:
			res.String = d.string()
			res.Stat = new(gozk.Stat)
			d.stat(res.Stat)
		case opSetData:
			res.Stat = new(gozk.Stat)
			d.stat(res.Stat)
		case opDelete, opCheck:
		default:
			d.fail()
		}
		out = append(out, res)
	}
	return out
}

// A Stop ends the wait for a request's reply early, when Done (a
// context's) or Gone (the caller's session epoch) closes: the request then
// returns ErrStopped at once, without a goroutine of its own waiting for
// it. The request stays sent and may still be applied. Nil channels never
// stop a wait; the zero Stop waits for the reply, which every request
// gets (the end of the connection or of the Conn fails it).
type Stop struct {
	Done, Gone <-chan struct{}
}

// ErrStopped: the caller's Stop ended the wait for the reply. The request
// may still be applied.
var ErrStopped = errors.New("zk: stopped waiting for the reply")

// wait waits for r's reply; false if st ended the wait first. A reply
// that is there wins over a stop.
func (r *request) wait(st Stop) bool {
	select {
	case <-r.done:
		return true
	case <-st.Done:
	case <-st.Gone:
	}
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// do sends r and waits for its reply.
func (c *Conn) do(r *request) error {
	c.send(r)
	<-r.done
	return r.err
}

// AddAuth adds credentials to the session, on this connection and every
// later one, and returns the server's answer. A server that refuses them
// ends the connection, and the Conn refuses every request from then on.
func (c *Conn) AddAuth(scheme string, data []byte) error {
	w := make(chan error, 1)
	c.wmu.Lock()
	if c.closed != nil {
		err := c.closed
		c.wmu.Unlock()
		return err
	}
	a := auth{scheme: scheme, data: clone(data)}
	if c.nc == nil {
		a.wait = w // answered on the next connection
		c.auths = append(c.auths, a)
		c.wmu.Unlock()
		return <-w
	}
	c.auths = append(c.auths, a)
	var e encoder
	encodeAuth(&e, scheme, data)
	c.pmu.Lock()
	c.authWait = append(c.authWait, w)
	c.pmu.Unlock()
	c.lastSent.Store(time.Now().UnixNano())
	if _, err := c.nc.Write(e.b); err != nil {
		c.nc.Close()
	}
	c.wmu.Unlock()
	return <-w
}

func encodeAuth(e *encoder, scheme string, data []byte) {
	at := e.begin(xidAuth, opAuth)
	e.int32(0) // type
	e.string(scheme)
	e.buffer(data)
	e.end(at)
}

// newCreate makes a create request: op is opCreate2 (a node of any mode
// but TTL) or opCreateContainer.
func newCreate(op opcode, path string, data []byte, flags int32, acl []gozk.ACL) (*request, error) {
	switch {
	case op == opCreateContainer && flags != gozk.FlagContainer:
		return nil, fmt.Errorf("%w: a container's flags are FlagContainer", gozk.ErrInvalidFlags)
	case op == opCreate2 && (flags < 0 || flags > gozk.FlagEphemeralSequential):
		return nil, fmt.Errorf("%w: %d", gozk.ErrInvalidFlags, flags)
	}
	if err := checkPath(path, flags&gozk.FlagSequence != 0); err != nil {
		return nil, err
	}
	r, e := begin(op)
	e.string(path)
	e.buffer(data)
	e.acls(acl)
	e.int32(flags)
	r.end(e)
	r.asked, r.seq = path, flags&gozk.FlagSequence != 0
	return r, nil
}

// Create creates a node and returns its path (with its sequence number,
// for a sequential node).
func (c *Conn) Create(path string, data []byte, flags int32, acl []gozk.ACL) (string, error) {
	r, err := newCreate(opCreate2, path, data, flags, acl)
	if err != nil {
		return "", err
	}
	if err := c.do(r); err != nil {
		return "", err
	}
	return r.path, nil
}

// CreateContainer creates a container node: the server deletes it once
// its last child is gone. flags must be FlagContainer.
func (c *Conn) CreateContainer(path string, data []byte, flags int32, acl []gozk.ACL) (string, error) {
	r, err := newCreate(opCreateContainer, path, data, flags, acl)
	if err != nil {
		return "", err
	}
	if err := c.do(r); err != nil {
		return "", err
	}
	return r.path, nil
}

// Created is what the reply to a create says.
type Created struct {
	Path    string // the node's path, with its sequence number if any
	Zxid    int64  // the transaction that created it: the node's czxid
	Session int64  // the session of the connection the reply came on
}

// Listed is the outcome of a listing sent behind a create.
type Listed struct {
	Children []string
	Err      error
}

// CreateAndList creates a node as Create does and returns its czxid and
// owning session with it. If list is not "", the children of list are
// requested right behind the create, in the same write, without waiting
// for the create's reply: the server answers a session's requests in the
// order they arrive, so the listing sees the create applied. The listing
// is only meaningful if the create succeeded.
//
// If st stops the wait for the create's reply, CreateAndList returns
// ErrStopped and late (if not nil) gets the create's outcome once it
// comes, in a goroutine of its own, so that the caller can undo it. If st
// stops only the wait for the listing, the create's outcome is returned
// and the listing's error is ErrStopped.
func (c *Conn) CreateAndList(st Stop, path string, data []byte, flags int32, acl []gozk.ACL, list string, late func(Created, error)) (Created, Listed, error) {
	cr, err := newCreate(opCreate2, path, data, flags, acl)
	if err != nil {
		return Created{}, Listed{}, err
	}
	var lr *request
	if list != "" {
		if lr, err = newChildren(list, false); err != nil {
			return Created{}, Listed{}, err
		}
		c.send(cr, lr)
	} else {
		c.send(cr)
	}
	outcome := func() (Created, error) {
		if cr.err != nil {
			return Created{}, cr.err
		}
		return Created{Path: cr.path, Zxid: cr.stat.Czxid, Session: cr.session}, nil
	}
	if !cr.wait(st) {
		if late != nil {
			go func() {
				<-cr.done
				late(outcome())
			}()
		}
		return Created{}, Listed{}, ErrStopped
	}
	out, err := outcome()
	if err != nil || lr == nil {
		return out, Listed{}, err
	}
	if !lr.wait(st) {
		return out, Listed{Err: ErrStopped}, nil
	}
	if lr.err != nil {
		return out, Listed{Err: lr.err}, nil
	}
	return out, Listed{Children: lr.children}, nil
}

// newChildren makes a listing of path's children, with a child watch if
// watch.
func newChildren(path string, watch bool) (*request, error) {
	if err := checkPath(path, false); err != nil {
		return nil, err
	}
	r, e := begin(opGetChildren2)
	e.string(path)
	e.bool(watch)
	r.end(e)
	r.asked = path
	if watch {
		r.watchPath, r.watch = path, make(chan gozk.Event, 1)
	}
	return r, nil
}

// Children lists the children of path.
func (c *Conn) Children(path string) ([]string, *gozk.Stat, error) {
	return c.ChildrenStop(Stop{}, path)
}

// ChildrenStop is Children, stopped by st.
func (c *Conn) ChildrenStop(st Stop, path string) ([]string, *gozk.Stat, error) {
	children, stat, _, err := c.list(st, path, false)
	return children, stat, err
}

// ChildrenW lists the children of path and sets a child watch on it: the
// channel gets one event, when a child of path is created or deleted
// (EventNodeChildrenChanged) or path itself is deleted (EventNodeDeleted),
// or EventNotWatching when the session ends. A node that does not exist
// fails with ErrNoNode, and no watch is set. Like data watches, child
// watches outlive a dropped connection (see GetW).
func (c *Conn) ChildrenW(path string) ([]string, *gozk.Stat, <-chan gozk.Event, error) {
	return c.ChildrenWStop(Stop{}, path)
}

// ChildrenWStop is ChildrenW, stopped by st. A watch whose request was
// stopped is still set once its reply comes.
func (c *Conn) ChildrenWStop(st Stop, path string) ([]string, *gozk.Stat, <-chan gozk.Event, error) {
	return c.list(st, path, true)
}

func (c *Conn) list(st Stop, path string, watch bool) ([]string, *gozk.Stat, <-chan gozk.Event, error) {
	r, err := newChildren(path, watch)
	if err != nil {
		return nil, nil, nil, err
	}
	c.send(r)
	if !r.wait(st) {
		return nil, nil, nil, ErrStopped
	}
	if r.err != nil {
		return nil, nil, nil, r.err
	}
	return r.children, &r.stat, r.watch, nil
}

// pathRequest makes a request whose body is a path and what tail adds
// (a watch flag, a version).
func pathRequest(op opcode, path string, tail func(*encoder)) (*request, error) {
	if err := checkPath(path, false); err != nil {
		return nil, err
	}
	r, e := begin(op)
	e.string(path)
	if tail != nil {
		tail(&e)
	}
	r.end(e)
	r.asked = path
	return r, nil
}

func newDelete(path string, version int32) (*request, error) {
	return pathRequest(opDelete, path, func(e *encoder) { e.int32(version) })
}

// Delete deletes the node at path if its version is version (-1: any).
func (c *Conn) Delete(path string, version int32) error {
	return c.DeleteStop(Stop{}, path, version)
}

// DeleteStop is Delete, stopped by st.
func (c *Conn) DeleteStop(st Stop, path string, version int32) error {
	r, err := newDelete(path, version)
	if err != nil {
		return err
	}
	c.send(r)
	if !r.wait(st) {
		return ErrStopped
	}
	return r.err
}

// Exists reports whether path exists, and its Stat if it does.
func (c *Conn) Exists(path string) (bool, *gozk.Stat, error) {
	ok, st, _, err := c.exist(Stop{}, path, false)
	return ok, st, err
}

// ExistsW is Exists with a watch on path, set whether or not the node
// exists: the channel gets one event, when a missing node is created
// (EventNodeCreated), or when a node that exists changes its data or is
// deleted, as GetW's does; or EventNotWatching when the session ends.
// It outlives a dropped connection, as GetW's does.
func (c *Conn) ExistsW(path string) (bool, *gozk.Stat, <-chan gozk.Event, error) {
	return c.ExistsWStop(Stop{}, path)
}

// ExistsWStop is ExistsW, stopped by st. A watch whose request was
// stopped is still set once its reply comes.
func (c *Conn) ExistsWStop(st Stop, path string) (bool, *gozk.Stat, <-chan gozk.Event, error) {
	return c.exist(st, path, true)
}

func (c *Conn) exist(st Stop, path string, watch bool) (bool, *gozk.Stat, <-chan gozk.Event, error) {
	r, err := pathRequest(opExists, path, func(e *encoder) { e.bool(watch) })
	if err != nil {
		return false, nil, nil, err
	}
	if watch {
		r.watchPath, r.watch = path, make(chan gozk.Event, 1)
	}
	c.send(r)
	if !r.wait(st) {
		return false, nil, nil, ErrStopped
	}
	switch {
	case errors.Is(r.err, gozk.ErrNoNode):
		return false, nil, r.watch, nil
	case r.err != nil:
		return false, nil, nil, r.err
	}
	return true, &r.stat, r.watch, nil
}

// Get returns the data and Stat of path.
func (c *Conn) Get(path string) ([]byte, *gozk.Stat, error) {
	r, err := pathRequest(opGetData, path, func(e *encoder) { e.bool(false) })
	if err != nil {
		return nil, nil, err
	}
	if err := c.do(r); err != nil {
		return nil, nil, err
	}
	return r.data, &r.stat, nil
}

// GetW returns the data and Stat of path and sets a data watch on it:
// the channel gets one event, when the node's data changes or the node is
// deleted, or EventNotWatching when the session ends. A node that does not
// exist fails with ErrNoNode, and no watch is set.
//
// Watches outlive a dropped connection: the Conn sets them again on the
// next one, and the server fires at once those whose node changed in
// between.
func (c *Conn) GetW(path string) ([]byte, *gozk.Stat, <-chan gozk.Event, error) {
	ws, err := c.GetWAll(Stop{}, path)
	if err != nil {
		return nil, nil, nil, err
	}
	w := ws[0]
	if w.Err != nil {
		return nil, nil, nil, w.Err
	}
	return w.Data, w.Stat, w.Event, nil
}

// Watched is the outcome of one data watch GetWAll set: the node's data
// and Stat and the watch's channel, or why it was not set (ErrNoNode for
// a node that is gone: no watch is left behind then).
type Watched struct {
	Data  []byte
	Stat  *gozk.Stat
	Event <-chan gozk.Event
	Err   error
}

// GetWAll is GetW on each of paths, the requests sent in one write, so
// that all the watches cost one round trip. The server handles them in
// the order given, and a session's events come in the order of the
// changes that fire them. A node that is gone is reported in its Watched
// (ErrNoNode); any other failure is GetWAll's error. A watch whose
// request was stopped is still set once its reply comes.
func (c *Conn) GetWAll(st Stop, paths ...string) ([]Watched, error) {
	return c.getAll(st, true, paths)
}

// GetAll is Get on each of paths, the requests sent in one write, so that
// all the reads cost one round trip: GetWAll without the watches (each
// Watched's Event is nil).
func (c *Conn) GetAll(st Stop, paths ...string) ([]Watched, error) {
	return c.getAll(st, false, paths)
}

func (c *Conn) getAll(st Stop, watch bool, paths []string) ([]Watched, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	rs := make([]*request, len(paths))
	for i, p := range paths {
		r, err := pathRequest(opGetData, p, func(e *encoder) { e.bool(watch) })
		if err != nil {
			return nil, err
		}
		if watch {
			r.watchPath, r.watch = p, make(chan gozk.Event, 1)
		}
		rs[i] = r
	}
	c.send(rs...)
	out := make([]Watched, len(rs))
	for i, r := range rs {
		switch {
		case !r.wait(st):
			return nil, ErrStopped
		case errors.Is(r.err, gozk.ErrNoNode):
			out[i].Err = r.err
		case r.err != nil:
			return nil, r.err
		default:
			out[i] = Watched{Data: r.data, Stat: &r.stat, Event: r.watch}
		}
	}
	return out, nil
}

// Sync waits until the server this client talks to has caught up with the
// leader, as of the request's arrival, and returns path.
func (c *Conn) Sync(path string) (string, error) {
	r, err := pathRequest(opSync, path, nil)
	if err != nil {
		return "", err
	}
	if err := c.do(r); err != nil {
		return "", err
	}
	return r.path, nil
}

// SyncChildrenStop lists the children of path, as ChildrenStop does,
// behind a sync of path sent in the same write: the server answers a
// session's requests in order, so the listing sees every change the
// leader had committed when the sync reached it, whichever member of the
// ensemble the connection is on, for the cost of one round trip (and the
// member's to the leader).
func (c *Conn) SyncChildrenStop(st Stop, path string) ([]string, *gozk.Stat, error) {
	sr, err := pathRequest(opSync, path, nil)
	if err != nil {
		return nil, nil, err
	}
	lr, err := newChildren(path, false)
	if err != nil {
		return nil, nil, err
	}
	c.send(sr, lr)
	if !sr.wait(st) || !lr.wait(st) {
		return nil, nil, ErrStopped
	}
	if sr.err != nil {
		return nil, nil, sr.err
	}
	if lr.err != nil {
		return nil, nil, lr.err
	}
	return lr.children, &lr.stat, nil
}

// Set replaces the data of path if its version is version (-1: any), and
// returns the node's new Stat.
func (c *Conn) Set(path string, data []byte, version int32) (*gozk.Stat, error) {
	return c.SetStop(Stop{}, path, data, version)
}

// SetStop is Set, stopped by st.
func (c *Conn) SetStop(st Stop, path string, data []byte, version int32) (*gozk.Stat, error) {
	r, err := pathRequest(opSetData, path, func(e *encoder) {
		e.buffer(data)
		e.int32(version)
	})
	if err != nil {
		return nil, err
	}
	c.send(r)
	if !r.wait(st) {
		return nil, ErrStopped
	}
	if r.err != nil {
		return nil, r.err
	}
	return &r.stat, nil
}

// Unwatch takes the watch ch, set on path by one of this Conn's requests,
// out of the session's watches: it gets no event from now on, and is not
// set again on a reconnect. The server keeps its watch on path (one per
// path and kind, whatever the number of the Conn's) until it fires, its
// event then reaching no one, or until the connection drops: the next one
// sets again only the watches the Conn still has. Unwatch of a watch that
// fired, or of one not set, does nothing.
func (c *Conn) Unwatch(path string, ch <-chan gozk.Event) {
	c.wlk.Lock()
	defer c.wlk.Unlock()
	for _, ws := range []map[string][]chan gozk.Event{c.watches, c.children, c.exists} {
		chs := ws[path]
		for i, w := range chs {
			if w == ch {
				chs = append(chs[:i], chs[i+1:]...)
				if len(chs) == 0 {
					delete(ws, path)
				} else {
					ws[path] = chs
				}
				return
			}
		}
	}
}

// Multi applies ops, all or none, in one transaction. An op is one of
// go-zookeeper's *CreateRequest (no TTL), *DeleteRequest,
// *SetDataRequest and *CheckVersionRequest. On failure, the error is that
// of the first op that failed, and the results say which (the ops before
// it have a nil Error, those after ErrRuntimeInconsistency).
func (c *Conn) Multi(ops ...any) ([]gozk.MultiResponse, error) {
	r, e := begin(opMulti)
	for _, op := range ops {
		// A create is path, data, ACL and flags; the others, a path, the
		// data for a setData, and a version.
		var code opcode
		var path string
		var data []byte
		var version int32
		seq := false
		switch o := op.(type) {
		case *gozk.CreateRequest:
			if o.Flags < 0 || o.Flags > gozk.FlagEphemeralSequential {
				return nil, fmt.Errorf("%w: %d in a multi", gozk.ErrInvalidFlags, o.Flags)
			}
			code, path, seq = opCreate, o.Path, o.Flags&gozk.FlagSequence != 0
			multiHeader(&e, opCreate)
			e.string(o.Path)
			e.buffer(o.Data)
			e.acls(o.Acl)
			e.int32(o.Flags)
		case *gozk.DeleteRequest:
			code, path, version = opDelete, o.Path, o.Version
		case *gozk.SetDataRequest:
			code, path, data, version = opSetData, o.Path, o.Data, o.Version
		case *gozk.CheckVersionRequest:
			code, path, version = opCheck, o.Path, o.Version
		default:
			return nil, fmt.Errorf("zk: a multi cannot carry %T", op)
		}
		if err := checkPath(path, seq); err != nil {
			return nil, err
		}
		if code != opCreate {
			multiHeader(&e, code)
			e.string(path)
			if code == opSetData {
				e.buffer(data)
			}
			e.int32(version)
		}
	}
	e.int32(-1) // the header that ends the ops
	e.bool(true)
	e.int32(-1)
	r.end(e)
	if err := c.do(r); err != nil {
		return nil, err
	}
	if len(r.multi) != len(ops) {
		return nil, fmt.Errorf("%w: %d results to a multi of %d", errMalformed, len(r.multi), len(ops))
	}
	for _, res := range r.multi {
		if res.Error != nil {
			return r.multi, res.Error
		}
	}
	return r.multi, nil
}

func multiHeader(e *encoder, op opcode) {
	e.int32(int32(op))
	e.bool(false)
	e.int32(-1)
}
