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
// worker processes (three in some scenarios of shared holds and
// semaphores: Scenario.Workers), each with one Locker (on ZooKeeper, one
// session: one connection to one server), and the deployments run their
// rounds at once. On ZooKeeper that stays under the default
// maxClientCnxns unless some twenty deployments share a server.
func (e *engine) connsNote() string {
	n := max(e.workers, 2)
	s := fmt.Sprintf("%s worker processes at once per deployment, each with one client of its own; %d deployment(s) at once", numberWord(n), len(e.deps))
	zk := 0
	for _, d := range e.deps {
		if d.backend == "zookeeper" {
			zk++
		}
	}
	switch {
	case zk == 0:
	case n*zk < bench.ZKMaxClientCnxns:
		s += fmt.Sprintf("; on ZooKeeper at most %d sessions at once, one connection each: under the default maxClientCnxns (%d connections per client address)", n*zk, bench.ZKMaxClientCnxns)
	default:
		s += fmt.Sprintf("; on ZooKeeper up to %d sessions at once, one connection each: more than a server at the default maxClientCnxns (%d connections per client address) allows, should the deployments share one", n*zk, bench.ZKMaxClientCnxns)
	}
	return s
}

// numberWord spells the small numbers of workers.
func numberWord(n int) string {
	if n == 3 {
		return "three"
	}
	if n == 2 {
		return "two"
	}
	return fmt.Sprint(n)
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
		if pid := p.process.pid(); pid > 0 {
			pids = append(pids, pid)
		}
	}
	e.procs = live
	return pids
}
