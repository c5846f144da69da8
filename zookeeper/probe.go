package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"
)

// sessionRange is the span of session timeouts a server negotiates: its
// minSessionTimeout and maxSessionTimeout settings.
type sessionRange struct {
	min, max time.Duration
	server   string
}

func (r sessionRange) String() string {
	return fmt.Sprintf("from %v to %v (minSessionTimeout and maxSessionTimeout of %s)", r.min, r.max, r.server)
}

// probeRange learns a server's session timeout range by asking it for the
// shortest and the longest possible session and reading what it grants: a
// server clamps the timeout a client asks for to its range. Each probe
// session is closed at once. The servers are tried in turn; the first that
// answers is used.
func probeRange(ctx context.Context, servers []string) (sessionRange, error) {
	var errs []error
	for _, s := range servers {
		lo, err := negotiate(ctx, s, 1)
		if err == nil {
			var hi time.Duration
			hi, err = negotiate(ctx, s, math.MaxInt32)
			if err == nil {
				return sessionRange{min: lo, max: hi, server: s}, nil
			}
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return sessionRange{}, errors.Join(errs...)
}

// negotiate opens a session on server asking for a timeout of askMs
// milliseconds, closes it, and returns the timeout the server granted. It
// speaks the protocol directly: the client library cannot ask for timeouts
// this short, and hides the one it was granted.
func negotiate(ctx context.Context, server string, askMs int32) (time.Duration, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	// ConnectRequest: protocolVersion int, lastZxidSeen long, timeOut int,
	// sessionId long, passwd buffer (16 zero bytes), each big-endian and
	// framed by its length.
	req := make([]byte, 0, 48)
	req = binary.BigEndian.AppendUint32(req, 0) // frame length, set below
	req = binary.BigEndian.AppendUint32(req, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, uint32(askMs))
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 16)
	req = append(req, make([]byte, 16)...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := c.Write(req); err != nil {
		return 0, err
	}
	// ConnectResponse: protocolVersion int, timeOut int, sessionId long, ...
	var hdr [20]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return 0, fmt.Errorf("no answer to a session request: %w", err)
	}
	granted := int32(binary.BigEndian.Uint32(hdr[8:12]))
	session := binary.BigEndian.Uint64(hdr[12:20])
	if session == 0 || granted <= 0 {
		return 0, fmt.Errorf("%s refused a session (is it a ZooKeeper server that serves clients?)", server)
	}
	// Read the rest of the response, then close the session so that it
	// does not linger for up to maxSessionTimeout: RequestHeader xid 1,
	// type closeSession (-11). The reply is not needed.
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[0:4]))-16); err != nil {
		return 0, err
	}
	closeReq := binary.BigEndian.AppendUint32(nil, 8)
	closeReq = binary.BigEndian.AppendUint32(closeReq, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xfffffff5)) // -11
	if _, err := c.Write(closeReq); err == nil {
		var reply [20]byte // length, xid, zxid, err
		io.ReadFull(c, reply[:])
	}
	return time.Duration(granted) * time.Millisecond, nil
}
