package bench

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OpenConns counts the established TCP connections of the processes
// pids (0 is this one; the others in its network namespace, as its
// children are) by the address they reach, "host:port", as the kernel
// lists them (/proc/PID/fd, /proc/self/net/tcp{,6}).
// Connections between these processes and their own listeners (the
// loopback proxies of --rtt and of chaos's workers) are left out: a
// proxy's connection onwards to the server is what the server sees.
// A process that has ended meanwhile counts for nothing.
func OpenConns(pids []int) (map[string]int, error) {
	inodes := map[string]bool{}
	for _, pid := range pids {
		proc := "/proc/self"
		if pid != 0 {
			proc = "/proc/" + strconv.Itoa(pid)
		}
		err := socketInodes(proc, inodes)
		if err != nil && !errors.Is(err, os.ErrNotExist) { // not found: ended
			return nil, err
		}
	}
	// The processes share this one's network namespace, whose sockets
	// these tables list.
	var socks []tcpSock
	listening := map[uint16]bool{} // ports the processes listen on
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		ours, err := readTCPTable(table, inodes)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		for _, s := range ours {
			switch {
			case s.state == tcpListen:
				listening[s.local.Port()] = true
			case s.state == tcpEstablished:
				socks = append(socks, s)
			}
		}
	}
	counts := map[string]int{}
	for _, s := range socks {
		own := s.remote.Addr().IsLoopback() && listening[s.remote.Port()] || listening[s.local.Port()]
		if !own {
			counts[s.remote.String()]++
		}
	}
	return counts, nil
}

// socketInodes adds to inodes those of the sockets the process at proc
// (/proc/PID) has open.
func socketInodes(proc string, inodes map[string]bool) error {
	dir := filepath.Join(proc, "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return nil
}

// The states of /proc/net/tcp that count.
const (
	tcpEstablished = "01"
	tcpListen      = "0A"
)

// tcpSock is a line of /proc/net/tcp{,6}.
type tcpSock struct {
	local, remote netip.AddrPort
	state, inode  string
}

// readTCPTable reads the sockets of inodes in /proc/PID/net/tcp or tcp6:
// "sl local rem st ... inode ...", addresses in hexadecimal. The others
// (the servers' own, when chaos runs them) are passed over unparsed.
func readTCPTable(path string, inodes map[string]bool) ([]tcpSock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var socks []tcpSock
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || !inodes[fields[9]] {
			continue
		}
		local, err1 := parseProcAddr(fields[1])
		remote, err2 := parseProcAddr(fields[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		socks = append(socks, tcpSock{local: local, remote: remote, state: fields[3], inode: fields[9]})
	}
	return socks, sc.Err()
}

// parseProcAddr parses an address of /proc/net/tcp{,6}: the IP address
// as 32-bit words printed in hexadecimal, each word the bytes of the
// address in the host's byte order, then ":" and the port in
// hexadecimal.
func parseProcAddr(s string) (netip.AddrPort, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	ip, err := hex.DecodeString(ipHex)
	if !ok || err != nil || len(ip) != net.IPv4len && len(ip) != net.IPv6len {
		return netip.AddrPort{}, fmt.Errorf("address %q: not hexadecimal IP:port", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	for i := 0; i < len(ip); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(ip[i:]))
	}
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
