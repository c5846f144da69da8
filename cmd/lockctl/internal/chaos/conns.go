package chaos

import (
	"fmt"
	"time"

	"github.com/distlock/locker/cmd/lockctl/internal/bench"
)

// connSampleEvery is how often a run counts its connections: often
// enough to see the connections a fault leaves stalled pile up over a
// round, which lasts seconds.
const connSampleEvery = 200 * time.Millisecond

// connsNote says how many connections the run opens: each round has two
// worker processes, each with one Locker (on ZooKeeper, one session: one
// connection to one server), and the deployments run their rounds at
// once. On ZooKeeper that stays under the default maxClientCnxns unless
// some thirty deployments share a server.
func (e *engine) connsNote() string {
	s := fmt.Sprintf("two worker processes at once per deployment, each with one client of its own; %d deployment(s) at once", len(e.deps))
	zk := 0
	for _, d := range e.deps {
		if d.backend == "zookeeper" {
			zk++
		}
	}
	switch {
	case zk == 0:
	case 2*zk < bench.ZKMaxClientCnxns:
		s += fmt.Sprintf("; on ZooKeeper at most %d sessions at once, one connection each: under the default maxClientCnxns (%d connections per client address)", 2*zk, bench.ZKMaxClientCnxns)
	default:
		s += fmt.Sprintf("; on ZooKeeper up to %d sessions at once, one connection each: more than a server at the default maxClientCnxns (%d connections per client address) allows, should the deployments share one", 2*zk, bench.ZKMaxClientCnxns)
	}
	return s
}

// track adds a worker to those sampleConns counts.
func (e *engine) track(p *proc) {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	e.procs = append(e.procs, p)
}

// sampleConns counts the connections of this process and its workers
// every connSampleEvery until the function it returns is called.
func (e *engine) sampleConns() (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(connSampleEvery)
		defer t.Stop()
		for {
			e.conns.Sample(e.livePids())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// livePids returns this process (0) and the workers still running,
// forgetting those that ended.
func (e *engine) livePids() []int {
	e.procMu.Lock()
	defer e.procMu.Unlock()
	pids := []int{0}
	live := e.procs[:0]
	for _, p := range e.procs {
		select {
		case <-p.exited:
			continue
		default:
		}
		live = append(live, p)
		pids = append(pids, p.cmd.Process.Pid)
	}
	e.procs = live
	return pids
}
