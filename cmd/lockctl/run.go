package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
	lockredis "github.com/distlock/locker/redis"
)

func init() { addCommand(newRunCmd) }

// releaseTimeout bounds the release of the lock after the command ends;
// a lock whose release fails expires at its TTL anyway.
const releaseTimeout = 10 * time.Second

// errWaitElapsed is the cause of a --wait that ran out.
var errWaitElapsed = errors.New("--wait elapsed")

// signalCause is the cause of a wait for the lock that a signal ended.
type signalCause struct{ sig os.Signal }

func (s signalCause) Error() string { return "interrupted by " + signalName(s.sig) }

// runCmd is one `lockctl run`, or one `lockctl elect` (elect set): the
// same supervision of a command, under a lock or under the leadership
// of an election.
type runCmd struct {
	app     *app
	ttl     time.Duration
	wait    time.Duration
	noWait  bool
	grace   time.Duration
	verbose bool

	// What the hold takes of the key: --shared, --limit, --weight.
	shared bool
	limit  int
	weight int

	// elect makes this a `lockctl elect`: the hold is the leadership
	// of the election named key, won by campaigning (elect.go).
	elect *electing

	key  string
	argv []string // the command and its arguments
}

// runLong is the long help of lockctl run.
const runLong = `Run acquires KEY, runs COMMAND while holding it, and releases it when
COMMAND ends; lockctl then exits with COMMAND's exit code. The library's
watchdog refreshes the lock while COMMAND runs, so --ttl bounds how long a
crashed lockctl blocks others, not how long COMMAND may take.

COMMAND gets the lock in its environment:
  LOCKER_KEY     the key
  LOCKER_TOKEN   a token unique to this acquisition
  LOCKER_FENCE   the fencing token: strictly larger for every new holder of
                 the key; pass it to the resource you write to and have it
                 reject smaller ones. Empty where the backend cannot mint a
                 safe one (Redlock).

Standard input, output and error pass through. SIGINT, SIGTERM and SIGHUP
sent to lockctl are forwarded to COMMAND, and lockctl waits for it to end;
one that comes while lockctl waits for the lock ends the wait (exit 128+N).
Should lockctl itself be killed, nothing refreshes the lock any more: on
Linux, COMMAND then gets SIGTERM.

If the lock is lost while COMMAND runs (its server cannot be reached for
the TTL, someone forced it free), COMMAND is no longer protected: lockctl
sends it SIGTERM, then SIGKILL after --grace, and exits 122.

By default the lock is exclusive (a mutex, or a read/write lock's write
side). --shared takes a shared hold instead, a read lock: any number of
shared holders run at once, never together with an exclusive one.
--limit N makes the key a semaphore of N permits: at most N runs at once,
each taking one permit, or --weight W of them. Every client of a key must
agree on what it is: a --limit that differs from the holders' or waiters',
or --shared on a semaphore's key, fails (exit 125). Where the backend
queues waiters (memory, ZooKeeper, etcd) they are served in order, so a
writer waiting behind readers is not overtaken by readers that come after
it; Redis, Redlock and PostgreSQL keep no queue, but a waiting writer
marks the key so that no new reader gets in ahead of it. A backend that does not admit shared holds or semaphores
(Capabilities.Shared, Capabilities.Permits, which lockctl check and lockctl
demo print) refuses these flags with exit 125.
A shared holder's or a permit holder's LOCKER_FENCE increases with every
grant of the key, of any kind: a resource that remembers the highest fence
it has seen from a writer can refuse a reader that started before it.

Unless standard input is a terminal, COMMAND runs in a process group of its
own, and lockctl's signals go to the whole group: a COMMAND that is a shell
script stops together with the programs it started. From a terminal,
COMMAND stays in lockctl's process group, so that it can read the terminal
and the terminal's Ctrl-C and Ctrl-Z reach it directly; lockctl then
signals COMMAND alone (and forwards SIGTERM only, since the terminal
delivers SIGINT and SIGHUP to COMMAND itself).

Exit codes: COMMAND's own; 122 lock lost; 124 not acquired (--no-wait,
--wait); 125 lockctl's own error; 126 COMMAND cannot be run; 127 COMMAND
not found; 128+N COMMAND killed by signal N. See "lockctl help exit-codes".`

func newRunCmd(a *app) *cobra.Command {
	return (&runCmd{app: a}).command()
}

