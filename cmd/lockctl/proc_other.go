//go:build !unix

package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
)

// child is the command `lockctl run` runs; see proc_unix.go.
type child struct{ cmd *exec.Cmd }

// errUnsupported: process groups and POSIX signals are what run is built on.
var errUnsupported = errors.New("lockctl run needs a Unix system (process groups and signals)")

func startChild(string, []string, []string, io.Reader, io.Writer, io.Writer) (*child, error) {
	return nil, errUnsupported
}

func (c *child) forwards(os.Signal) bool { return false }

func (c *child) signal(os.Signal) {}

func exitCodeOf(ps *os.ProcessState) int { return ps.ExitCode() }

func signalName(sig os.Signal) string { return sig.String() }

// isTerminal reports false: without a way to tell, release --force asks
// for --yes instead of a typed confirmation.
func isTerminal(io.Reader) bool { return false }
