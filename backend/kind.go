package backend

import (
	"errors"
	"fmt"
	"math"
)

// Kind is what a hold takes of its key. Every key is used with one family
// of kinds at a time: Exclusive and Shared holds together (a read/write
// lock, of which a mutex is the case with only Exclusive holds), or Permit
// holds of one Limit (a semaphore).
type Kind uint8

const (
	// Exclusive takes the whole key: the mutex, a write lock. The zero
	// value, so that a driver that knows nothing of kinds sees only it.
	Exclusive Kind = iota
	// Shared takes the key together with other Shared holds and never
	// with an Exclusive one: a read lock.
	Shared
	// Permit takes Request.Weight of the key's Request.Limit permits: a
	// semaphore.
	Permit
)

func (k Kind) String() string {
	switch k {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Permit:
		return "permit"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ErrKindMismatch means a request's kind or limit disagrees with those of
// the key's holders or waiters: a semaphore of another limit, a shared or
// exclusive hold on a semaphore's key, a permit on a read/write lock's.
// Every client of a key must agree on its family and limit; a request that
// does not is refused rather than admitted on another rule.
var ErrKindMismatch = errors.New("lock kind or limit disagrees with the key's holders or waiters")

// Mismatch is the error a driver returns when a request disagrees with the
// key's holders or waiters; errors.Is(m, ErrKindMismatch) is true.
type Mismatch struct {
	// Key's holders or waiters: the kind and limit one of them declared.
	HeldKind  Kind
	HeldLimit int
	// The refused request's.
	Kind  Kind
	Limit int
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("%v: the key is %s, the request is for %s", ErrKindMismatch,
		family(m.HeldKind, m.HeldLimit), family(m.Kind, m.Limit))
}

// Is makes errors.Is(m, ErrKindMismatch) true.
func (m *Mismatch) Is(target error) bool { return target == ErrKindMismatch }

// family names what a hold of kind k with limit n says its key is.
func family(k Kind, n int) string {
	if k == Permit {
		if n == 1 {
			return "a semaphore of 1 permit"
		}
		return fmt.Sprintf("a semaphore of %d permits", n)
	}
	return "a read/write lock (exclusive and shared holds)"
}

// SharedCapacity is the number of units of a read/write lock's key: a
// Shared hold takes one, an Exclusive hold all of them, so at most
// SharedCapacity - 1 shared holds share a key.
const SharedCapacity = math.MaxInt32

// Claim is a request as the admission rule sees it: its kind and, for a
// Permit, the key's limit and the hold's weight.
type Claim struct {
	Kind   Kind
	Limit  int
	Weight int
}

// ClaimOf returns req's claim.
func ClaimOf(req Request) Claim {
	return Claim{Kind: req.Kind, Limit: req.Limit, Weight: req.Weight}
}

// Units returns the units of its key that c takes and the key's capacity:
// an Exclusive hold takes all SharedCapacity units, a Shared hold one, a
// Permit its Weight (at least 1) of Limit.
func (c Claim) Units() (units, capacity int64) {
	switch c.Kind {
	case Shared:
		return 1, SharedCapacity
	case Permit:
		return max(int64(c.Weight), 1), int64(c.Limit)
	}
	return SharedCapacity, SharedCapacity
}

// Agrees reports whether c and o may share a key: both Exclusive or
// Shared, or both Permit with the same Limit.
func (c Claim) Agrees(o Claim) bool {
	if (c.Kind == Permit) != (o.Kind == Permit) {
		return false
	}
	return c.Kind != Permit || c.Limit == o.Limit
}

// Conflicts reports whether c and o cannot be held together whatever else
// holds the key: their units together exceed the capacity.
func (c Claim) Conflicts(o Claim) bool {
	cu, capacity := c.Units()
	ou, _ := o.Units()
	return cu+ou > capacity
}

// Admission is the verdict of Admit on one claim of a queue.
type Admission struct {
	// Admitted: the claim holds the key.
	Admitted bool
	// Wait, when the claim is not admitted, is the index of the earlier
	// claim whose departure the waiter waits for: the nearest one that
	// conflicts with it, which must go before it can be admitted. -1
	// means no single claim does (a semaphore's permits are taken by
	// several): the departure of any earlier claim may admit it.
	Wait int
}

// Admit is the admission rule of every backend that keeps a queue per key
// (memory, ZooKeeper, etcd): the claim at index i of queue, the claims in
// the order the server queued them, is admitted when the units of the
// claims before it and its own together fit the key's capacity (see
// Claim.Units). Claims are thus admitted strictly in queue order: one that
// does not fit blocks every claim behind it, so that a writer or a large
// request is not starved by a stream of small ones. A mutex is the queue
// of Exclusive claims, each admitted when it is first.
//
// A claim before i that disagrees with the claim at i (Claim.Agrees) makes
// Admit return a *Mismatch: the request at i is to be refused. Claims
// after i are not looked at; they judge themselves.
func Admit(queue []Claim, i int) (Admission, error) {
	c := queue[i]
	units, capacity := c.Units()
	var before int64
	wait := -1
	for j := range i {
		o := queue[j]
		if !c.Agrees(o) {
			return Admission{}, &Mismatch{HeldKind: o.Kind, HeldLimit: o.Limit, Kind: c.Kind, Limit: c.Limit}
		}
		u, _ := o.Units()
		before += u
		if c.Conflicts(o) {
			wait = j
		}
	}
	if before+units <= capacity {
		return Admission{Admitted: true}, nil
	}
	return Admission{Wait: wait}, nil
}
