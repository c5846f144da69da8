package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/locker"
)

// The cases about elections (locker.NewElection): a leader is the
// exclusive holder of the election's name, its term the hold's fence, its
// value the hold's value. Each case needs only what it uses, and is
// skipped, naming it, where the backend lacks it: terms need
// Capabilities.Fencing, Leader and Observe an inspector (locker.Inspect),
// and telling leaders apart by their values Capabilities.MaxValueLen > 0.
// Campaigns elsewhere go without a value.

// electionTTL is the TTL of the leaders of every case but
// election-crashed-leader: long enough that no leadership ends by
// expiry while a case runs, and that an observer that missed a notice
// would not see the next change before the case gives up on it (see
// observeBound).
func (t *T) electionTTL() locker.Option { return locker.WithTTL(t.LongTTL()) }

// observeBound is how long a case waits for an observer to report a
// change: far more than a notice takes, and half of the least time after
// which an observer that missed a notice looks again by itself where the
// leader's TTL is known (it waits out the TTL left, at least two thirds
// of LongTTL with the watchdog refreshing), so that only a notice can
// deliver the change in time. A backend without an Observer is read
// once a second, well within it.
func (t *T) observeBound() time.Duration { return t.LongTTL() / 3 }

// election is one client's Election on a case's name.
type election struct {
	who string // in failure messages
	e   *locker.Election
}

// newElection returns who's Election on name through l, with leaders of
// electionTTL unless opts say otherwise.
func (t *T) newElection(who string, l locker.Locker, name string, opts ...locker.Option) *election {
	return &election{who: who, e: locker.NewElection(l, name, append([]locker.Option{t.electionTTL()}, opts...)...)}
}

// campaign makes who campaign with value, on a goroutine of its own; a
// leadership it wins is released when the case ends.
func (t *T) campaign(el *election, value []byte) *pending {
	return t.startCall(el.who, "Campaign", func(ctx context.Context) (locker.Lock, error) { return el.e.Campaign(ctx, value) })
}

// lead makes who campaign with value, on a name expected free or about
// to be, and returns the leadership, or fails the case and ends the
// calling goroutine.
func (t *T) lead(el *election, value []byte, why string) locker.Lock {
	return t.await(t.campaign(el, value), t.LongTTL()/2, why)
}

// resign makes who resign, which must succeed and end its leadership at
// once, or fails the case and ends the calling goroutine.
func (t *T) resign(el *election, lead locker.Lock) {
	if err := el.e.Resign(t.ctx); err != nil {
		t.Fatalf("%s's Resign: %v", el.who, err)
	}
	if !isClosed(lead.Lost()) {
		t.Errorf("%s's Lost() is still open after its Resign returned", el.who)
	}
	if el.e.Leading() != nil {
		t.Errorf("%s's Election reports leading after its Resign returned", el.who)
	}
}

// leader is what a case expects Leader or an observer to report: who's
// leadership lead, with value.
type leader struct {
	who   string
	value []byte
	lead  locker.Lock
}

func (w leader) String() string {
	s := w.who
	if w.value != nil {
		s += " with the value " + valueText(w.value)
	}
	if f, ok := w.lead.Fence(); ok {
		s += fmt.Sprintf(" in term %d", f)
	}
	return s
}

// leaderText formats what Leader or an observer reported.
func leaderText(ldr locker.Leader) string {
	s := "the value " + valueText(ldr.Value)
	if ldr.Termed {
		s += fmt.Sprintf(", term %d", ldr.Term)
	} else {
		s += ", no term"
	}
	if ldr.Token != "" {
		s += fmt.Sprintf(", token %q", ldr.Token)
	}
	return s
}

