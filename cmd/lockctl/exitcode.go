package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

// Exit codes of lockctl. They follow timeout(1) and env(1), whose codes
// 124 to 127 mean the same things, and stay above the small numbers that
// commands use for their own failures, so that `lockctl run` can pass its
// command's own code through and a script can still tell the two apart.
const (
	exitOK           = 0
	exitChecksFailed = 1   // doctor: a check failed; check: a case failed; demo, chaos: a rule the backend claims broke
	exitLockLost     = 122 // the lock (elect: the leadership) was lost while the command ran
	exitNotAcquired  = 124 // busy with --no-wait, or --wait elapsed (elect: not elected within it)
	exitError        = 125 // lockctl's own error: usage, config, URL, backend unreachable
	exitCannotRun    = 126 // the command was found but could not be run
	exitNotFound     = 127 // the command was not found
	exitSignalBase   = 128 // + N: the command was killed by signal N (as shells report it)
)

// exitCodesHelp is the text of `lockctl help exit-codes`.
const exitCodesHelp = `Exit codes of lockctl

lockctl picks its own exit codes as timeout(1) and env(1) do, so that they
rarely collide with those of the command that "lockctl run" and "lockctl
elect" run:

  0        success (for run and elect: the command exited 0)
  N        run, elect: the command exited N, and lockctl passes N through
  1        check: a conformance case failed
           doctor: a check failed (with --strict, also one that warned)
           demo: the story broke a rule the backend claims (a stale write
           was accepted although the backend mints fencing tokens)
           chaos: a scenario's outcome on a backend was not what the
           backend's guarantees say (the report's verdict says why)
  122      run: the lock was lost while the command ran; elect: the
           leadership was; the command was sent SIGTERM, then SIGKILL after
           --grace (this code wins over the command's own, since its work
           was no longer protected)
  124      the lock was not acquired: the key is held by someone else
           (--no-wait) or --wait elapsed first; elect: not elected within
           --wait
  125      lockctl's own error: bad usage or flags, a bad config file or
           profile, a bad URL, a backend that cannot be reached
  126      run, elect: the command was found but could not be run (not
           executable, a directory, a bad binary format)
  127      run, elect: the command was not found
  128+N    run, elect: the command was killed by signal N, as shells report
           it (130 for SIGINT, 143 for SIGTERM); also lockctl's own code
           when signal N made it give up waiting for the lock or to lead

A command that itself exits 122 or 124-127 looks like lockctl's codes, as
with timeout(1); lockctl's own errors also print a message starting with
"lockctl:" on standard error, which tells them apart.
`

// codeError is an error that carries the exit code lockctl ends with. A
// nil err ends with code silently: the command's own exit code, whose
// output said what went wrong.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *codeError) Unwrap() error { return e.err }

// withCode makes err end lockctl with code. A nil err stays nil.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &codeError{code: code, err: err}
}

// exitf returns an error that ends lockctl with code and the message.
func exitf(code int, format string, args ...any) error {
	return &codeError{code: code, err: fmt.Errorf(format, args...)}
}

// exitStatus returns the exit code for err, and whether lockctl should
// print it: any error that carries no code is lockctl's own (usage, flag
// parsing, cobra's unknown command), 125.
func exitStatus(err error) (code int, print bool) {
	if err == nil {
		return exitOK, false
	}
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code, ce.err != nil
	}
	return exitError, true
}

// newExitCodesTopic returns the help topic `lockctl help exit-codes`: a
// command with no Run, which cobra lists under "Additional help topics".
func newExitCodesTopic() *cobra.Command {
	c := &cobra.Command{
		Use:   "exit-codes",
		Short: "What lockctl's exit codes mean (122, 124-127, 128+N)",
		Long:  exitCodesHelp,
	}
	c.SetHelpTemplate("{{.Long}}")
	return c
}
