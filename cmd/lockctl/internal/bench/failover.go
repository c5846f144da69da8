package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// CampaignerCommand returns the command of a campaigner process of the
// failover scenario: it campaigns for name on the deployment at url as
// design (a Design name of electionDesigns) with ttl, speaking the line
// protocol of campaign.go. lockctl's is "lockctl bench-campaigner".
type CampaignerCommand func(design, url, name string, ttl time.Duration) *exec.Cmd

// Failover scenario parameters.
const (
	// failoverCampaigners is how many campaigners contend in every
	// round: the leader and two standbys.
	failoverCampaigners = 3
	// failoverSettle is how long the standbys are given, once they say
	// they campaign, to settle into their wait before the leader dies.
	failoverSettle = 200 * time.Millisecond
	// failoverStart bounds a campaigner's start: the process, its
	// connection, and the first leader's election.
	failoverStart = 60 * time.Second
)

// Failover: for each deployment, and each election design on it (the
// Locker's Election; etcd's concurrency.Election on etcd; an election
// built on go-zookeeper's zk.Lock on ZooKeeper), rounds of: three
// campaigner processes (Runner.Campaigner) campaign for one name; once
// the standbys wait, the leader is killed with SIGKILL, and the time
// until another campaigner says it leads is measured; a new campaigner
// replaces the dead one. A killed leader's lease or session must expire
// on the servers before another can lead, so every design has the same
// TTL, the recovery scenario's: the figures are that TTL plus how soon
// each design notices the expiry. The memory backend's elections live in
// one process, so it has no failover to measure.
func (r *Runner) Failover(ctx context.Context, targets []deployment) {
	for _, tg := range targets {
		switch {
		case tg.backend.Name == "memory":
			r.notef("failover: memory's elections live in one process; no other process can lead them")
			continue
		case r.Campaigner == nil:
			r.notef("failover: %s: no campaigner command to run in other processes", tg.backend.Name)
			continue
		}
		ttl := recoveryTTL(tg.backend.MinTTL)
		for _, d := range electionDesigns(tg.backend.Name) {
			r.progress(fmt.Sprintf("failover: %s on %s, %d leaders killed", d.Name, tg.backend.Name, r.failoverRounds()))
			res, err := r.failover(ctx, tg, d, ttl)
			if err != nil {
				r.notef("failover: %s %s: %v", tg.backend.Name, d.Name, err)
			}
			if res != nil {
				r.results = append(r.results, *res)
			}
		}
	}
}

func (r *Runner) failoverRounds() int {
	if r.Settings.FailoverRounds > 0 {
		return r.Settings.FailoverRounds
	}
	return 3
}

// failover runs the rounds of design d on tg with ttl.
func (r *Runner) failover(ctx context.Context, tg deployment, d Design, ttl time.Duration) (*Result, error) {
	name := r.key("failover", tg.backend.Name, d.Name)
	f := newFleet(func() *exec.Cmd { return r.Campaigner(d.Name, tg.url, name, ttl) })
	defer f.stop()
	for range failoverCampaigners {
		if err := f.start(); err != nil {
			return nil, err
		}
	}
	if err := f.settle(ctx); err != nil {
		return nil, err
	}
	r.conns.Sample(append([]int{0}, f.pids()...))
	t := newTally()
	rounds := r.failoverRounds()
	for range rounds {
		took, err := f.killLeader(ctx, 10*ttl+30*time.Second)
		t.record(took, err)
		if err != nil {
			break // the fleet's state is unknown: the next round would measure nothing
		}
		t.busy += took
		if err := f.start(); err == nil {
			err = f.settle(ctx)
		}
		if err != nil {
			t.record(0, err)
			break
		}
	}
	res := t.result(ScenarioFailover, d, map[string]int{"rounds": rounds}, r.Settings.RTT, "ops")
	res.Failover = &Failover{TTL: ttl, ExpirySlack: tg.backend.ExpirySlack, Campaigners: failoverCampaigners, Rounds: int(t.ops)}
	if t.first != nil {
		return &res, fmt.Errorf("%d of %d rounds failed, the first: %w", rounds-int(t.ops), rounds, t.first)
	}
	return &res, nil
}

// fleet is the campaigner processes of one design's rounds, and what
// they said.
type fleet struct {
	command func() *exec.Cmd
	procs   []*campaignerProc
	lines   chan campaignerLine
	done    chan struct{} // closed by stop: no more lines are read
	leader  *campaignerProc
	ledAt   time.Time // when the leader said it leads
}

