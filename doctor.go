package locker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/locker/backend"
)

// Status is the verdict of one check of a deployment.
type Status int

// The verdicts, from least to most severe.
const (
	// Pass: nothing found that breaks locks.
	Pass Status = iota
	// Warn: a risk to know about, which a deployment may accept with
	// reason (asynchronous replication, no durable log, a single server).
	Warn
	// Fail: locks are or will be broken, or the deployment cannot serve
	// them: fix it before relying on the locks.
	Fail
)

var statusNames = [...]string{Pass: "pass", Warn: "warn", Fail: "fail"}

// String returns "pass", "warn" or "fail".
func (s Status) String() string {
	if s < 0 || int(s) >= len(statusNames) {
		return fmt.Sprintf("Status(%d)", int(s))
	}
	return statusNames[s]
}

// MarshalText encodes s as String does, so that JSON reports carry words.
func (s Status) MarshalText() ([]byte, error) {
	if s < 0 || int(s) >= len(statusNames) {
		return nil, fmt.Errorf("locker: invalid Status %d", int(s))
	}
	return []byte(statusNames[s]), nil
}

// UnmarshalText decodes what MarshalText encodes.
func (s *Status) UnmarshalText(b []byte) error {
	i := slices.Index(statusNames[:], string(b))
	if i < 0 {
		return fmt.Errorf("locker: invalid Status %q: want pass, warn or fail", b)
	}
	*s = Status(i)
	return nil
}

// Finding is the outcome of one check of a deployment.
type Finding struct {
	// Check names what was checked, in words that stay the same from run
	// to run (e.g. "maxmemory-policy", "replication", "rtt"), so that
	// tools can match them.
	Check  string
	Status Status
	// Target is the server the finding is about (host:port), or "" for
	// the deployment as a whole.
	Target string
	// Detail says what was found and, unless the check passed, what it
	// does to locks.
	Detail string
	// Fix says how to mend it; "" when the check passed.
	Fix string
}

// Diagnosis is what Diagnose found in a deployment.
type Diagnosis struct {
	// URL is the URL checked, with its passwords redacted (see Redact).
	URL string
	// Backend is the URL's scheme in lower case, which names the backend
	// and its mode (redis, rediss+sentinel, redlock, zk, etcds, ...).
	Backend string
	// Findings are in the order the backend checked: the deployment as a
	// whole first, then each server.
	Findings []Finding
}

// Worst returns the most severe status among the findings, Pass when
// there are none.
func (d Diagnosis) Worst() Status {
	worst := Pass
	for _, f := range d.Findings {
		worst = max(worst, f.Status)
	}
	return worst
}

// A Diagnoser checks the deployment that a URL of the scheme it was
// registered for names, for what silently breaks locks. It reads its
// parameters and calls u.CheckParams as the scheme's Opener does, with
// the Opener's errors: its error is for a URL that cannot be read (an
// unknown parameter, a bad value). Everything else that Open would refuse
// (a TTL outside the backend's range, a server that may evict locks, too
// few nodes), and everything it learns from the servers, that they are
// unreachable included, is a Finding: it reports what Open would refuse
// instead of refusing it. It bounds its own network calls, so that a
// server that does not answer costs seconds, not ctx's whole deadline.
type Diagnoser func(ctx context.Context, u *URL) ([]Finding, error)

var diagnosers = struct {
	sync.RWMutex
	m map[string]Diagnoser
}{m: map[string]Diagnoser{}}

// RegisterDiagnoser is for backend packages: it makes the checks of a URL
// scheme available to Diagnose. They call it from init, beside Register. It
// panics if scheme is empty, d is nil, or the scheme already has a
// Diagnoser, as Register does.
func RegisterDiagnoser(scheme string, d Diagnoser) {
	scheme = strings.ToLower(scheme)
	if scheme == "" || d == nil {
		panic("locker: RegisterDiagnoser with empty scheme or nil Diagnoser")
	}
	diagnosers.Lock()
	defer diagnosers.Unlock()
	if _, dup := diagnosers.m[scheme]; dup {
		panic("locker: RegisterDiagnoser called twice for scheme " + scheme)
	}
	diagnosers.m[scheme] = d
}

