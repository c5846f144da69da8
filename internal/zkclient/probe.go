package zkclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"syscall"
	"time"
)

// Probed is what Probe learned of a server.
type Probed struct {
	// Granted is the session timeout the server granted: the one asked
	// for, clamped to its minSessionTimeout and maxSessionTimeout.
	Granted time.Duration
	// RTTs are the round trips of the pings, in the order sent.
	RTTs []time.Duration
}

// Probe opens a session on server asking for a timeout of ask (rounded
// down to milliseconds, within what the protocol carries), sends pings
// pings one after the other over it, timing each, and closes the session
// at once, so that it does not linger. It needs no Conn: Open and doctor
// use it to learn a server's session range and round trip.
func Probe(ctx context.Context, server string, ask time.Duration, pings int) (Probed, error) {
	var out Probed
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		if closedEarly(err) {
			// The server took the connection in and closed it at once,
			// before the dial had even finished.
			return out, fmt.Errorf("%w: %s", err, limitHint)
		}
		return out, err
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	ms := min(max(ask.Milliseconds(), 1), math.MaxInt32)
	var e encoder
	(&connectRequest{timeout: int32(ms)}).encode(&e)
	if _, err := nc.Write(e.b); err != nil {
		return out, noAnswer(err)
	}
	fr := newFrameReader(nc)
	b, err := fr.next()
	if err != nil {
		return out, noAnswer(err)
	}
	var resp connectResponse
	if err := resp.decode(b); err != nil {
		return out, err
	}
	if resp.session == 0 || resp.timeout <= 0 {
		return out, fmt.Errorf("%s refused a session (is it a ZooKeeper server that serves clients?)", server)
	}
	out.Granted = time.Duration(resp.timeout) * time.Millisecond
	for range pings {
		e.b = e.b[:0]
		e.end(e.begin(xidPing, opPing))
		start := time.Now()
		if _, err := nc.Write(e.b); err != nil {
			return out, fmt.Errorf("ping: %w", err)
		}
		// Nothing but the ping's reply comes on a session without
		// watches or requests.
		b, err := fr.next()
		if err != nil {
			return out, fmt.Errorf("ping: %w", err)
		}
		rtt := time.Since(start)
		d := decoder{b: b}
		if xid := d.int32(); d.err != nil || xid != xidPing {
			return out, fmt.Errorf("%w: a reply to a ping with xid %d", ErrProtocol, xid)
		}
		out.RTTs = append(out.RTTs, rtt)
	}
	// Close the session and wait for the reply (within ctx), so that the
	// server has taken it in before the connection goes.
	e.b = e.b[:0]
	e.end(e.begin(1, opCloseSession))
	if _, err := nc.Write(e.b); err == nil {
		fr.next()
	}
	return out, nil
}

// noAnswer is the error for a session request that got no answer because
// reading it failed with err. A server that closes a new connection
// before answering (the read ends with EOF, or a reset when the request
// reached an already closed socket) is most often ZooKeeper refusing a
// client address past its maxClientCnxns: it accepts the connection and
// closes it at once, logging why only on its side. Saying so spares
// the user a hunt through the network for a server that is up.
func noAnswer(err error) error {
	if closedEarly(err) {
		return fmt.Errorf("no answer to a session request: %w: %s", err, limitHint)
	}
	return fmt.Errorf("no answer to a session request: %w", err)
}

// limitHint says what most often makes a server close a new connection.
const limitHint = "the server closed the connection before answering; " +
	"a limit on connections per client address (ZooKeeper's maxClientCnxns, 60 by default) is a likely cause"

// closedEarly reports whether err says that the server closed the
// connection: EOF, or a reset or broken pipe (a write, or even the dial's
// completion, meeting a socket the server already closed). A refused
// connection is not one: nothing listens there.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