// command returns the cobra command that parses its flags into r.
func (r *runCmd) command() *cobra.Command {
	c := &cobra.Command{
		Use:   "run [flags] KEY -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock, like flock(1) across machines",
		Long:  runLong,
		Example: `  # At most one backup at a time across all machines; wait for the others:
  lockctl run --url redis://10.0.0.5:6379 backups/db -- ./backup.sh --full

  # Skip this run if another machine is at it (exit 124):
  lockctl run --no-wait jobs/nightly -- ./nightly.sh

  # Give up after 5 minutes of waiting; a 1-minute TTL:
  lockctl run --wait 5m --ttl 1m deploy/web -- make deploy

  # Many readers at once, never while a writer runs:
  lockctl run --shared reports/db -- ./read-report.sh
  lockctl run reports/db -- ./rebuild.sh

  # At most 4 exports at once, across all machines:
  lockctl run --limit 4 exports -- ./export.sh

  # Hand the fencing token to the resource:
  lockctl run reports/daily -- sh -c 'curl -H "Fence: $LOCKER_FENCE" ...'`,
		Args: r.parseArgs,
		RunE: func(c *cobra.Command, _ []string) error { return r.run(c) },
	}
	f := c.Flags()
	f.DurationVar(&r.ttl, "ttl", 0, "lock TTL: how long a crashed lockctl blocks others (default: the profile's ttl, else the URL's, else 30s)")
	f.DurationVar(&r.wait, "wait", 0, "exit 124 if the lock is not acquired within this long (0: wait for ever)")
	f.BoolVar(&r.noWait, "no-wait", false, "exit 124 at once if someone else holds KEY")
	f.DurationVar(&r.grace, "grace", 10*time.Second, "when the lock is lost: how long COMMAND has after SIGTERM before SIGKILL")
	f.BoolVar(&r.shared, "shared", false, "take a shared hold (a read lock): shared holders run together, never with an exclusive one")
	f.IntVar(&r.limit, "limit", 0, "make KEY a semaphore of this many permits and take one (or --weight) of them")
	f.IntVar(&r.weight, "weight", 0, "with --limit: how many of the permits to take (default 1)")
	f.BoolVarP(&r.verbose, "verbose", "v", false, "say on standard error when lockctl waits for, acquires and releases the lock, and when a refresh fails")
	return c
}

// parseArgs splits KEY -- COMMAND ARGS... (NAME for lockctl elect).
func (r *runCmd) parseArgs(c *cobra.Command, args []string) error {
	arg := "KEY"
	if r.elect != nil {
		arg = "NAME"
	}
	usage := fmt.Sprintf("want: lockctl %s [flags] %s -- COMMAND [ARGS...]", c.Name(), arg)
	dash := c.ArgsLenAtDash()
	switch {
	case len(args) == 0:
		return fmt.Errorf("missing %s and COMMAND (%s)", arg, usage)
	case dash < 0:
		return fmt.Errorf("missing -- between %s and COMMAND (%s); it keeps COMMAND's flags from being read as lockctl's", arg, usage)
	case dash == 0:
		return fmt.Errorf("missing %s before -- (%s)", arg, usage)
	case dash > 1:
		return fmt.Errorf("want one %s before --, got %d: %q (%s)", arg, dash, args[:dash], usage)
	case len(args) == dash:
		return fmt.Errorf("empty command: nothing after -- (%s)", usage)
	case args[dash] == "":
		return fmt.Errorf("empty command name after -- (%s)", usage)
	}
	r.key, r.argv = args[0], args[dash:]
	return nil
}

// checkFlags rejects flag values that make no sense.
func (r *runCmd) checkFlags(c *cobra.Command) error {
	switch {
	case c.Flags().Changed("ttl") && r.ttl <= 0:
		return fmt.Errorf("--ttl %v: must be positive", r.ttl)
	case r.wait < 0:
		return fmt.Errorf("--wait %v: must not be negative (0 waits for ever)", r.wait)
	case r.noWait && c.Flags().Changed("wait"):
		return errors.New("--wait and --no-wait exclude each other")
	case r.grace < 0:
		return fmt.Errorf("--grace %v: must not be negative", r.grace)
	}
	return checkKind(r.kindOptions(c), kindFlags(c))
}

// kindFlags are the kind flags given, as typed: "--shared --limit 2".
func kindFlags(c *cobra.Command) string {
	var given []string
	for _, name := range []string{"shared", "limit", "weight"} {
		if f := c.Flags().Lookup(name); f != nil && f.Changed {
			if name == "shared" {
				given = append(given, "--shared")
				continue
			}
			given = append(given, "--"+name+" "+f.Value.String())
		}
	}
	return strings.Join(given, " ")
}