// Diagnose checks the deployment rawURL names for what silently breaks
// locks (a Redis that may evict lock keys, a TTL the servers cannot keep,
// a lost quorum, a slow network, ...) and returns one Finding per check
// and server, each with its reason and its fix. It works where Open would
// refuse the deployment, reporting why instead, and holds no lock: it
// reads the servers' settings and state, and writes nothing but what
// probing needs (a ZooKeeper session, an etcd lease, each closed at once).
//
// rawURL and opts are read as Open reads them, and the errors for a URL
// that cannot be read (malformed, an unknown scheme or parameter, a bad
// value) are Open's, word for word. What Open refuses about a URL that
// can be read (a default TTL outside the backend's range, fewer than
// three Redlock nodes) is a failing finding instead. A backend that
// registered no Diagnoser is checked by opening a Locker on rawURL and
// closing it at once: Open's error, if any, is Diagnose's, and success is
// a single passing finding.
func Diagnose(ctx context.Context, rawURL string, opts ...OpenOption) (Diagnosis, error) {
	u, err := prepare(ctx, rawURL, opts)
	if err != nil {
		return Diagnosis{}, err
	}
	shown := redact(u.URL)
	dg := Diagnosis{URL: shown, Backend: strings.ToLower(u.Scheme)}
	diagnosers.RLock()
	d := diagnosers.m[dg.Backend]
	diagnosers.RUnlock()
	if d == nil {
		l, err := Open(ctx, rawURL, opts...)
		if err != nil {
			return Diagnosis{}, err
		}
		l.Close()
		dg.Findings = []Finding{{
			Check: "open", Status: Pass,
			Detail: "the " + dg.Backend + " backend has no checks of its own; a Locker was opened on the URL and closed without error",
		}}
		return dg, nil
	}
	findings, err := d(ctx, u)
	if err == nil {
		// As in Open: a Diagnoser that forgot CheckParams must not let a
		// misspelt parameter pass.
		err = u.CheckParams()
	}
	if err != nil {
		return Diagnosis{}, fmt.Errorf("locker: open %q: %w", shown, err)
	}
	dg.Findings = findings
	return dg, nil
}

// DefaultTTL returns the TTL of the locks of a Locker opened on u when
// their call chooses none: the ttl parameter, or the package's DefaultTTL.
func (u *URL) DefaultTTL() time.Duration {
	o := defaultOptions()
	for _, opt := range u.Config.Defaults {
		if opt != nil {
			opt(&o)
		}
	}
	return o.ttl
}

// RTT thresholds, as fractions of the TTL. Every acquisition and refresh
// spends a round trip of the lock's validity before the holder can use
// it; above a tenth of the TTL that cost is worth knowing. The watchdog
// refreshes a lock when a third of its TTL has passed, leaving two thirds
// for the refresh to get through: with a round trip above a third of the
// TTL, one refresh that has to be retried arrives after the lock expired.
const (
	rttWarnDivisor = 10
	rttFailDivisor = 3
)

