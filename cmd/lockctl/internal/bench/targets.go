package bench

import (
	"fmt"
	"time"
)

// Judge returns the project's targets for the backends in rep, each met
// or missed from rep.Results, or not measured when the results to judge
// it are missing. A missed target says why where the figures tell.
func Judge(rep *Report) []Target {
	var ts []Target
	for _, b := range rep.Backends {
		ts = append(ts, uncontendedTargets(rep, b.Name)...)
		ts = append(ts, hotKeyTargets(rep, b.Name)...)
		ts = append(ts, heldLocksTarget(rep, b.Name))
		if b.Name != "memory" {
			ts = append(ts, recoveryGoal(rep, b.Name))
		}
		ts = append(ts, writerTargets(rep, b)...)
		ts = append(ts, semaphoreTarget(rep, b))
	}
	return ts
}

// writerTargets: where the backend queues (FIFO), a writer is not
// starved by a stream of readers. Elsewhere the read-write scenario
// measures how long a writer waits, and there is no target to judge.
func writerTargets(rep *Report, b Backend) []Target {
	const name, want = "writer not starved", "every write granted within its step under a stream of readers, none still waiting at its end"
	switch {
	case !b.FIFO:
		return nil
	case !b.Shared:
		return []Target{notMeasured(name, b.Name, want, "the backend does not admit shared holds (Capabilities.Shared is false)")}
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Scenario != ScenarioReadWrite || res.Backend != b.Name || res.Kind != KindLocker || res.ReadWrite == nil {
			continue
		}
		v := res.ReadWrite
		t := Target{Name: name, Backend: b.Name, Want: want, Measured: true,
			Got: fmt.Sprintf("%d writes, %d starved; writer p99 %v, longest %v, with %d readers at %.0f reads/s", v.Writes, v.Starved, v.Wait.P99, v.LongestWait.Round(time.Microsecond), v.Readers, res.PerSec)}
		t.Met = v.Starved == 0 && v.Writes > 0
		if !t.Met {
			t.Why = "the backend claims FIFO: a writer queued behind readers must be served before the readers that asked after it"
		}
		return []Target{t}
	}
	return []Target{notMeasured(name, b.Name, want, "the read-write scenario did not run")}
}

// semaphoreTarget: never more permits held than the limit.
func semaphoreTarget(rep *Report, b Backend) Target {
	const name = "semaphore limit"
	want := "never more permits held at once than the limit, and permits granted"
	if !b.Permits {
		return notMeasured(name, b.Name, want, "the backend does not admit semaphores (Capabilities.Permits is false)")
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Scenario != ScenarioSemaphore || res.Backend != b.Name || res.Kind != KindLocker || res.Semaphore == nil {
			continue
		}
		s := res.Semaphore
		t := Target{Name: name, Backend: b.Name, Want: want, Measured: true,
			Got: fmt.Sprintf("at most %d of %d held; %.0f grants/s with %d clients, wait p50 %v", s.MostHeld, s.Permits, res.PerSec, s.Clients, res.Latency.P50)}
		t.Met = s.MostHeld <= s.Permits && res.Ops > 0
		if !t.Met {
			t.Why = "the clients saw more permits held at once than the limit, or none granted"
		}
		return t
	}
	return notMeasured(name, b.Name, want, "the semaphore scenario did not run")
}

// find returns the result of design kind (and name, if not "") in
// scenario on backend with the given params, or nil.
func find(rep *Report, scenario, backend, kind, name string, params map[string]int) *Result {
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Scenario != scenario || res.Backend != backend || res.Kind != kind || (name != "" && res.Design != name) {
			continue
		}
		if sameParams(res.Params, params) {
			return res
		}
	}
	return nil
}

func sameParams(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// bestPeer returns the peer result with the highest rate.
func bestPeer(rep *Report, scenario, backend string, params map[string]int) *Result {
	var best *Result
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Scenario == scenario && res.Backend == backend && res.Kind == KindPeer && sameParams(res.Params, params) && res.Ops > 0 {
			if best == nil || res.PerSec > best.PerSec {
				best = res
			}
		}
	}
	return best
}

