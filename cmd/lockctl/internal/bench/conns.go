package bench

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
)

// ZKMaxClientCnxns is ZooKeeper's default maxClientCnxns: its servers
// refuse a client address more connections than that unless configured
// otherwise. Redis (maxclients, 10,000) and etcd have no limit a run
// comes near.
const ZKMaxClientCnxns = 60

// PGMaxClients is how many connections a PostgreSQL server at its
// defaults takes from roles that are not superusers: max_connections
// (100) less superuser_reserved_connections (3). Every client of a run
// holds one connection at least (the Locker's also one to LISTEN on
// once it waits).
const PGMaxClients = 97

// ServerConns is the most connections a run had open at once to one
// server.
type ServerConns struct {
	Server string `json:"server"` // host:port
	Max    int    `json:"max"`
}

// ConnPeaks keeps the most connections seen open at once to each
// server, over samples taken as a run goes. It is safe for concurrent
// use.
type ConnPeaks struct {
	mu    sync.Mutex
	peaks map[string]int
	err   error // why a sample failed
}

// Sample counts the connections of the processes pids (0 is this one)
// now (OpenConns) and keeps each server's peak.
func (c *ConnPeaks) Sample(pids []int) {
	counts, err := OpenConns(pids)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = cmp.Or(c.err, err)
		return
	}
	if c.peaks == nil {
		c.peaks = map[string]int{}
	}
	for s, n := range counts {
		c.peaks[s] = max(c.peaks[s], n)
	}
}

// Peaks returns each server's peak, most connections first, and why
// connections could not be counted, if they could not.
func (c *ConnPeaks) Peaks() ([]ServerConns, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ServerConns
	for s, n := range c.peaks {
		out = append(out, ServerConns{Server: s, Max: n})
	}
	slices.SortFunc(out, func(a, b ServerConns) int { return cmp.Or(b.Max-a.Max, cmp.Compare(a.Server, b.Server)) })
	return out, c.err
}

// ClientsNote says how many clients a run opens at once on a deployment
// of backend (why: the step that opens the most), each with
// connections of its own, and, where that is more than a ZooKeeper
// server allows one client address or a PostgreSQL server allows in all
// by default, what to do.
func ClientsNote(backend string, clients int, why string) string {
	s := fmt.Sprintf("%s: up to %d clients open at once (%s), each with connections of its own", backend, clients, why)
	if backend == "postgres" && clients > PGMaxClients {
		s += fmt.Sprintf("; a server at PostgreSQL's default max_connections (100, %d of them for roles that are not superusers) refuses the rest: raise it or lower --clients and --waiters", PGMaxClients)
	}
	if backend != "zookeeper" {
		return s
	}
	s = fmt.Sprintf("%s: up to %d sessions open at once (%s), each one connection to one server", backend, clients, why)
	if clients > ZKMaxClientCnxns {
		s += fmt.Sprintf("; a server at ZooKeeper's default maxClientCnxns (%d connections per client address) refuses the rest: raise it on the servers (0: no limit) or lower --clients and --waiters", ZKMaxClientCnxns)
	}
	return s
}