// RTTFinding is for backends' Diagnosers: it judges the round-trip time rtt
// to target against the TTL ttl, with the thresholds every backend's
// Diagnoser uses: a warning above a tenth of the TTL, a failure above a
// third (the watchdog refreshes at a third of the TTL, so a round trip
// longer than that leaves no time to retry a refresh before the lock
// expires). how says how rtt was measured ("median of 5 PINGs").
func RTTFinding(target string, rtt, ttl time.Duration, how string) Finding {
	f := Finding{Check: "rtt", Target: target}
	share := "under 0.1%"
	if pct := float64(rtt) / float64(ttl) * 100; pct >= 0.1 {
		share = fmt.Sprintf("%.1f%%", pct)
	}
	measured := fmt.Sprintf("round trip %v (%s), %s of the TTL %v", rtt.Round(time.Microsecond), how, share, ttl)
	switch {
	case rtt > ttl/rttFailDivisor:
		f.Status = Fail
		f.Detail = measured + ": more than a third of the TTL, and the watchdog refreshes a lock when a third of its TTL has passed, so a refresh that must be retried arrives after the lock expired and another client takes it"
		f.Fix = fmt.Sprintf("raise the TTL (?ttl=) to at least %v (ten round trips), or run the clients nearer the servers", rttWarnDivisor*rtt)
	case rtt > ttl/rttWarnDivisor:
		f.Status = Warn
		f.Detail = measured + ": more than a tenth of the TTL is spent on the wire by every acquisition and refresh, and a slow moment leaves little time to retry a refresh"
		f.Fix = fmt.Sprintf("raise the TTL (?ttl=) to at least %v (ten round trips), or run the clients nearer the servers", rttWarnDivisor*rtt)
	default:
		f.Detail = measured
	}
	return f
}

// SizeFinding is for backends' Diagnosers: it judges the size of a
// replicated deployment for the check named check: voters voting members,
// of which the URL names named. A single member, an even number of them, or
// a URL that names fewer than all warns, each with its reason and fix;
// detail (what was found) starts the finding's Detail. member names a
// member in the backend's words ("member", "server").
func SizeFinding(check, target, detail string, voters, named int, member string) Finding {
	f := Finding{Check: check, Target: target, Detail: detail}
	var issues, fixes []string
	switch {
	case voters == 1:
		issues = append(issues, "a single "+member+": while it is down, no lock can be acquired or refreshed")
		fixes = append(fixes, fmt.Sprintf("run 3 or 5 %ss", member))
	case voters%2 == 0:
		issues = append(issues, fmt.Sprintf("an even number tolerates %d failure(s), no more than %d %ss would", voters-(voters/2+1), voters-1, member))
		fixes = append(fixes, fmt.Sprintf("use an odd number of voting %ss: %d or %d", member, voters-1, voters+1))
	}
	if named < voters {
		issues = append(issues, fmt.Sprintf("when the %ss the URL names are down, clients cannot reach the others", member))
		fixes = append(fixes, fmt.Sprintf("list every %s in the URL", member))
	}
	if len(issues) > 0 {
		f.Status = Warn
		f.Detail += ": " + strings.Join(issues, "; ")
		f.Fix = strings.Join(fixes, "; ")
	}
	return f
}

// TTLFinding is for backends' Diagnosers: it judges the TTL ttl against the
// range of the driver d (its Capabilities' MinTTL and MaxTTL) and its
// clock-drift allowance, as Open judges a default TTL, under the check name
// "ttl". It serves backends whose range needs no server to learn (Redis,
// Redlock, memory): d may be a driver that never connected, as only its
// Capabilities and Drift are read.
func TTLFinding(d backend.Driver, ttl time.Duration) Finding {
	c := configure(d, nil)
	span := fmt.Sprintf("from %v", c.caps.MinTTL)
	if c.caps.MaxTTL > 0 {
		span += fmt.Sprintf(" to %v", c.caps.MaxTTL)
	}
	f := Finding{Check: "ttl"}
	if err := c.checkTTL(ttl); err != nil {
		f.Status = Fail
		f.Detail = err.Error() + ": every acquisition with this TTL fails with ErrInvalidTTL, and Open refuses it as a default"
		f.Fix = fmt.Sprintf("choose a TTL (?ttl=) %s that leaves validity after the drift allowance", span)
		return f
	}
	drift := c.drift(ttl)
	f.Detail = fmt.Sprintf("the TTL %v is within the backend's range (%s) and leaves %v of validity after the clock-drift allowance of %v", ttl, span, ttl-drift, drift)
	return f
}