// kindOptions are the options of --shared, --limit and --weight, as
// given: the library judges them (checkKind, and Acquire itself).
func (r *runCmd) kindOptions(c *cobra.Command) []locker.Option {
	var opts []locker.Option
	f := c.Flags()
	if r.shared {
		opts = append(opts, locker.Shared())
	}
	if f.Changed("limit") {
		opts = append(opts, locker.Limit(r.limit))
	}
	if f.Changed("weight") {
		opts = append(opts, locker.Weight(r.weight))
	}
	return opts
}

// checkKind has the library judge the kind options on a store of this
// process's own, so that a combination it refuses (--shared with
// --limit, --weight without --limit or above it) fails with its error
// before any server is contacted or any command looked up. The memory
// store admits every kind, so only the options can fail here.
func checkKind(opts []locker.Option, flags string) error {
	if len(opts) == 0 {
		return nil
	}
	l := memory.New(&memory.Options{Store: memory.NewStore()})
	defer l.Close()
	ctx := context.Background()
	lock, err := l.TryAcquire(ctx, "lockctl-run/check", opts...)
	if err != nil {
		// The library's reason, without the key of this private check.
		var oe *locker.OpError
		if errors.As(err, &oe) {
			err = oe.Err
		}
		return fmt.Errorf("%s: %w", flags, err)
	}
	return lock.Release(ctx)
}

// checkCapabilities refuses a kind of hold the backend does not admit,
// naming the capability it lacks, before anything is acquired.
func (r *runCmd) checkCapabilities(c *cobra.Command, caps locker.Capabilities) error {
	switch {
	case r.shared && !caps.Shared:
		return fmt.Errorf("--shared: backend %s does not admit shared holds (Capabilities.Shared is false)", caps.Name)
	case c.Flags().Changed("limit") && !caps.Permits:
		return fmt.Errorf("--limit: backend %s does not admit semaphores (Capabilities.Permits is false)", caps.Name)
	}
	return nil
}

// holdName says what the run takes of its key, for messages: "",
// " (shared)", " (1 of 4 permits)".
func (r *runCmd) holdName(c *cobra.Command) string {
	switch {
	case r.shared:
		return " (shared)"
	case c.Flags().Changed("limit"):
		return fmt.Sprintf(" (%d of %d permits)", max(r.weight, 1), r.limit)
	}
	return ""
}

func (r *runCmd) run(c *cobra.Command) error {
	if err := r.checkFlags(c); err != nil {
		return withCode(exitError, err)
	}
	t, err := r.app.resolve("")
	if err != nil {
		return withCode(exitError, err)
	}
	if scheme(t.url) == "memory" {
		alone := "hold them alone"
		if r.elect != nil {
			alone = "always lead"
		}
		return exitf(exitError, "%s (from %s) is an in-process backend: its locks are not shared with any other process, so lockctl %s would %s; give the URL of a server", locker.Redact(t.url), t.source, c.Name(), alone)
	}
	// Find the command before taking the lock: a typo must not hold others up.
	path, err := lookCommand(r.argv[0])
	if err != nil {
		return err
	}
	opts := r.kindOptions(c)
	switch {
	case c.Flags().Changed("ttl"):
		opts = append(opts, locker.WithTTL(r.ttl))
	case t.ttl > 0:
		opts = append(opts, locker.WithTTL(t.ttl))
	}

	sigs := make(chan os.Signal, 8)
	notifySignals(sigs)
	defer signal.Stop(sigs)

	l, lock, err := r.acquire(c, t, sigs, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	if r.elect != nil {
		r.say("leading %q (term %s, value %s, valid for %v unless refreshed)", r.key, termLabel(lock), valueLabel(r.elect.value), time.Until(lock.Until()).Round(time.Millisecond))
	} else {
		r.say("acquired %q%s (fence %s, valid for %v unless refreshed)", r.key, r.holdName(c), fenceLabel(lock), time.Until(lock.Until()).Round(time.Millisecond))
	}
	code, lost := r.supervise(lock, path, sigs)
	return r.finish(lock, code, lost)
}

// acquire opens the Locker and acquires the key, as --wait and --no-wait
// say, until a signal in sigs interrupts it.
func (r *runCmd) acquire(c *cobra.Command, t target, sigs <-chan os.Signal, opts []locker.Option) (locker.Locker, locker.Lock, error) {
	ctx, cancel := context.WithCancelCause(c.Context())
	defer cancel(nil)
	stop := make(chan struct{})
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case sig := <-sigs:
			cancel(signalCause{sig})
		case <-stop:
		}
	}()
	l, lock, err := r.take(ctx, c, t, opts)
	close(stop)
	<-watching
	var sc signalCause
	if errors.As(context.Cause(ctx), &sc) {
		// Interrupted, perhaps just as the lock was granted: give it back.
		if lock != nil {
			r.releaseLock(lock)
		}
		if l != nil {
			l.Close()
		}
		return nil, nil, exitf(signalCode(sc.sig), "%s not %s: %v", r.subject(), r.gotten(), sc)
	}
	return l, lock, err
}