// is reports whether ldr shows w: its value, its token where the backend
// stores tokens, and its term where the backend fences. early is true
// when ldr shows w's value and token but no term yet: a backend that
// mints fences on demand (Redis) stores the term after the value, and
// the value again once the term exists, which an observer may see as two
// changes.
func (t *T) is(ldr locker.Leader, w leader) (is, early bool) {
	if !bytes.Equal(ldr.Value, w.value) || (ldr.Token != "" && ldr.Token != w.lead.Token()) {
		return false, false
	}
	if !t.Capabilities().Fencing {
		return true, false
	}
	if !ldr.Termed {
		return false, true
	}
	term, ok := w.lead.Fence()
	return ok && ldr.Term == term, false
}

// wantLeader checks that l's servers report w as the leader of el's name
// (Election.Leader); why says what happened just before.
func (t *T) wantLeader(el *election, w leader, why string) {
	ldr, err := el.e.Leader(t.ctx)
	if err != nil {
		t.Errorf("%s: Leader, asked by %s: %v; want %s", why, el.who, err, w)
		return
	}
	if is, _ := t.is(ldr, w); !is {
		t.Errorf("%s: Leader, asked by %s, reports %s; want %s", why, el.who, leaderText(ldr), w)
	}
}

func caseElectionOneLeader(t *T) {
	const campaigners, campaigns = 3, 2
	name := t.Key("name")
	var (
		leading atomic.Int32 // campaigners between their Campaign's return and their Resign
		mu      sync.Mutex
		last    *leader // the last to lead
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range campaigners {
		el := t.newElection(fmt.Sprintf("campaigner %d", i+1), t.Locker(), name)
		wg.Go(func() {
			<-start
			for n := range campaigns {
				value := t.value(fmt.Sprintf("%s, campaign %d", el.who, n+1))
				ctx, cancel := context.WithTimeout(t.ctx, t.LongTTL())
				lead, err := el.e.Campaign(ctx, value)
				cancel()
				if err != nil {
					t.Errorf("%s's campaign %d did not win within %v, while %d campaigners took turns: %v", el.who, n+1, t.LongTTL(), campaigners, err)
					return
				}
				w := &leader{who: el.who, value: value, lead: lead}
				if others := leading.Add(1) - 1; others > 0 {
					t.Errorf("%s won while %d other campaigner(s) led: two leaders at once", w, others)
				}
				mu.Lock()
				prev := last
				last = w
				mu.Unlock()
				if prev != nil && !isClosed(prev.lead.Lost()) {
					t.Errorf("%s won while %s still led (its Lost() open): two leaders at once", w, prev)
				}
				// Lead a while, so that a second leader, if the backend
				// let one in, would lead at the same time.
				if t.ClosedWithin(lead.Lost(), 20*time.Millisecond) {
					t.Errorf("%s lost its leadership without resigning (TTL %v): %v", w, t.LongTTL(), lead.Err())
				}
				leading.Add(-1)
				if err := el.e.Resign(t.ctx); err != nil {
					t.Errorf("%s's Resign: %v", el.who, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
}

func caseElectionTerms(t *T) {
	if !t.Capabilities().Fencing {
		t.Skipf("the backend mints no fencing tokens, so leaders have no terms (Capabilities().Fencing is false)")
	}
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	skipUnlessInspector(t, c)
	name := t.Key("name")
	ea, eb, ec := t.newElection("A", a, name), t.newElection("B", b, name), t.newElection("C", c, name)

	var terms []uint64
	led := func(w leader, why string) {
		term := t.holdFence(w.lead, fmt.Sprintf("%s's leadership", w.who))
		if n := len(terms); n > 0 && term <= terms[n-1] {
			t.Errorf("%s got the term %d after the terms %v of the leaders before it: terms must strictly increase", w.who, term, terms)
		}
		terms = append(terms, term)
		t.wantLeader(ec, w, why)
	}

	// A leads on a free name, proclaims, and hands over to B, waiting.
	wa := leader{"A", t.value("A"), t.lead(ea, t.value("A"), "A campaigned on a free name")}
	led(wa, "A leads")
	if t.Capabilities().MaxValueLen > 0 {
		wa.value = []byte("A, proclaimed")
		if err := ea.e.Proclaim(t.ctx, wa.value); err != nil {
			t.Fatalf("A's Proclaim: %v", err)
		}
		t.wantLeader(ec, wa, "A proclaimed a new value: the term stays")
	}
	pb := t.campaign(eb, t.value("B"))
	q := &queueing{t: t, l: c, key: name, blindWait: 50 * time.Millisecond}
	q.until(1, pb)
	t.resign(ea, wa.lead)
	led(leader{"B", t.value("B"), t.await(pb, t.LongTTL()/2, "A resigned with B waiting")}, "B leads after A resigned")
	t.resign(eb, pb.lk)
	// C leads on the free name, then A again, through the Election it
	// resigned.
	wc := leader{"C", t.value("C"), t.lead(ec, t.value("C"), "B resigned, and nobody else campaigned")}
	led(wc, "C leads")
	t.resign(ec, wc.lead)
	wa = leader{"A", t.value("A again"), t.lead(ea, t.value("A again"), "C resigned, and nobody else campaigned")}
	led(wa, "A leads again")
	t.resign(ea, wa.lead)
}

func caseElectionResign(t *T) {
	a, b, c := t.Locker(), t.Locker(), t.Locker()
	name := t.Key("name")
	ea, eb := t.newElection("A", a, name), t.newElection("B", b, name)
	la := t.lead(ea, t.value("A"), "A campaigned on a free name")
	pb := t.campaign(eb, t.value("B"))
	q := &queueing{t: t, l: c, key: name, blindWait: 50 * time.Millisecond}
	_, err := locker.Inspect(t.ctx, c, name)
	inspectable := err == nil
	q.blind = !inspectable // give B the blind wait
	q.until(1, pb)
	if pb.returned() {
		t.Fatalf("B's Campaign %s while A led%s", pb.outcome(), q.note())
	}
	resigned := time.Now()
	t.resign(ea, la)
	// Hand-over at once: B is woken by the resignation, not by A's
	// leadership running out (its TTL is LongTTL).
	lb := t.await(pb, t.LongTTL()/2, "A resigned with B waiting")
	if lb.Err() != nil {
		t.Errorf("B's leadership was lost as soon as it began: %v", lb.Err())
	}
	t.WantErr(ea.e.Proclaim(t.ctx, t.value("A, resigned")), locker.ErrNotHeld, "Proclaim by A, which resigned")
	if err := ea.e.Resign(t.ctx); err != nil {
		t.Errorf("a second Resign by A, which no longer leads: %v; want nil", err)
	}
	if inspectable {
		t.wantLeader(&election{who: "C", e: locker.NewElection(c, name)}, leader{"B", t.value("B"), lb},
			fmt.Sprintf("A resigned %v ago with B waiting", time.Since(resigned).Round(time.Millisecond)))
	}
	t.resign(eb, lb)
}

// watch is an observer of an election (Election.Observe) through a client
// of its own.
type watch struct {
	t  *T
	ch <-chan locker.Leader
	// seen is what the observer reported, in order, for messages.
	seen []string
}

// observe starts an observer of name through l; it stops when the case
// ends.
func (t *T) observe(l locker.Locker, name string) *watch {
	ctx, cancel := context.WithCancel(t.ctx)
	ch := locker.NewElection(l, name).Observe(ctx)
	t.Cleanup(func() {
		cancel()
		for range ch { // closed once Observe's goroutine has ended
		}
	})
	return &watch{t: t, ch: ch}
}

// next returns the observer's next report, waiting up to d; ok is false if
// none came.
func (o *watch) next(d time.Duration) (ldr locker.Leader, ok bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ldr, ok = <-o.ch:
		if ok {
			o.seen = append(o.seen, leaderText(ldr))
		}
		return ldr, ok
	case <-timer.C:
	case <-o.t.ctx.Done():
	}
	return locker.Leader{}, false
}

// await waits for the observer to report w, within observeBound of now;
// after says what changed. Reports of w without its term yet (see is)
// come first on some backends; any other report fails the case.
func (o *watch) await(w leader, after string) {
	t := o.t
	deadline := time.Now().Add(t.observeBound())
	for {
		ldr, ok := o.next(time.Until(deadline))
		if !ok {
			t.Fatalf("%s: the observer did not report %s within %v (it reported, in order: %s)",
				after, w, t.observeBound(), strings.Join(o.seen, "; "))
		}
		is, early := t.is(ldr, w)
		if is {
			return
		}
		if !early {
			t.Fatalf("%s: the observer reported %s; want %s (it reported, in order: %s)", after, leaderText(ldr), w, strings.Join(o.seen, "; "))
		}
	}
}

func caseElectionObserve(t *T) {
	skipUnlessValues(t)
	a, b, o := t.Locker(), t.Locker(), t.Locker()
	skipUnlessInspector(t, o)
	observeEach(t, a, b, o)
	observeRun(t, a, b, o)
}

// observeEach makes each change of leader or value once the observer has
// reported the one before: it must report each, in order.
func observeEach(t *T, a, b, o locker.Locker) {
	name := t.Key("each")
	ea, eb := t.newElection("A", a, name), t.newElection("B", b, name)
	obs := t.observe(o, name)
	wa := leader{"A", []byte("A"), t.lead(ea, []byte("A"), "A campaigned on a free name")}
	obs.await(wa, "A leads")
	wa.value = []byte("A, proclaimed")
	if err := ea.e.Proclaim(t.ctx, wa.value); err != nil {
		t.Fatalf("A's Proclaim: %v", err)
	}
	obs.await(wa, "A proclaimed")
	pb := t.campaign(eb, []byte("B"))
	t.resign(ea, wa.lead)
	wb := leader{"B", []byte("B"), t.await(pb, t.LongTTL()/2, "A resigned with B campaigning")}
	obs.await(wb, "A resigned, and B leads")
	wb.value = []byte("B, proclaimed")
	if err := eb.e.Proclaim(t.ctx, wb.value); err != nil {
		t.Fatalf("B's Proclaim: %v", err)
	}
	obs.await(wb, "B proclaimed")
	t.resign(eb, wb.lead)
	wa = leader{"A", []byte("A again"), t.lead(ea, []byte("A again"), "B resigned, and nobody else campaigned")}
	obs.await(wa, "B resigned, and A leads again")
	t.resign(ea, wa.lead)
}

// observeRun makes a run of changes without waiting for the observer: it
// may miss some, but reports the ones it sees in order, terms never going
// back, and ends with the last.
func observeRun(t *T, a, b, o locker.Locker) {
	name := t.Key("run")
	els := []*election{t.newElection("A", a, name), t.newElection("B", b, name)}
	obs := t.observe(o, name)
	var changes []leader // in order; every value differs
	reports := make(chan []locker.Leader, 1)
	final := make(chan leader, 1)
	// Read the observer while the changes are made, as an application
	// does, until it reports the last change, or observeBound after the
	// last change was made.
	go func() {
		var got []locker.Leader
		defer func() { reports <- got }()
		timer := time.NewTimer(t.LongTTL())
		defer timer.Stop()
		var last *leader
		isLast := func(ldr locker.Leader) bool {
			is, _ := t.is(ldr, *last)
			return is
		}
		for fin := final; ; {
			select {
			case w := <-fin:
				last, fin = &w, nil
				if len(got) > 0 && isLast(got[len(got)-1]) {
					return
				}
				timer.Reset(t.observeBound())
			case ldr, ok := <-obs.ch:
				if !ok {
					return
				}
				got = append(got, ldr)
				if last != nil && isLast(ldr) {
					return
				}
			case <-timer.C:
				return
			}
		}
	}()
	const leaderships, proclaims = 3, 2
	for i := range leaderships {
		el := els[i%2]
		value := fmt.Appendf(nil, "%s, leadership %d", el.who, i+1)
		lead := t.lead(el, value, "the leader before resigned")
		changes = append(changes, leader{el.who, value, lead})
		for j := range proclaims {
			value := fmt.Appendf(nil, "%s, leadership %d, proclaim %d", el.who, i+1, j+1)
			if err := el.e.Proclaim(t.ctx, value); err != nil {
				t.Fatalf("%s's Proclaim: %v", el.who, err)
			}
			changes = append(changes, leader{el.who, value, lead})
		}
		if i < leaderships-1 {
			t.resign(el, lead)
		}
	}
	last := changes[len(changes)-1]
	final <- last
	got := <-reports
	t.resign(els[(leaderships-1)%2], last.lead)
	t.checkRun(changes, got)
}

// checkRun checks what an observer reported of a run of changes: each
// report is one of the changes, later than the one reported before, and
// the last report is the last change.
func (t *T) checkRun(changes []leader, got []locker.Leader) {
	var texts []string
	for _, ldr := range got {
		texts = append(texts, leaderText(ldr))
	}
	seen := strings.Join(texts, "; ")
	prev, prevEarly := -1, false
	var prevTerm uint64
	for _, ldr := range got {
		i, early := t.changeOf(changes, ldr)
		switch {
		case i < 0:
			t.Fatalf("the observer of a run of %d changes reported %s, none of them (it reported, in order: %s)", len(changes), leaderText(ldr), seen)
		case i < prev || (i == prev && !(prevEarly && !early)):
			t.Fatalf("the observer of a run of changes reported %s after %s: out of order (it reported, in order: %s)", changes[i], changes[prev], seen)
		case ldr.Termed && ldr.Term < prevTerm:
			t.Fatalf("the observer of a run of changes reported the term %d after the term %d: terms went back (it reported, in order: %s)", ldr.Term, prevTerm, seen)
		}
		prev, prevEarly = i, early
		if ldr.Termed {
			prevTerm = ldr.Term
		}
	}
	if prev != len(changes)-1 || prevEarly {
		t.Fatalf("the observer of a run of %d changes did not report the last, %s, within %v of it (it reported, in order: %s)",
			len(changes), changes[len(changes)-1], t.observeBound(), seen)
	}
}

// changeOf returns the index of the change ldr shows, and whether it
// shows it before its term, or -1.
func (t *T) changeOf(changes []leader, ldr locker.Leader) (int, bool) {
	for i, w := range changes {
		if is, early := t.is(ldr, w); is || early {
			return i, early
		}
	}
	return -1, false
}

func caseElectionCrashedLeader(t *T) {
	skipUnlessValues(t)
	a := t.CrashableClient()
	b, o := t.Locker(), t.Locker()
	skipUnlessInspector(t, o)
	name := t.Key("name")
	ea := t.newElection("A", a.Locker, name, locker.WithTTL(t.TTL()))
	eb := t.newElection("B", b, name)
	obs := t.observe(o, name)
	// Not t.lead, whose cleanup would release A's leadership through a
	// client that is cut off, and wait for it to give up: A's Locker
	// lets go of it when it closes.
	la, err := ea.e.Campaign(t.ctx, []byte("A"))
	if err != nil {
		t.Fatalf("A's Campaign on a free name: %v", err)
	}
	obs.await(leader{"A", []byte("A"), la}, "A leads")
	pb := t.campaign(eb, []byte("B"))
	a.Crash()
	crashed := time.Now()
	bound := t.ExpiryBound(t.TTL())
	lb := t.await(pb, bound, fmt.Sprintf("A, leading with a TTL of %v, crashed", t.TTL()))
	if !t.ClosedWithin(la.Lost(), time.Until(crashed.Add(bound))) {
		t.Errorf("the crashed leader's Lost() stayed open %v after the crash (TTL %v)", time.Since(crashed), t.TTL())
	}
	obs.await(leader{"B", []byte("B"), lb}, fmt.Sprintf("A crashed, and B leads since %v after the crash", pb.at.Sub(crashed).Round(time.Millisecond)))
	if fa, ok := la.Fence(); ok {
		if fb, _ := lb.Fence(); fb <= fa {
			t.Errorf("B, leading after A crashed, got the term %d, not above A's %d", fb, fa)
		}
	}
	t.resign(eb, lb)
}

// campaignOwner is the owner the owner cases campaign under, as a request
// handler's context may carry one (locker.WithOwner).
const campaignOwner = "request-42"

// campaignUnder makes who campaign with value under campaignOwner, on a
// goroutine of its own, as campaign does.
func (t *T) campaignUnder(el *election, value []byte) *pending {
	return t.startCall(el.who, "Campaign", func(ctx context.Context) (locker.Lock, error) {
		return el.e.Campaign(locker.WithOwner(ctx, campaignOwner), value)
	})
}

// wantNoLeadUnder checks that who's Campaign under own, while another
// Election of its Locker and owner leads, returns no leadership before
// its context ends a while later.
func (t *T) wantNoLeadUnder(own context.Context, el *election, value []byte, leading leader) {
	ctx, cancel := context.WithTimeout(own, reentryBound)
	defer cancel()
	lk, err := el.e.Campaign(ctx, value)
	if err == nil {
		defer lk.Release(t.ctx)
		f, _ := lk.Fence()
		t.Fatalf("%s's Campaign under the owner %q returned a leadership (token %q, term %d) while %s led under the same owner through the same Locker: two leaders; want it to wait until its context ends",
			el.who, campaignOwner, lk.Token(), f, leading)
	}
	t.WantErr(err, context.DeadlineExceeded, fmt.Sprintf("%s's Campaign under the owner of %s's leadership, with a context ending after %v", el.who, leading.who, reentryBound))
	if el.e.Leading() != nil {
		t.Errorf("%s's Election reports leading after its Campaign failed", el.who)
	}
}

// ownerLed is how the owner cases begin: E1 leads under campaignOwner
// through l, and E2, an Election of l, campaigned under the same owner
// in vain; c is another client.
type ownerLed struct {
	c      locker.Locker
	name   string
	e1, e2 *election
	w1     leader
}

// ownerLed makes the owner cases' start, or fails the case and ends the
// calling goroutine.
func (t *T) ownerLed() ownerLed {
	l, c := t.Locker(), t.Locker()
	name := t.Key("name")
	own := locker.WithOwner(t.ctx, campaignOwner)
	e1, e2 := t.newElection("E1", l, name), t.newElection("E2", l, name)
	l1, err := e1.e.Campaign(own, t.value("E1"))
	if err != nil {
		t.Fatalf("E1's Campaign under the owner %q on a free name: %v", campaignOwner, err)
	}
	t.Cleanup(func() { l1.Release(context.WithoutCancel(t.ctx)) })
	w1 := leader{"E1", t.value("E1"), l1}
	t.wantNoLeadUnder(own, e2, t.value("E2"), w1)
	return ownerLed{c: c, name: name, e1: e1, e2: e2, w1: w1}
}

func caseElectionOwnerWaits(t *T) {
	o := t.ownerLed()
	p2 := t.campaignUnder(o.e2, t.value("E2"))
	q := &queueing{t: t, l: o.c, key: o.name, blindWait: 50 * time.Millisecond}
	q.until(1, p2)
	if p2.returned() {
		t.Fatalf("E2's Campaign under the owner of E1's leadership %s while E1 led%s", p2.outcome(), q.note())
	}
	t.resign(o.e1, o.w1.lead)
	w2 := leader{"E2", t.value("E2"), t.await(p2, t.LongTTL()/2, "E1 resigned with E2 of its Locker and owner waiting")}
	if f1, ok := o.w1.lead.Fence(); ok {
		if f2, _ := w2.lead.Fence(); f2 <= f1 {
			t.Errorf("E2, leading after E1 resigned, got the term %d, not above E1's %d", f2, f1)
		}
	}
	if _, err := locker.Inspect(t.ctx, o.c, o.name); err == nil {
		t.wantLeader(&election{who: "C", e: locker.NewElection(o.c, o.name)}, w2, "E1 resigned, and E2 of its Locker and owner leads")
	}
	t.resign(o.e2, w2.lead)
}

func caseElectionOwnerResign(t *T) {
	o := t.ownerLed()
	_, err := locker.Inspect(t.ctx, o.c, o.name)
	inspectable := err == nil
	ec := &election{who: "C", e: locker.NewElection(o.c, o.name)}
	if inspectable {
		t.wantLeader(ec, o.w1, "E2 of E1's Locker and owner campaigned with another value and did not win")
	}
	t.resign(o.e1, o.w1.lead)
	// Nobody campaigns now: the name is free, at once.
	if inspectable {
		ldr, err := ec.e.Leader(t.ctx)
		if !errors.Is(err, locker.ErrNoLeader) {
			t.Errorf("E1 resigned under its owner, and nobody else leads: Leader reports %s, %v; want ErrNoLeader", leaderText(ldr), err)
		}
	}
	lk, err := o.c.TryAcquire(t.ctx, o.name, t.electionTTL())
	if err != nil {
		t.Fatalf("E1 resigned under its owner, and nobody else leads: another client's TryAcquire of the name: %v; want it free%s", err, t.holderText(o.c, o.name))
	}
	t.Release(lk)
}

// term is one leadership that Election.Run gave a client's lead: when
// lead was called, with what, and why its ctx ended.
type term struct {
	who   string
	at    time.Time
	lead  locker.Lock
	ended chan struct{} // closed once lead's ctx ended
	cause error         // context.Cause of lead's ctx, set before ended closes
}

// loop is a client's Election.Run on a goroutine of its own.
type loop struct {
	who  string
	done chan struct{} // closed once Run returned
	err  error         // Run's error, set before done closes
}

// runLoop runs who's Election.Run with value under ctx, sending each
// leadership to terms as lead is called; lead returns once its ctx ends,
// with its cause. The case's cleanup waits for Run to return: stop ctx
// first.
func (t *T) runLoop(ctx context.Context, el *election, value []byte, terms chan<- *term, opts ...locker.RunOption) *loop {
	lp := &loop{who: el.who, done: make(chan struct{})}
	go func() {
		defer close(lp.done)
		lp.err = el.e.Run(ctx, value, func(ctx context.Context, lead locker.Lock) error {
			tm := &term{who: el.who, at: time.Now(), lead: lead, ended: make(chan struct{})}
			select {
			case terms <- tm:
			case <-t.ctx.Done():
			}
			<-ctx.Done()
			tm.cause = context.Cause(ctx)
			close(tm.ended)
			return tm.cause
		}, opts...)
	}()
	return lp
}

// nextTerm waits up to d for the next leadership Run gives, and checks
// that every earlier one's validity had ended by then: one leader at a
// time.
func (t *T) nextTerm(terms <-chan *term, d time.Duration, earlier []*term, why string, loops ...*loop) *term {
	var tm *term
	select {
	case tm = <-terms:
	case <-time.After(d):
		var ended []string
		for _, lp := range loops {
			if isClosed(lp.done) {
				ended = append(ended, fmt.Sprintf("%s's Run returned: %v", lp.who, lp.err))
			}
		}
		t.Fatalf("%s: no client's Run led within %v%s", why, d, strings.Join(append([]string{""}, ended...), "; "))
	case <-t.ctx.Done():
		t.Fatalf("%s: the case's context ended", why)
	}
	for _, e := range earlier {
		if until := e.lead.Until(); until.After(tm.at) {
			t.Errorf("%s: %s's Run led while %s's leadership was valid for %v more: two leaders at once", why, tm.who, e.who, until.Sub(tm.at))
		}
	}
	return tm
}

func caseElectionRun(t *T) {
	a := t.CrashableClient()
	b, c := t.Locker(), t.Locker()
	name := t.Key("name")
	ea := t.newElection("A", a.Locker, name, locker.WithTTL(t.TTL()))
	eb := t.newElection("B", b, name)
	terms := make(chan *term, 4)
	actx, stopA := context.WithCancel(t.ctx)
	runA := t.runLoop(actx, ea, t.value("A"), terms)
	t.Cleanup(func() {
		stopA()
		<-runA.done
	})
	ta := t.nextTerm(terms, t.LongTTL()/2, nil, "A ran the leader loop on a free name", runA)

	// B follows who leads, where the backend can tell.
	var (
		mu   sync.Mutex
		seen []locker.Leader
	)
	var opts []locker.RunOption
	_, err := locker.Inspect(t.ctx, c, name)
	observing := err == nil && t.Capabilities().MaxValueLen > 0
	if observing {
		opts = append(opts, locker.OnNewLeader(func(ldr locker.Leader) {
			mu.Lock()
			seen = append(seen, ldr)
			mu.Unlock()
		}))
	}
	bctx, stopB := context.WithCancel(t.ctx)
	runB := t.runLoop(bctx, eb, t.value("B"), terms, opts...)
	t.Cleanup(func() {
		stopB()
		<-runB.done
	})
	q := &queueing{t: t, l: c, key: name, blindWait: 50 * time.Millisecond}
	q.until(1)
	select {
	case tb := <-terms:
		t.Fatalf("%s's Run led while A's leadership lasted (its ctx %v)%s", tb.who, ta.cause, q.note())
	default:
	}

	a.Crash()
	crashed := time.Now()
	bound := t.ExpiryBound(t.TTL())
	tb := t.nextTerm(terms, bound, []*term{ta}, fmt.Sprintf("A, leading with a TTL of %v, was cut off", t.TTL()), runA, runB)
	if tb.who != "B" {
		t.Fatalf("A's Run led again after A was cut off (%v after the cut)", tb.at.Sub(crashed))
	}
	if !t.ClosedWithin(ta.ended, time.Until(crashed.Add(bound))) {
		t.Fatalf("A was cut off while it led: its lead's ctx was not cancelled within %v (TTL %v)", bound, t.TTL())
	}
	if !errors.Is(ta.cause, locker.ErrNotHeld) {
		t.Errorf("A was cut off while it led: its lead's ctx ended with %v; want a cause wrapping ErrNotHeld", ta.cause)
	}
	if observing {
		t.wantReported(&mu, &seen, leader{"B", t.value("B"), tb.lead}, "B leads, and its OnNewLeader")
	}

	// B's ctx ends: its lead returns, Run resigns and returns.
	stopB()
	if !t.ClosedWithin(tb.ended, closeBound) {
		t.Fatalf("B's ctx was cancelled while it led: its lead's ctx did not end within %v", closeBound)
	}
	if !t.ClosedWithin(runB.done, closeBound) {
		t.Fatalf("B's ctx was cancelled while it led: its Run did not return within %v", closeBound)
	}
	t.WantErr(runB.err, context.Canceled, "B's Run, its ctx cancelled while it led")
	if !isClosed(tb.lead.Lost()) {
		t.Errorf("B's Run returned with its leadership's Lost() open: it did not resign")
	}
	lk, err := c.TryAcquire(t.ctx, name, t.electionTTL())
	if err != nil {
		t.Fatalf("B's Run returned after its ctx was cancelled: another client's TryAcquire of the name: %v; want it resigned%s", err, t.holderText(c, name))
	}
	t.Release(lk)
}

// wantReported waits, within observeBound, for OnNewLeader to have
// reported w among the leaders it appended to seen.
func (t *T) wantReported(mu *sync.Mutex, seen *[]locker.Leader, w leader, who string) {
	deadline := time.Now().Add(t.observeBound())
	for {
		mu.Lock()
		var texts []string
		found := false
		for _, ldr := range *seen {
			texts = append(texts, leaderText(ldr))
			if is, _ := t.is(ldr, w); is {
				found = true
			}
		}
		mu.Unlock()
		if found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not report %s within %v (it reported, in order: %s)", who, w, t.observeBound(), strings.Join(texts, "; "))
		}
		t.ClosedWithin(nil, 10*time.Millisecond)
	}
}