// campaignerProc is one campaigner process.
type campaignerProc struct {
	n           int // its number, from 1, for messages
	cmd         *exec.Cmd
	in          io.WriteCloser
	stderr      strings.Builder
	read        chan struct{} // closed when its output has ended
	campaigning bool
	killed      bool
}

// campaignerLine is a line a campaigner wrote, stamped when it was read;
// eof marks the end of its output.
type campaignerLine struct {
	p    *campaignerProc
	text string
	at   time.Time
	eof  bool
}

func newFleet(command func() *exec.Cmd) *fleet {
	return &fleet{command: command, lines: make(chan campaignerLine, 64), done: make(chan struct{})}
}

// start starts one more campaigner.
func (f *fleet) start() error {
	p := &campaignerProc{n: len(f.procs) + 1, cmd: f.command(), read: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	in, err := p.cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting campaigner %d: %w", p.n, err)
	}
	p.in = in
	f.procs = append(f.procs, p)
	go f.read(p, out)
	return nil
}

// read hands on p's lines, stamped, until its output ends or the fleet
// stops.
func (f *fleet) read(p *campaignerProc, out io.Reader) {
	defer close(p.read)
	sc := bufio.NewScanner(out)
	send := func(l campaignerLine) {
		select {
		case f.lines <- l:
		case <-f.done:
		}
	}
	for sc.Scan() {
		send(campaignerLine{p: p, text: sc.Text(), at: time.Now()})
	}
	send(campaignerLine{p: p, eof: true, at: time.Now()})
}

// settle waits until every live campaigner campaigns and one leads, then
// gives the standbys failoverSettle to settle into their wait.
func (f *fleet) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, failoverStart)
	defer cancel()
	for f.leader == nil || !f.allCampaign() {
		if err := f.next(ctx); err != nil {
			return err
		}
	}
	return sleepCtx(ctx, failoverSettle)
}

// allCampaign reports whether every live campaigner has said it
// campaigns.
func (f *fleet) allCampaign() bool {
	for _, p := range f.procs {
		if !p.killed && !p.campaigning {
			return false
		}
	}
	return true
}

// killLeader kills the leader with SIGKILL and returns how long it took
// until another campaigner said it leads, waiting at most limit.
func (f *fleet) killLeader(ctx context.Context, limit time.Duration) (time.Duration, error) {
	old := f.leader
	old.killed, f.leader = true, nil
	if err := old.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("killing campaigner %d: %w", old.n, err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for f.leader == nil {
		if err := f.next(ctx); err != nil {
			return 0, fmt.Errorf("after the leader (campaigner %d) was killed: %w", old.n, err)
		}
	}
	return f.ledAt.Sub(killed), nil
}

// next reads the next line of any campaigner and takes note of it: a
// campaigner that campaigns, one that leads. Two live leaders at once, a
// campaigner's error or loss, or the end of a live one's output, are
// errors.
func (f *fleet) next(ctx context.Context) error {
	var l campaignerLine
	select {
	case l = <-f.lines:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the campaigners: %w", ctx.Err())
	}
	p := l.p
	verb, rest, _ := strings.Cut(l.text, " ")
	switch {
	case p.killed:
		return nil // what a dead leader wrote before it died
	case l.eof:
		return fmt.Errorf("campaigner %d exited: %s", p.n, strings.TrimSpace(p.stderr.String()))
	case verb == "campaigning":
		p.campaigning = true
	case verb == "leading" && f.leader != nil:
		return fmt.Errorf("campaigners %d and %d both lead", f.leader.n, p.n)
	case verb == "leading":
		f.leader, f.ledAt = p, l.at
	case verb == "lost" || verb == "error":
		return fmt.Errorf("campaigner %d: %s: %s", p.n, verb, rest)
	}
	return nil
}

// pids are the live campaigners' process ids.
func (f *fleet) pids() []int {
	var ids []int
	for _, p := range f.procs {
		if !p.killed {
			ids = append(ids, p.cmd.Process.Pid)
		}
	}
	return ids
}

// stop ends every campaigner: the end of its input has a live one resign
// and exit; one that does not within a few seconds is killed.
func (f *fleet) stop() {
	close(f.done)
	for _, p := range f.procs {
		p.in.Close()
	}
	for _, p := range f.procs {
		select {
		case <-p.read:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.read
		}
		p.cmd.Wait()
	}
}

// sleepCtx sleeps d, or less if ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