func notMeasured(name, backend, want, why string) Target {
	return Target{Name: name, Backend: backend, Want: want, Why: why}
}

// ratioTarget judges locker.PerSec / base.PerSec >= want.
func ratioTarget(name, backend string, lk, base *Result, want float64, baseName string) Target {
	wantText := fmt.Sprintf("at least %.2fx %s", want, baseName)
	if lk == nil || base == nil || lk.Ops == 0 || base.PerSec == 0 {
		return notMeasured(name, backend, wantText, "the scenario or one of the designs did not run")
	}
	ratio := lk.PerSec / base.PerSec
	t := Target{Name: name, Backend: backend, Want: wantText, Measured: true, Met: ratio >= want,
		Got: fmt.Sprintf("%.3fx (%.0f against %.0f %s/s; p50 %v against %v)", ratio, lk.PerSec, base.PerSec, lk.Unit, lk.Latency.P50, base.Latency.P50)}
	if !t.Met {
		t.Why = fmt.Sprintf("the Locker's p99 is %v against %v; see the package docs of the backend for what the Locker does beyond %s", lk.Latency.P99, base.Latency.P99, baseName)
	}
	return t
}

// uncontendedTargets judges the Locker against the design named "raw"
// (on postgres, the lease row; its advisory lock is a baseline of the
// tables only) and the best peer. memory has no server, so neither
// raw design nor peer; postgres has no peer library.
func uncontendedTargets(rep *Report, backend string) []Target {
	lk := find(rep, ScenarioUncontended, backend, KindLocker, "", nil)
	var ts []Target
	if raw := find(rep, ScenarioUncontended, backend, KindRaw, "raw", nil); raw != nil || backend != "memory" {
		ts = append(ts, ratioTarget("uncontended vs raw", backend, lk, raw, 0.95, "the raw primitives"))
	}
	if peer := bestPeer(rep, ScenarioUncontended, backend, nil); peer != nil {
		ts = append(ts, ratioTarget("uncontended vs best peer", backend, lk, peer, 1.0, peer.Design))
	} else if backend != "memory" && backend != "postgres" {
		ts = append(ts, notMeasured("uncontended vs best peer", backend, "at least 1.00x the best peer", "no peer design ran"))
	}
	return ts
}

// pgHandoffRatio bounds PostgreSQL's handoff: a waiter is woken by the
// NOTIFY of the release's commit and takes the key with one INSERT, so
// a handoff is about the raw pair's two statements (a DELETE, an
// INSERT) plus the notice's delivery: 1.1x to 1.3x the pair's p50 on an
// idle two-core machine, on loopback and with --rtt alike.
const pgHandoffRatio = 1.5

