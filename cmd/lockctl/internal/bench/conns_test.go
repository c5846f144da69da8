package bench

import (
	"encoding/binary"
	"encoding/hex"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/distlock/locker/conformance"
)

func TestParseProcAddr(t *testing.T) {
	// As the kernel prints them: each 32-bit word of the address in the
	// host's byte order, in hexadecimal.
	proc := func(ip string, port uint16) string {
		b := netip.MustParseAddr(ip).AsSlice()
		var s strings.Builder
		for i := 0; i < len(b); i += 4 {
			w := make([]byte, 4)
			binary.BigEndian.PutUint32(w, binary.NativeEndian.Uint32(b[i:]))
			s.WriteString(strings.ToUpper(hex.EncodeToString(w)))
		}
		return s.String() + ":" + strings.ToUpper(hex.EncodeToString([]byte{byte(port >> 8), byte(port)}))
	}
	if runtime.GOARCH == "amd64" && proc("127.0.0.1", 8080) != "0100007F:1F90" {
		t.Fatalf("proc(127.0.0.1:8080) = %s, want the kernel's 0100007F:1F90", proc("127.0.0.1", 8080))
	}
	for _, want := range []string{"127.0.0.1:22181", "10.1.2.3:6379", "[::1]:2379", "[2001:db8::17]:443"} {
		ap := netip.MustParseAddrPort(want)
		got, err := parseProcAddr(proc(ap.Addr().String(), ap.Port()))
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%s) = %v, %v; want %s", proc(ap.Addr().String(), ap.Port()), got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "XX00007F:1F90", "0100007F:FFFFF", "01007F:1F90"} {
		if _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) succeeded", bad)
		}
	}
}

// TestOpenConns: the connections this process has open to a real
// server are counted, a proxy's in-process hop is not (its connection
// onwards to the server is), and neither are connections to a listener
// of this process.
func TestOpenConns(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("connections are counted on Linux only")
	}
	server := hostsOf(serverURL(t, envRedis))[0]
	count := func() map[string]int {
		t.Helper()
		c, err := OpenConns([]int{0})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial := func(addr string) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	before := count()[server]
	var conns []net.Conn
	for range 3 {
		conns = append(conns, dial(server))
	}
	proxy, err := conformance.NewProxy(server)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	viaProxy := dial(proxy.Addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial(ln.Addr().String())
	// The proxy dials the server once its client's connection is in.
	viaProxy.Write([]byte("PING\r\n"))
	viaProxy.Read(make([]byte, 16))
	got := count()
	if got[server] != before+4 {
		t.Errorf("%d connections to %s, want %d: the 3 dialled and the proxy's", got[server], server, before+4)
	}
	for _, own := range []string{proxy.Addr(), ln.Addr().String()} {
		if got[own] != 0 {
			t.Errorf("%d connections to %s, a listener of this process, counted", got[own], own)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	if n := count()[server]; n != before+1 {
		t.Errorf("%d connections to %s once 3 closed, want %d", n, server, before+1)
	}
}

// TestClients: the most clients a run opens at once on a deployment is
// its largest step's, and past ZooKeeper's default limit the note says
// what to do.
func TestClients(t *testing.T) {
	designs := []Design{{Kind: KindLocker, Waits: true}, {Kind: KindRaw}, {Kind: KindPeer, Waits: true}}
	d := deployment{backend: Backend{Name: "zookeeper"}, designs: designs}
	for _, tc := range []struct {
		s        Settings
		want     int
		why, not string
	}{
		{Settings{Scenarios: Scenarios, Clients: []int{1, 4, 64}, Waiters: []int{2, 8, 32}}, 192, "throughput: 64 clients of each of 3 designs", ""},
		{Settings{Scenarios: []string{ScenarioHotKey, ScenarioUncontended}, Clients: []int{64}, Waiters: []int{2, 40}}, 80, "hot-key: 40 waiters of each of 2 designs", ""},
		{Settings{Scenarios: []string{ScenarioUncontended, ScenarioRecovery}, Clients: []int{64}}, 3, "uncontended: one client of each of 3 designs", "maxClientCnxns"},
		{Settings{Scenarios: []string{ScenarioRecovery}}, 2, "recovery: a holder process and a waiter", "maxClientCnxns"},
		{Settings{Scenarios: []string{ScenarioRecovery, ScenarioFailover}}, 3, "failover: 3 campaigner processes", "maxClientCnxns"},
	} {
		n, why := d.clients(tc.s)
		if n != tc.want || why != tc.why {
			t.Errorf("%v: %d clients (%s), want %d (%s)", tc.s.Scenarios, n, why, tc.want, tc.why)
		}
		note := ClientsNote("zookeeper", n, why)
		if !strings.Contains(note, why) || (tc.not == "") != strings.Contains(note, "maxClientCnxns") {
			t.Errorf("%d sessions: %q", n, note)
		}
		note = ClientsNote("postgres", n, why)
		if !strings.Contains(note, why) || (n > PGMaxClients) != strings.Contains(note, "max_connections") {
			t.Errorf("postgres, %d clients: %q", n, note)
		}
	}
}
