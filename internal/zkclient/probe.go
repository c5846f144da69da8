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
	p, err := dialProbe(ctx, server)
	if err != nil {
		return out, err
	}
	defer p.nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		p.nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { p.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if out.Granted, err = p.session(server, ask); err != nil {
		return out, err
	}
	for range pings {
		rtt, err := p.ping()
		if err != nil {
			return out, fmt.Errorf("ping: %w", err)
		}
		out.RTTs = append(out.RTTs, rtt)
	}
	p.closeSession()
	return out, nil
}

// prober is Probe's connection, with the steps it takes on it.
type prober struct {
	nc net.Conn
	fr *frameReader
	e  encoder
}

func dialProbe(ctx context.Context, server string) (*prober, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, dialErr(err)
	}
	return &prober{nc: nc, fr: newFrameReader(nc)}, nil
}

// session asks for a session with a timeout of ask (rounded down to
// milliseconds, within what the protocol carries) and returns the one
// granted.
func (p *prober) session(server string, ask time.Duration) (time.Duration, error) {
	ms := min(max(ask.Milliseconds(), 1), math.MaxInt32)
	resp, err := requestSession(p.nc, p.fr, &connectRequest{timeout: int32(ms)})
	if err != nil {
		return 0, err
	}
	if resp.session == 0 || resp.timeout <= 0 {
		return 0, fmt.Errorf("%s refused a session (is it a ZooKeeper server that serves clients?)", server)
	}
	return time.Duration(resp.timeout) * time.Millisecond, nil
}

// ping sends a ping and times its reply: nothing else comes on a session
// without watches or requests.
func (p *prober) ping() (time.Duration, error) {
	p.e.b = p.e.b[:0]
	p.e.end(p.e.begin(xidPing, opPing))
	start := time.Now()
	if _, err := p.nc.Write(p.e.b); err != nil {
		return 0, err
	}
	b, err := p.fr.next()
	if err != nil {
		return 0, err
	}
	rtt := time.Since(start)
	d := decoder{b: b}
	if xid := d.int32(); d.err != nil || xid != xidPing {
		return 0, fmt.Errorf("%w: a reply to a ping with xid %d", ErrProtocol, xid)
	}
	return rtt, nil
}

// closeSession closes the session and waits for the reply (within the
// probe's deadline), so that the server has taken it in before the
// connection goes.
func (p *prober) closeSession() {
	p.e.b = p.e.b[:0]
	p.e.end(p.e.begin(1, opCloseSession))
	if _, err := p.nc.Write(p.e.b); err == nil {
		p.fr.next()
	}
}

// requestSession sends a session request on nc and reads the server's
// answer from fr, nc's reader.
func requestSession(nc net.Conn, fr *frameReader, req *connectRequest) (connectResponse, error) {
	var resp connectResponse
	var e encoder
	req.encode(&e)
	if _, err := nc.Write(e.b); err != nil {
		return resp, noAnswer(err)
	}
	b, err := fr.next()
	if err != nil {
		return resp, noAnswer(err)
	}
	err = resp.decode(b)
	return resp, err
}

// dialErr is the error of a dial that failed with err: a server that took
// the connection in and closed it at once, before the dial had even
// finished, gets the hint of noAnswer.
func dialErr(err error) error {
	if closedEarly(err) {
		return fmt.Errorf("%w: %s", err, limitHint)
	}
	return err
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
