package redisconn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// EvictionCheck says how CheckEviction treats what it finds.
type EvictionCheck struct {
	// Backend names the package in messages: "redis" or "redlock".
	Backend string
	// Allow accepts a policy that can evict lock keys (Options.AllowEviction,
	// allow_eviction=true in a URL).
	Allow bool
	// Quorum, when positive, is how many targets must answer: Redlock's
	// majority. Redlock is meant to work with a minority of its nodes
	// down, so while Quorum targets answer, each one that does not is
	// only logged; when fewer answer, the error names every one that did
	// not, as no lock could be taken. Zero: every server must answer. A
	// TLS handshake that fails for want of configuration (plain text, an
	// unverifiable certificate) is an error all the same.
	Quorum int
	// Log receives the warnings.
	Log *slog.Logger
}

// Target is one client to check, and what to call it in messages when the
// client does not know its server's address (a redigo pool).
type Target struct {
	Conn Conn
	Name string
}

// CheckEviction reads maxmemory-policy on every server behind the targets
// (every master of a Redis Cluster, every node of Redlock), all at once,
// and refuses them unless every one keeps lock keys safe; the error names
// each server that does not, with its policy. Every lock key carries a
// TTL, so the volatile-* policies evict them as readily as the allkeys-*
// ones: only noeviction, or no memory limit at all, is safe. A server
// where CONFIG is not permitted, as on many managed services, is logged
// once (for all such servers) and accepted.
func CheckEviction(ctx context.Context, targets []Target, o EvictionCheck) error {
	var risky, noConfig, unreachable []policyResult
	for _, r := range readPolicies(ctx, targets) {
		switch {
		case r.err != nil && IsServerError(r.err):
			noConfig = append(noConfig, r)
		case r.err != nil:
			unreachable = append(unreachable, r)
		case r.policy != "" && !o.Allow:
			risky = append(risky, r)
		}
	}
	if len(noConfig) > 0 {
		args := []any{"err", noConfig[0].err}
		if names := namesOf(noConfig); names != "" {
			args = append(args, "servers", names)
		}
		o.Log.Warn("locker/"+o.Backend+": cannot read maxmemory-policy; make sure it is noeviction, or lock keys may be evicted under memory pressure", args...)
	}
	var errs []error
	if len(risky) > 0 {
		var parts []string
		for _, r := range risky {
			p := fmt.Sprintf("%q", r.policy)
			if r.name != "" {
				p += " on " + r.name
			}
			parts = append(parts, p)
		}
		errs = append(errs, fmt.Errorf("%s: maxmemory-policy is %s: under memory pressure Redis may evict lock keys (they all carry a TTL), and a second client would acquire a held lock; set maxmemory-policy noeviction, or accept the risk with Options.AllowEviction (allow_eviction=true in the URL)",
			o.Backend, strings.Join(parts, ", ")))
	}
	down := map[int]bool{}
	for _, r := range unreachable {
		down[r.target] = true
	}
	if o.Quorum > 0 && len(targets)-len(down) < o.Quorum {
		errs = append(errs, noQuorum(o.Backend, len(targets)-len(down), len(targets), o.Quorum, unreachable))
		return errors.Join(errs...)
	}
	for _, r := range unreachable {
		if o.Quorum > 0 && !tlsMisconfigured(r.err) {
			o.Log.Warn("locker/"+o.Backend+": node unreachable at open; it counts as not voting until it answers",
				"node", r.name, "err", r.err, "answered", len(targets)-len(down), "nodes", len(targets), "majority", o.Quorum)
			continue
		}
		if r.name == "" {
			errs = append(errs, fmt.Errorf("%s: server unreachable: %w", o.Backend, r.err))
		} else {
			errs = append(errs, fmt.Errorf("%s: server %s unreachable: %w", o.Backend, r.name, r.err))
		}
	}
	return errors.Join(errs...)
}

// noQuorum is the error of an open where fewer than quorum of n targets
// answered: it names each that did not, with its error, and wraps them
// all, so that errors.Is finds a refused connection.
func noQuorum(backend string, answered, n, quorum int, unreachable []policyResult) error {
	parts := make([]string, len(unreachable))
	errs := make([]error, len(unreachable))
	for i, r := range unreachable {
		parts[i] = fmt.Sprintf("%s: %v", cmp.Or(r.name, fmt.Sprintf("node %d", r.target)), r.err)
		errs[i] = r.err
	}
	return &multiError{
		msg: fmt.Sprintf("%s: only %d of %d nodes answered, fewer than the majority of %d that every lock needs; unreachable: %s",
			backend, answered, n, quorum, strings.Join(parts, "; ")),
		errs: errs,
	}
}

// multiError is one message for several errors, each reachable with
// errors.Is and errors.As.
type multiError struct {
	msg  string
	errs []error
}

func (e *multiError) Error() string   { return e.msg }
func (e *multiError) Unwrap() []error { return e.errs }

// policyResult is what readPolicies found on one server.
type policyResult struct {
	target int // index in targets
	name   string
	policy string // one that can evict, or ""
	err    error
}

// readPolicies reads the eviction risk of every server behind targets,
// all at once, in the order of the targets, then of the addresses, so
// that messages are stable.
func readPolicies(ctx context.Context, targets []Target) []policyResult {
	var (
		mu      sync.Mutex
		results []policyResult
		wg      sync.WaitGroup
	)
	add := func(r policyResult) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	for i, tg := range targets {
		wg.Go(func() {
			servers, err := tg.Conn.Servers(ctx)
			if err != nil {
				add(policyResult{target: i, name: tg.Name, err: err})
				return
			}
			for _, s := range servers {
				name := cmp.Or(s.Addr(), tg.Name)
				wg.Go(func() {
					policy, err := evictionRisk(ctx, s)
					add(policyResult{target: i, name: name, policy: policy, err: err})
				})
			}
		})
	}
	wg.Wait()
	slices.SortFunc(results, func(a, b policyResult) int {
		return cmp.Or(cmp.Compare(a.target, b.target), strings.Compare(a.name, b.name))
	})
	return results
}

// namesOf joins the names of rs that have one.
func namesOf(rs []policyResult) string {
	var names []string
	for _, r := range rs {
		if r.name != "" {
			names = append(names, r.name)
		}
	}
	return strings.Join(names, ", ")
}

// evictionRisk reads a server's maxmemory-policy and returns it when it
// lets Redis evict lock keys under memory pressure, or "" when they are
// safe (noeviction, or no memory limit at all).
func evictionRisk(ctx context.Context, s Server) (string, error) {
	policy, err := s.ConfigGet(ctx, "maxmemory-policy")
	if err != nil || policy == "noeviction" {
		return "", err
	}
	if limit, err := s.ConfigGet(ctx, "maxmemory"); err == nil && limit == "0" {
		return "", nil // no memory limit: nothing is ever evicted
	}
	return policy, nil
}
