package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
)

func init() { addCommand(newElectCmd) }

// electing is what `lockctl elect` adds to a runCmd: the value the
// campaign announces. The supervision of the command (signals, the loss
// of the hold, exit codes) is run's.
type electing struct {
	value []byte
}

// electLong is the long help of lockctl elect.
const electLong = `Elect campaigns to lead the election NAME, runs COMMAND while it leads,
and resigns when COMMAND ends; lockctl then exits with COMMAND's exit code.
Start it on every machine that could do the job: one leads and runs
COMMAND, the others wait as standbys, and when the leader ends or dies
(within --ttl plus the backend's expiry slack) one of them takes over.

A leader is the exclusive holder of NAME, as lockctl run holds a key: the
library's watchdog keeps it while COMMAND runs, and the two commands
exclude each other on the same NAME. Its term is the lock's fencing token:
strictly larger for every new leader, so a resource that refuses writes
with a term below the largest it has seen refuses a deposed leader's.

COMMAND gets the leadership in its environment:
  LOCKER_KEY     the election's NAME
  LOCKER_TOKEN   a token unique to this term of office
  LOCKER_TERM    the term: pass it to the resource you write to and have
                 it reject smaller ones. Empty where the backend cannot
                 mint terms (Redlock: no term, no fencing)
  LOCKER_FENCE   the same number as LOCKER_TERM, under the name lockctl run
                 gives it, so that a command written for run works as is
  LOCKER_VALUE   the value of --value (empty without it)

--value is what the leader says of itself (an address, a host name):
stored with the leadership, shown by "lockctl leader" and "lockctl inspect"
and by the library's Election.Leader and Observe. Backends that store no
values (Capabilities.MaxValueLen is 0) refuse it (exit 125).

Signals, standard streams, process groups and the loss of the lock are as
for lockctl run: SIGINT, SIGTERM and SIGHUP are forwarded to COMMAND; one
that comes while lockctl waits to lead ends the wait (exit 128+N); if the
leadership is lost while COMMAND runs (its servers unreachable for the
TTL, someone forced NAME free), another leader may already act, so
lockctl sends COMMAND SIGTERM, then SIGKILL after --grace, and exits 122.

A campaign waits for as long as it takes: that is what a standby is for.
--wait bounds it (exit 124). For a job that should simply not run while
another machine runs it, use "lockctl run --no-wait" instead.

Exit codes: COMMAND's own; 122 leadership lost; 124 not elected within
--wait; 125 lockctl's own error; 126 COMMAND cannot be run; 127 COMMAND
not found; 128+N COMMAND killed by signal N. See "lockctl help exit-codes".`

func newElectCmd(a *app) *cobra.Command {
	r := &runCmd{app: a, elect: &electing{}}
	var value string
	c := &cobra.Command{
		Use:   "elect [flags] NAME -- COMMAND [ARGS...]",
		Short: "Run a command while leading an election: one leader, standbys take over",
		Long:  electLong,
		Example: `  # On every machine: one runs the scheduler, the others stand by:
  lockctl elect --url etcd://10.0.0.1:2379 --value "$(hostname)" cron/scheduler -- ./scheduler

  # Take over within about 5 s of the leader's death:
  lockctl elect --ttl 5s --value "$(hostname):8080" web/primary -- ./serve --primary

  # Hand the term to the resource, which refuses older terms:
  lockctl elect jobs/writer -- sh -c 'exec ./writer --term "$LOCKER_TERM"'

  # Who leads now:
  lockctl leader jobs/writer`,
		Args: r.parseArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			r.elect.value = []byte(value)
			return r.run(c)
		},
	}
	f := c.Flags()
	f.StringVar(&value, "value", "", "what the leader says of itself (an address, a host name), for lockctl leader, inspect and observers")
	f.DurationVar(&r.ttl, "ttl", 0, "leadership TTL: how long a crashed leader holds up a standby (default: the profile's ttl, else the URL's, else 30s)")
	f.DurationVar(&r.wait, "wait", 0, "exit 124 if not elected within this long (0: wait for ever)")
	f.DurationVar(&r.grace, "grace", 10*time.Second, "when the leadership is lost: how long COMMAND has after SIGTERM before SIGKILL")
	f.BoolVarP(&r.verbose, "verbose", "v", false, "say on standard error when lockctl campaigns, leads and resigns, and when a refresh fails")
	return c
}

