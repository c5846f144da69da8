package zk

import (
	"errors"
	"time"
)

// What the lock backend needs of a connection that go-zookeeper's API does
// not give: the session timeout the server granted on each connect, the
// zxid of a create's reply (the new node's czxid, the lock's fence) and
// the session that reply came on, and a listing sent right behind a create
// without waiting for the create's reply. Each is a few lines over the
// copied connection code; the backend falls back to public calls for a
// connection the application made with go-zookeeper itself.

// WithSessionGranted calls f on every connect the server accepts, before
// the connection carries any request, with the session timeout it granted
// and the session's id. f runs on the connection's goroutine: it must not
// block or call into the Conn.
func WithSessionGranted(f func(timeout time.Duration, session int64)) connOption {
	return func(c *Conn) { c.granted = f }
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
// requested right behind the create on the same connection, without
// waiting for the create's reply: the server answers a session's requests
// in the order they arrive, so the listing sees the create applied. The
// listing is only meaningful if the create succeeded.
//
// If st stops the wait for the create's reply, CreateAndList returns
// ErrStopped and late (if not nil) gets the create's outcome once it
// comes, in a goroutine of its own, so that the caller can undo it. If st
// stops only the wait for the listing, the create's outcome is returned
// and the listing's error is ErrStopped.
func (c *Conn) CreateAndList(st Stop, path string, data []byte, flags int32, acl []ACL, list string, late func(Created, error)) (Created, Listed, error) {
	createMode, err := parseCreateMode(flags)
	if err != nil {
		return Created{}, Listed{}, err
	}
	if err := validatePath(path, createMode.isSequential); err != nil {
		return Created{}, Listed{}, err
	}
	if createMode.isTTL {
		return Created{}, Listed{}, ErrInvalidFlags
	}
	if list != "" {
		if err := validatePath(list, false); err != nil {
			return Created{}, Listed{}, err
		}
	}
	res := &createResponse{}
	var session int64
	created := c.queueRequest(opCreate, &CreateRequest{Path: path, Data: data, Acl: acl, Flags: createMode.flag}, res,
		func(*request, *responseHeader, error) { session = c.SessionID() })
	var listed <-chan response
	lres := &getChildren2Response{}
	if list != "" {
		listed = c.queueRequest(opGetChildren2, &getChildren2Request{Path: list}, lres, nil)
	}
	outcome := func(r response) (Created, error) {
		if r.err != nil {
			return Created{}, r.err
		}
		return Created{Path: res.Path, Zxid: r.zxid, Session: session}, nil
	}
	cr, ok := c.await(st, created)
	if !ok {
		if late != nil {
			go func() { late(outcome(c.awaitLate(created))) }()
		}
		return Created{}, Listed{}, ErrStopped
	}
	out, err := outcome(cr)
	if err != nil || listed == nil {
		return out, Listed{}, err
	}
	lr, ok := c.await(st, listed)
	switch {
	case !ok:
		return out, Listed{Err: ErrStopped}, nil
	case lr.err != nil:
		return out, Listed{Err: lr.err}, nil
	}
	return out, Listed{Children: lres.Children}, nil
}

// A Stop ends the wait for a request's reply early, when Done (a
// context's) or Gone (the caller's session epoch) closes: the request then
// returns ErrStopped at once, without a goroutine of its own waiting for
// it. The request stays sent and may still be applied. Nil channels never
// stop a wait.
type Stop struct {
	Done, Gone <-chan struct{}
}

// ErrStopped: the caller's Stop ended the wait for the reply. The request
// may still be applied.
var ErrStopped = errors.New("zk: stopped waiting for the reply")

// await waits for a reply on recv and reports whether it came: false if
// st ended the wait first. The end of the connection is a reply with
// ErrConnectionClosed, as request makes it.
func (c *Conn) await(st Stop, recv <-chan response) (response, bool) {
	select {
	case r := <-recv:
		return r, true
	case <-c.shouldQuit:
		return response{-1, ErrConnectionClosed}, true
	case <-st.Done:
	case <-st.Gone:
	}
	return response{}, false
}

// awaitLate waits for the reply to a request whose caller stopped waiting.
func (c *Conn) awaitLate(recv <-chan response) response {
	r, _ := c.await(Stop{}, recv)
	return r
}

// ChildrenStop is Children, stopped by st.
func (c *Conn) ChildrenStop(st Stop, path string) ([]string, *Stat, error) {
	if err := validatePath(path, false); err != nil {
		return nil, nil, err
	}
	res := &getChildren2Response{}
	r, ok := c.await(st, c.queueRequest(opGetChildren2, &getChildren2Request{Path: path}, res, nil))
	switch {
	case !ok:
		return nil, nil, ErrStopped
	case r.err == ErrConnectionClosed:
		return nil, nil, r.err
	}
	return res.Children, &res.Stat, r.err
}

// Watched is the outcome of one data watch GetWAll set: the node's data
// and the watch's channel, or why it was not set (ErrNoNode for a node
// that is gone: no watch is left behind then).
type Watched struct {
	Data  []byte
	Event <-chan Event
	Err   error
}

// GetWAll is GetW on each of paths, the requests sent back to back
// without waiting for a reply in between, so that all the watches cost one
// round trip. The server handles them in the order given, and a session's
// events come in the order of the changes that fire them. A node that is
// gone is reported in its Watched (ErrNoNode); any other failure is
// GetWAll's error. A watch whose request was stopped is still set once
// its reply comes.
func (c *Conn) GetWAll(st Stop, paths ...string) ([]Watched, error) {
	for _, p := range paths {
		if err := validatePath(p, false); err != nil {
			return nil, err
		}
	}
	out := make([]Watched, len(paths))
	res := make([]getDataResponse, len(paths))
	recv := make([]<-chan response, len(paths))
	for i, p := range paths {
		w := &out[i]
		recv[i] = c.queueRequest(opGetData, &getDataRequest{Path: p, Watch: true}, &res[i], func(_ *request, _ *responseHeader, err error) {
			if err == nil {
				w.Event = c.addWatcher(p, watchTypeData)
			}
		})
	}
	for i, rc := range recv {
		r, ok := c.await(st, rc)
		switch {
		case !ok:
			return nil, ErrStopped
		case r.err != nil && r.err != ErrNoNode:
			return nil, r.err
		}
		out[i].Data, out[i].Err = res[i].Data, r.err
	}
	return out, nil
}

// DeleteStop is Delete, stopped by st.
func (c *Conn) DeleteStop(st Stop, path string, version int32) error {
	if err := validatePath(path, false); err != nil {
		return err
	}
	r, ok := c.await(st, c.queueRequest(opDelete, &DeleteRequest{Path: path, Version: version}, &deleteResponse{}, nil))
	if !ok {
		return ErrStopped
	}
	return r.err
}
