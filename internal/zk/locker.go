package zk

import "time"

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
func (c *Conn) CreateAndList(path string, data []byte, flags int32, acl []ACL, list string) (Created, Listed, error) {
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
	var cr response
	select {
	case cr = <-created:
	case <-c.shouldQuit:
		return Created{}, Listed{}, ErrConnectionClosed
	}
	if cr.err != nil {
		return Created{}, Listed{}, cr.err
	}
	out := Created{Path: res.Path, Zxid: cr.zxid, Session: session}
	if listed == nil {
		return out, Listed{}, nil
	}
	select {
	case lr := <-listed:
		if lr.err != nil {
			return out, Listed{Err: lr.err}, nil
		}
		return out, Listed{Children: lres.Children}, nil
	case <-c.shouldQuit:
		return out, Listed{Err: ErrConnectionClosed}, nil
	}
}