// campaign checks that the backend can store the value, then campaigns
// for the election r.key on l, within --wait. Its errors carry lockctl's
// exit code.
func (r *runCmd) campaign(ctx context.Context, l locker.Locker, t target, opts []locker.Option) (locker.Lock, error) {
	if err := checkValue(r.elect.value, l.Capabilities()); err != nil {
		return nil, withCode(exitError, err)
	}
	e := locker.NewElection(l, r.key, opts...)
	if r.verbose {
		r.sayLeader(ctx, e, t)
	}
	wctx := ctx
	if r.wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, r.wait, errWaitElapsed)
		defer cancel()
	}
	lock, err := e.Campaign(wctx, r.elect.value)
	switch {
	case err == nil:
		return lock, nil
	case errors.Is(context.Cause(wctx), errWaitElapsed) && ctx.Err() == nil:
		return nil, exitf(exitNotAcquired, "not elected to lead %q within --wait %v: others led all that time", r.key, r.wait)
	}
	return nil, withCode(exitError, err)
}

// sayLeader tells, with --verbose, who leads before the campaign waits.
func (r *runCmd) sayLeader(ctx context.Context, e *locker.Election, t target) {
	lctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	ldr, err := e.Leader(lctx)
	if err != nil {
		r.say("campaigning for %q on %s", r.key, locker.Redact(t.url))
		return
	}
	r.say("%q is led by someone else (term %s, value %s); waiting %s to lead on %s",
		r.key, termText(ldr.Term, ldr.Termed), valueLabel(ldr.Value), waitString(r.wait), locker.Redact(t.url))
}

// checkValue refuses a --value the backend cannot store, before the
// campaign, naming the limit.
func checkValue(v []byte, caps locker.Capabilities) error {
	switch {
	case len(v) == 0:
		return nil
	case caps.MaxValueLen <= 0:
		return fmt.Errorf("--value: backend %s stores no values with its holds (Capabilities.MaxValueLen is 0); leave --value out", caps.Name)
	case len(v) > caps.MaxValueLen:
		return fmt.Errorf("--value is %d bytes, longer than the %d bytes backend %s stores", len(v), caps.MaxValueLen, caps.Name)
	}
	return nil
}

// environ is what lockctl elect adds to the command's environment: the
// term (as LOCKER_FENCE, which run sets, has it) and the value.
func (e *electing) environ(lock locker.Lock) []string {
	return []string{"LOCKER_TERM=" + fenceString(lock), "LOCKER_VALUE=" + string(e.value)}
}

// termLabel is a leader's term for messages.
func termLabel(lock locker.Lock) string {
	f, ok := lock.Fence()
	return termText(f, ok)
}

// termText is a term for messages: its number, or why there is none.
func termText(term uint64, termed bool) string {
	if termed {
		return strconv.FormatUint(term, 10)
	}
	return "none"
}

// valueLabel is a value for messages: quoted, "none" when empty.
func valueLabel(v []byte) string {
	if len(v) == 0 {
		return "none"
	}
	return strconv.Quote(valueText(v))
}

// valueTextMax is how much of a value text output shows; JSON has it all.
const valueTextMax = 80

// valueText is a value as a terminal line shows it: as it is when it is
// printable UTF-8, else Go-quoted; cut to valueTextMax runes, saying how
// long it is.
func valueText(v []byte) string {
	s := string(v)
	if !printable(s) {
		s = strconv.Quote(s)
	}
	if utf8.RuneCountInString(s) > valueTextMax {
		rs := []rune(s)
		s = fmt.Sprintf("%s... (%d bytes)", string(rs[:valueTextMax]), len(v))
	}
	return s
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) < 0
}

// jsonValue is a value as JSON output carries it: as text where it is
// UTF-8, else in base64 (the second field).
func jsonValue(v []byte) (text, b64 string) {
	switch {
	case len(v) == 0:
		return "", ""
	case utf8.Valid(v):
		return string(v), ""
	}
	return "", base64.StdEncoding.EncodeToString(v)
}
