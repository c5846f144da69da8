//go:build unix

package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// child is the command `lockctl run` runs.
type child struct {
	cmd *exec.Cmd
	// group: the command leads a process group of its own, and signals go
	// to the whole group; otherwise it shares lockctl's (stdin is a
	// terminal) and signals go to it alone.
	group bool
}

// startChild starts the command at path with argv and env. Unless stdin
// is a terminal, the command leads a process group of its own, so that
// lockctl's signals (forwarded ones, and SIGTERM and SIGKILL when the lock
// is lost) reach every process it started, as timeout(1) does it: a shell
// script stops together with its children, which would otherwise go on
// writing after the lock is gone. From a terminal the command stays in
// lockctl's group, the terminal's foreground group: a process in another
// group that reads the terminal is stopped (SIGTTIN) and would hang while
// holding the lock, and the terminal's Ctrl-C and Ctrl-Z must reach it.
func startChild(path string, argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	ch := &child{group: !isTerminal(stdin)}
	ch.cmd = &exec.Cmd{Path: path, Args: argv, Env: env, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	ch.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: ch.group}
	setParentDeathSignal(ch.cmd.SysProcAttr)
	if err := ch.cmd.Start(); err != nil {
		return nil, err
	}
	return ch, nil
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil
}

// forwards reports whether lockctl passes sig on to the command. Sharing
// lockctl's process group with a terminal, the command gets the
// terminal's SIGINT and SIGHUP directly, and passing them on would
// deliver them twice.
func (c *child) forwards(sig os.Signal) bool {
	return c.group || sig == syscall.SIGTERM
}

// signal sends sig to the command, and to its process group if it has
// one. An error can only mean that they have all ended.
func (c *child) signal(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return
	}
	if c.group {
		syscall.Kill(-c.cmd.Process.Pid, s)
		return
	}
	c.cmd.Process.Signal(s)
}

// exitCodeOf returns the exit code of an ended process as a shell reports
// it: its own, or 128+N if signal N killed it.
func exitCodeOf(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// signalName names a signal as kill -l does, e.g. SIGINT.
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		if name := unix.SignalName(s); name != "" {
			return name
		}
	}
	return sig.String()
}
