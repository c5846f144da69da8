package conformance

import (
	"errors"
	"time"

	"github.com/distlock/locker"
)

// takeoverPoll is how often caseNoEarlyTakeover's contender tries the key.
const takeoverPoll = 5 * time.Millisecond

// caseNoEarlyTakeover: a holder that does not refresh keeps its key for
// as long as its lock says it is valid (Until), which is its TTL less the
// backend's drift allowance, from no later than the sending of its
// request. A contender tries the key over and over until it gets it; it
// must not get it before then. The check is from the client side and
// errs towards passing: the contender's grant happened on the server no
// later than its reply came back, which is compared with Until. The rule
// holds wherever the expiry is kept: on the server's clock, or by a lease
// or session (a Bounded lock's Until is capped by it, and an Expirer's
// lock is removed by its own client at Until), so it asks for no
// capability.
func caseNoEarlyTakeover(t *T) {
	a, b := t.Locker(), t.Locker()
	key := t.Key("k")
	ttl := t.TTL()
	lk := t.Acquire(a, key, locker.WithTTL(ttl), locker.WithAutoRefresh(false))
	until := lk.Until()
	bound := time.Now().Add(t.ExpiryBound(ttl))
	for tries := 1; ; tries++ {
		got, err := b.TryAcquire(t.Context(), key, locker.WithTTL(t.LongTTL()))
		answered := time.Now()
		if err == nil {
			if answered.Before(until) {
				t.Errorf("the key was taken %v before its holder's lock ran out (a %v TTL without refresh; attempt %d)",
					until.Sub(answered), ttl, tries)
			}
			t.Release(got)
			return
		}
		if !errors.Is(err, locker.ErrNotAcquired) {
			t.Fatalf("TryAcquire of a held key, attempt %d: %v", tries, err)
		}
		if answered.After(bound) {
			t.Fatalf("the key was not free %v after its holder's %v TTL began without refresh", t.ExpiryBound(ttl), ttl)
		}
		time.Sleep(takeoverPoll)
	}
}