// take opens the Locker and acquires the key, or returns an error that
// carries lockctl's exit code.
func (r *runCmd) take(ctx context.Context, c *cobra.Command, t target, opts []locker.Option) (locker.Locker, locker.Lock, error) {
	level := slog.LevelError
	if r.verbose {
		level = slog.LevelWarn
		lockredis.RouteClientLogs(r.app.logger(level, nil))
	}
	// The loss of the lock is told by lockctl itself (watch, finish).
	l, err := r.app.open(ctx, t, locker.WithLogger(r.app.logger(level, isLockLoss)))
	if err != nil {
		return nil, nil, err
	}
	if err := r.checkCapabilities(c, l.Capabilities()); err != nil {
		l.Close()
		return nil, nil, withCode(exitError, err)
	}
	if r.elect != nil {
		lock, err := r.campaign(ctx, l, t, opts)
		if err != nil {
			l.Close()
			return nil, nil, err
		}
		return l, lock, nil
	}
	lock, err := l.TryAcquire(ctx, r.key, opts...)
	if errors.Is(err, locker.ErrNotAcquired) && !r.noWait {
		r.say("%q%s is held by someone else; waiting %s on %s", r.key, r.holdName(c), waitString(r.wait), locker.Redact(t.url))
		wctx := ctx
		if r.wait > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeoutCause(ctx, r.wait, errWaitElapsed)
			defer cancel()
		}
		lock, err = l.Acquire(wctx, r.key, opts...)
		if err != nil && errors.Is(context.Cause(wctx), errWaitElapsed) && ctx.Err() == nil {
			l.Close()
			return nil, nil, exitf(exitNotAcquired, "lock %q not acquired within --wait %v: others held it all that time", r.key, r.wait)
		}
	}
	switch {
	case err == nil:
		return l, lock, nil
	case errors.Is(err, locker.ErrNotAcquired):
		l.Close()
		return nil, nil, exitf(exitNotAcquired, "lock %q is held by someone else (--no-wait)", r.key)
	default:
		l.Close()
		return nil, nil, withCode(exitError, err)
	}
}

// supervise runs the command while the lock is held and returns its exit
// code, and whether the lock was lost before it ended.
func (r *runCmd) supervise(lock locker.Lock, path string, sigs <-chan os.Signal) (code int, lost bool) {
	// On Linux the command gets SIGTERM should lockctl die (Pdeathsig), and
	// "parent" there means the thread that started it: keep that thread
	// ours, and alive, until the command has ended.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	env := append(os.Environ(),
		"LOCKER_KEY="+lock.Key(),
		"LOCKER_TOKEN="+lock.Token(),
		"LOCKER_FENCE="+fenceString(lock))
	if r.elect != nil {
		env = append(env, r.elect.environ(lock)...)
	}
	ch, err := startChild(path, r.argv, env, r.app.stdin, r.app.stdout, r.app.stderr)
	if err != nil {
		fmt.Fprintf(r.app.stderr, "lockctl: command %q cannot be run: %v\n", r.argv[0], unwrapExec(err))
		return exitCannotRun, false
	}
	done := make(chan struct{})
	go func() {
		ch.cmd.Wait()
		close(done)
	}()
	lost = r.watch(lock, ch, sigs, done)
	if !lost && closed(lock.Lost()) {
		lost = true
		fmt.Fprintf(r.app.stderr, "lockctl: %s was lost as the command ended: %v\n", r.subject(), lock.Err())
	}
	return exitCodeOf(ch.cmd.ProcessState), lost
}

