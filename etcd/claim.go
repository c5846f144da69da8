package etcd

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/distlock/locker/backend"
)

// A queue entry's name carries its claim, so that the keys of a queue,
// read without their values, are all backend.Admit needs:
//
//	<lease id in hex>[-N]                   exclusive (the name every entry had before kinds)
//	<lease id in hex>[-N].shared            shared
//	<lease id in hex>[-N].permit-<w>-of-<n> w of a semaphore's n permits
//
// The claim is in the name rather than the value so that nothing that
// puts the entry again (a Refresh that moves it to another lease, a
// SetValue) has to carry it, and so that the reads of a waiting
// acquisition stay keys-only. The value is the hold's own (Request.Value,
// see value.go).

// Suffixes of entry names.
const (
	sharedSuffix = ".shared"
	permitPrefix = ".permit-"
	permitOf     = "-of-"
)

// claimSuffix is what an entry's name for req bears after its reserved
// base: nothing for an exclusive hold, whose name is as it always was.
func claimSuffix(req backend.Request) string {
	switch req.Kind {
	case backend.Shared:
		return sharedSuffix
	case backend.Permit:
		return permitPrefix + strconv.Itoa(max(req.Weight, 1)) + permitOf + strconv.Itoa(req.Limit)
	}
	return ""
}

// checkClaim refuses a request whose claim cannot be written in an entry's
// name: package locker sends none, but a driver may be called directly.
func checkClaim(req backend.Request) error {
	switch req.Kind {
	case backend.Exclusive, backend.Shared:
		return nil
	case backend.Permit:
		if req.Limit < 1 || req.Limit > backend.SharedCapacity || req.Weight > req.Limit {
			return fmt.Errorf("etcd: a permit of weight %d of %d permits: the limit must be 1 to %d, the weight 1 to the limit",
				req.Weight, req.Limit, backend.SharedCapacity)
		}
		return nil
	}
	return fmt.Errorf("etcd: unknown kind of hold %v", req.Kind)
}

// claimOf returns the claim the name of entry key, in the queue whose
// prefix is qp, carries. A name that carries none this package writes (an
// entry of an older version, or of another program) is exclusive: it
// blocks every request behind it, as any entry did before kinds, and a
// semaphore request behind it is refused.
func claimOf(qp string, key []byte) backend.Claim {
	name := key[min(len(qp), len(key)):]
	dot := bytes.IndexByte(name, '.')
	if dot < 0 {
		return backend.Claim{}
	}
	switch s := string(name[dot:]); {
	case s == sharedSuffix:
		return backend.Claim{Kind: backend.Shared}
	case strings.HasPrefix(s, permitPrefix):
		ws, ns, ok := strings.Cut(s[len(permitPrefix):], permitOf)
		w, werr := strconv.Atoi(ws)
		n, nerr := strconv.Atoi(ns)
		c := backend.Claim{Kind: backend.Permit, Limit: n, Weight: w}
		// Only the canonical form: "+2" or "02" is not ours.
		if ok && werr == nil && nerr == nil && w >= 1 && w <= n && n <= backend.SharedCapacity &&
			claimSuffix(backend.Request{Kind: c.Kind, Limit: n, Weight: w}) == s {
			return c
		}
	}
	return backend.Claim{}
}

// claims returns the claims of the entries kvs, in the queue whose prefix
// is qp, followed by own: the queue as backend.Admit takes it, with own
// last.
func claims(qp string, kvs []*mvccpb.KeyValue, own backend.Claim) []backend.Claim {
	cs := make([]backend.Claim, len(kvs)+1)
	for i, kv := range kvs {
		cs[i] = claimOf(qp, kv.Key)
	}
	cs[len(kvs)] = own
	return cs
}

// admitted returns the holders of a queue, kvs in create-revision order:
// the entries backend.Admit admits, which are always the first ones (an
// entry that does not fit, or disagrees, keeps every later one out).
func admitted(qp string, kvs []*mvccpb.KeyValue) (holders int, cs []backend.Claim) {
	cs = make([]backend.Claim, len(kvs))
	for i, kv := range kvs {
		cs[i] = claimOf(qp, kv.Key)
	}
	for holders < len(cs) {
		a, err := backend.Admit(cs, holders)
		if err != nil || !a.Admitted {
			break
		}
		holders++
	}
	return holders, cs
}