func hotKeyTargets(rep *Report, backend string) []Target {
	two := map[string]int{"waiters": 2}
	lk := find(rep, ScenarioHotKey, backend, KindLocker, "", two)
	switch backend {
	case "redis", "redlock":
		want := "p50 at most 1ms and at least 300 handoffs/s with 2 waiters"
		if lk == nil || lk.Ops == 0 {
			return []Target{notMeasured("hot key", backend, want, "the hot-key scenario with 2 waiters did not run")}
		}
		t := Target{Name: "hot key", Backend: backend, Want: want, Measured: true,
			Got: fmt.Sprintf("p50 %v, %.0f handoffs/s", lk.Latency.P50, lk.PerSec)}
		t.Met = lk.Latency.P50 <= time.Millisecond && lk.PerSec >= 300
		if !t.Met {
			t.Why = "handoffs ride on release notices; a slow handoff means a notice was late or lost and the waiter fell back to the holder's TTL"
		}
		return []Target{t}
	case "zookeeper", "etcd":
		want := "at least the peer's handoffs/s and no worse p99, with 2 waiters"
		peer := bestPeer(rep, ScenarioHotKey, backend, two)
		if lk == nil || peer == nil || lk.Ops == 0 || peer.PerSec == 0 {
			return []Target{notMeasured("hot key vs peer", backend, want, "the hot-key scenario or the peer did not run")}
		}
		t := Target{Name: "hot key vs peer", Backend: backend, Want: want, Measured: true,
			Got: fmt.Sprintf("%.3fx %s's handoffs/s; p99 %v against %v", lk.PerSec/peer.PerSec, peer.Design, lk.Latency.P99, peer.Latency.P99)}
		t.Met = lk.PerSec >= peer.PerSec && lk.Latency.P99 <= peer.Latency.P99
		if !t.Met {
			t.Why = "both wait for the same server notification (a watch) after the release; on a loaded machine the two are within noise of each other"
		}
		return []Target{t}
	case "postgres":
		want := fmt.Sprintf("p50 at most %.1fx the raw pair's uncontended p50 (one notifying release plus one take), with 2 waiters", pgHandoffRatio)
		raw := find(rep, ScenarioUncontended, backend, KindRaw, "raw", nil)
		switch {
		case lk == nil || lk.Ops == 0:
			return []Target{notMeasured("hot key", backend, want, "the hot-key scenario with 2 waiters did not run")}
		case raw == nil || raw.Ops == 0 || raw.Latency.P50 <= 0:
			return []Target{notMeasured("hot key", backend, want, "the uncontended scenario's raw design did not run")}
		}
		ratio := float64(lk.Latency.P50) / float64(raw.Latency.P50)
		t := Target{Name: "hot key", Backend: backend, Want: want, Measured: true,
			Got: fmt.Sprintf("p50 %v against %v (%.2fx), %.0f handoffs/s", lk.Latency.P50, raw.Latency.P50, ratio, lk.PerSec)}
		t.Met = ratio <= pgHandoffRatio
		if !t.Met {
			t.Why = "handoffs ride on NOTIFY of the release; a slow handoff means a notice was late (a busy listening connection, the server's notify queue) or lost and the waiter fell back to the holder's TTL. " +
				"The raw pair's p50 is the uncontended scenario's: a machine busier during the hot-key step than during that one misses this too"
		}
		return []Target{t}
	}
	return nil
}

func heldLocksTarget(rep *Report, backend string) Target {
	want := "none lost, goroutines not growing with the count, at most 1 KiB of client heap per lock"
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Scenario != ScenarioHeldLocks || res.Backend != backend || res.Memory == nil || res.Memory.Locks == 0 {
			continue
		}
		m := res.Memory
		t := Target{Name: "held locks", Backend: backend, Want: want, Measured: true,
			Got: fmt.Sprintf("%d held for %v at TTL %v: %d lost, %d goroutines added, %.0f B per lock", m.Locks, m.Held.Round(time.Second), m.TTL, m.Lost, m.Goroutines, m.BytesPerLock)}
		// A constant few goroutines (the watchdog, a lease or session
		// loop) are the design; one per lock is not.
		t.Met = m.Lost == 0 && m.Goroutines < 64 && m.BytesPerLock <= 1024
		if !t.Met {
			t.Why = "see the scale figures in the backend's package doc"
		}
		return t
	}
	return notMeasured("held locks", backend, want, "the held-locks scenario did not run")
}

func recoveryGoal(rep *Report, backend string) Target {
	want := "every round within TTL + ExpirySlack + one round trip"
	var res *Result
	for i := range rep.Results {
		if r := &rep.Results[i]; r.Scenario == ScenarioRecovery && r.Backend == backend && r.Recovery != nil {
			res = r
		}
	}
	if res == nil || res.Recovery == nil || res.Recovery.Rounds == 0 {
		return notMeasured("recovery", backend, want, "the recovery scenario did not run")
	}
	rec := res.Recovery
	t := Target{Name: "recovery", Backend: backend, Want: want, Measured: true,
		Got: fmt.Sprintf("%d of %d rounds within %v (TTL %v + slack %v + round trip); slowest %v", rec.Within, rec.Rounds, rec.Bound.Round(time.Millisecond), rec.TTL, rec.ExpirySlack, res.Latency.Max)}
	t.Met = rec.Within == rec.Rounds && res.Errors == 0
	if !t.Met {
		t.Why = "a waiter learns of an expiry by the holder's TTL it was told, or by polling; see the backend's package doc"
	}
	return t
}