// watch forwards signals to the command until it ends (done), and stops it
// if the lock is lost meanwhile: SIGTERM, then SIGKILL after --grace. It
// reports whether the lock was lost.
func (r *runCmd) watch(lock locker.Lock, ch *child, sigs <-chan os.Signal, done <-chan struct{}) (lost bool) {
	kill := time.NewTimer(0)
	kill.Stop()
	defer kill.Stop()
	lostc := lock.Lost()
	for {
		select {
		case <-done:
			return lost
		case sig := <-sigs:
			if ch.forwards(sig) {
				ch.signal(sig)
			}
		case <-lostc:
			lostc, lost = nil, true
			fmt.Fprintf(r.app.stderr, "lockctl: %s lost while the command ran: %v; sending the command SIGTERM (SIGKILL in %v)\n",
				r.subject(), lock.Err(), r.grace)
			ch.signal(syscall.SIGTERM)
			kill.Reset(r.grace)
		case <-kill.C:
			fmt.Fprintf(r.app.stderr, "lockctl: the command did not end within --grace %v of SIGTERM; sending SIGKILL\n", r.grace)
			ch.signal(syscall.SIGKILL)
		}
	}
}

// finish releases the lock after the command ended with code, and
// returns the error that ends lockctl with the right exit code.
func (r *runCmd) finish(lock locker.Lock, code int, lost bool) error {
	if lost {
		r.releaseLock(lock)
		return &codeError{code: exitLockLost}
	}
	err := r.releaseLock(lock)
	switch {
	case errors.Is(err, locker.ErrNotHeld):
		// Lost closes before the lock may be anyone else's, so this is a
		// lock that the server gave up early (another process forced it
		// free): the command's work may not have been protected.
		fmt.Fprintf(r.app.stderr, "lockctl: %s was no longer held when the command ended: %v\n", r.subject(), err)
		return &codeError{code: exitLockLost}
	case err != nil:
		// The command's work was done under the lock; it expires at its TTL.
		fmt.Fprintf(r.app.stderr, "lockctl: warning: %v (the lock expires at its TTL)\n", err)
	case r.elect != nil:
		r.say("resigned %q", r.key)
	default:
		r.say("released %q", r.key)
	}
	if code == 0 {
		return nil
	}
	return &codeError{code: code}
}

// releaseLock releases the lock, bounded by releaseTimeout.
func (r *runCmd) releaseLock(lock locker.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return lock.Release(ctx)
}

// subject names what the command runs under, for messages: `lock "k"`,
// or `leadership of "name"` for lockctl elect.
func (r *runCmd) subject() string {
	if r.elect != nil {
		return fmt.Sprintf("leadership of %q", r.key)
	}
	return fmt.Sprintf("lock %q", r.key)
}

// gotten says how the subject is won: "acquired", or "won" for a
// leadership.
func (r *runCmd) gotten() string {
	if r.elect != nil {
		return "won"
	}
	return "acquired"
}

// say tells what lockctl does, with --verbose.
func (r *runCmd) say(format string, args ...any) {
	if r.verbose {
		fmt.Fprintf(r.app.stderr, "lockctl: "+format+"\n", args...)
	}
}

// lookCommand finds the command as exec does, and returns the error that
// ends lockctl when it cannot be run: 127 if it is not there, 126 if it
// is but cannot be run (not executable, a directory).
func lookCommand(name string) (string, error) {
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path, nil
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return "", exitf(exitNotFound, "command not found: %q", name)
	default:
		return "", exitf(exitCannotRun, "command %q cannot be run: %v", name, unwrapExec(err))
	}
}

// unwrapExec returns the cause of an *exec.Error, whose own message
// repeats the command's name.
func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// notifySignals routes the signals lockctl forwards to sigs, except those
// lockctl was started with ignored (nohup ignores SIGHUP, a shell's
// background job SIGINT): catching one would undo that for the command,
// which inherits an ignored signal but not a caught one.
func notifySignals(sigs chan<- os.Signal) {
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
}

// signalCode is the exit code of a process killed by sig, as shells
// report it.
func signalCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + int(s)
	}
	return exitError
}

// fenceString returns the lock's fencing token as LOCKER_FENCE has it:
// empty where the backend has none.
func fenceString(lock locker.Lock) string {
	if f, ok := lock.Fence(); ok {
		return strconv.FormatUint(f, 10)
	}
	return ""
}

// fenceLabel returns the lock's fencing token for messages.
func fenceLabel(lock locker.Lock) string {
	if f, ok := lock.Fence(); ok {
		return strconv.FormatUint(f, 10)
	}
	return "none: the backend cannot mint a safe one"
}

// waitString describes --wait for messages.
func waitString(d time.Duration) string {
	if d == 0 {
		return "for ever"
	}
	return "up to " + d.String()
}

// closed reports, without blocking, whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
