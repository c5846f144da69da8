package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err     error
		code    int
		printIt bool
		what    string
	}{
		{nil, exitOK, false, "success"},
		{errors.New("unknown flag: --x"), exitError, true, "an error without a code is lockctl's own"},
		{exitf(exitNotAcquired, "busy"), exitNotAcquired, true, "a code with a message"},
		{&codeError{code: 3}, 3, false, "the command's own code, silently"},
		{withCode(exitCannotRun, errors.New("x")), exitCannotRun, true, "withCode"},
	} {
		code, printIt := exitStatus(tc.err)
		if code != tc.code || printIt != tc.printIt {
			t.Errorf("%s: exitStatus(%v) = %d, %v; want %d, %v", tc.what, tc.err, code, printIt, tc.code, tc.printIt)
		}
	}
	if withCode(exitError, nil) != nil {
		t.Error("withCode(code, nil) is not nil")
	}
}

// TestUsageErrors: every mistake on the command line exits 125 with a
// message that names it, before anything is contacted (the URL points
// nowhere).
func TestUsageErrors(t *testing.T) {
	const nowhere = "redis://127.0.0.1:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--bogus"}, "unknown flag: --bogus"},
		{[]string{"run"}, "missing KEY and COMMAND"},
		{[]string{"run", "--url", nowhere, "k", "ls", "-l"}, "unknown shorthand flag: 'l'"},
		{[]string{"run", "--url", nowhere, "k", "ls"}, "missing -- between KEY and COMMAND"},
		{[]string{"run", "--url", nowhere, "k", "--"}, "empty command: nothing after --"},
		{[]string{"run", "--url", nowhere, "k", "--", ""}, "empty command name"},
		{[]string{"run", "--url", nowhere, "--", "ls"}, "missing KEY before --"},
		{[]string{"run", "--url", nowhere, "a", "b", "--", "ls"}, `want one KEY before --, got 2: ["a" "b"]`},
		{[]string{"run", "--url", nowhere, "--ttl", "soon", "k", "--", "ls"}, `invalid argument "soon" for "--ttl" flag`},
		{[]string{"run", "--url", nowhere, "--ttl", "0", "k", "--", "ls"}, "--ttl 0s: must be positive"},
		{[]string{"run", "--url", nowhere, "--wait", "-1s", "k", "--", "ls"}, "--wait -1s: must not be negative"},
		{[]string{"run", "--url", nowhere, "--grace", "-1s", "k", "--", "ls"}, "--grace -1s: must not be negative"},
		{[]string{"run", "--url", nowhere, "--wait", "1s", "--no-wait", "k", "--", "ls"}, "--wait and --no-wait exclude each other"},
		{[]string{"run", "k", "--", "ls"}, "no locker URL"},
		{[]string{"run", "--url", "memory://", "k", "--", "ls"}, "memory:// (from --url) is an in-process backend"},
		{[]string{"run", "--profile", "prod", "k", "--", "ls"}, `profile "prod": no config file`},
		{[]string{"demo", "extra"}, `unknown command "extra"`},
		{[]string{"demo", "--workers", "2"}, "--workers 2: want 3 to 20"},
		{[]string{"demo", "--workers", "21"}, "--workers 21: want 3 to 20"},
		{[]string{"demo", "--ttl", "0s"}, "--ttl 0s: must be positive"},
		{[]string{"demo", "--url", "bogus://x"}, `unknown scheme "bogus"`},
		{[]string{"demo", "--url", "memory://?color=blue"}, `invalid query parameter "color"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := runApp(t, nil, tc.args...)
			wantCode(t, r, exitError, "lockctl: ", tc.want)
		})
	}
}

// TestCommandNotRunnable: a command that is not there exits 127, one that
// cannot be run 126, both before the lock is taken: the URL points
// nowhere.
func TestCommandNotRunnable(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "script.sh")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	for _, tc := range []struct {
		cmd  string
		code int
		want string
	}{
		{"no-such-command-anywhere", exitNotFound, `command not found: "no-such-command-anywhere"`},
		{filepath.Join(dir, "missing"), exitNotFound, "command not found"},
		{notExec, exitCannotRun, "permission denied"},
		{dir, exitCannotRun, "is a directory"},
	} {
		r := runApp(t, nil, "run", "--url", "redis://127.0.0.1:1", "k", "--", tc.cmd)
		wantCode(t, r, tc.code, tc.want)
	}
}

func TestHelpExitCodes(t *testing.T) {
	r := runApp(t, nil, "help", "exit-codes")
	if r.code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", r.code, r.stderr)
	}
	for _, code := range []string{"122", "124", "125", "126", "127", "128+N"} {
		if !strings.Contains(r.stdout, "\n  "+code+" ") {
			t.Errorf("help exit-codes does not list %s:\n%s", code, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "Usage:") {
		t.Errorf("help exit-codes shows a usage, not the topic alone:\n%s", r.stdout)
	}
}

// TestEveryCommandHasExamples walks the command tree: every command but a
// help topic shows examples in its --help.
func TestEveryCommandHasExamples(t *testing.T) {
	root := newRootCmd(&app{getenv: func(string) string { return "" }})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.IsAdditionalHelpTopicCommand() {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no examples", c.CommandPath())
		}
		for _, sc := range c.Commands() {
			walk(sc)
		}
	}
	walk(root)
	for _, name := range []string{"run", "demo", "completion", "help", "exit-codes"} {
		if c, _, err := root.Find([]string{name}); err != nil || c.Name() != name {
			t.Errorf("no %s command: %v", name, err)
		}
	}
}

func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfg, []byte("profiles:\n  alpha:\n    url: redis://a\n  beta:\n    url: redis://b\n"), 0o600)
	r := runApp(t, nil, "completion", "bash")
	if r.code != 0 || !strings.Contains(r.stdout, "__start_lockctl") {
		t.Errorf("completion bash: code %d, stdout %.200q", r.code, r.stdout)
	}
	// Cobra's hidden __complete command is what the shell scripts call.
	r = runApp(t, nil, "__complete", "--config", cfg, "--profile", "")
	if r.code != 0 || !strings.Contains(r.stdout, "alpha\nbeta\n") {
		t.Errorf("--profile completion: code %d, stdout %q", r.code, r.stdout)
	}
}

// TestBinaryExitCodes runs the built binary: a usage error exits 125, a
// missing command 127, a command that cannot be run 126.
func TestBinaryExitCodes(t *testing.T) {
	env := testEnv(t)
	wantCode(t, runLockctl(t, env, "run", "--url", "redis://127.0.0.1:1", "k", "ls"), exitError, "missing --")
	wantCode(t, runLockctl(t, env, "no-such-subcommand"), exitError, "unknown command")
	wantCode(t, runLockctl(t, env, "run", "--url", "redis://127.0.0.1:1", "k", "--", "no-such-command-anywhere"), exitNotFound, "command not found")
	wantCode(t, runLockctl(t, env, "run", "--url", "redis://127.0.0.1:1", "k", "--", t.TempDir()), exitCannotRun, "cannot be run")
	// An unreachable backend is lockctl's own error.
	wantCode(t, runLockctl(t, env, "run", "--url", "redis://127.0.0.1:1", "k", "--", "true"), exitError, "unreachable")
	if r := runLockctl(t, env, "help", "exit-codes"); r.code != 0 || !strings.Contains(r.stdout, "122") {
		t.Errorf("help exit-codes: code %d, stdout:\n%s", r.code, r.stdout)
	}
}

// TestJSONFlagIsBoolean: --json means one thing on every command, JSON on
// standard output; no command shadows it with a flag that takes a value
// (which made "check --json --url X" read --url as a file name).
func TestJSONFlagIsBoolean(t *testing.T) {
	root := newRootCmd(&app{getenv: func(string) string { return "" }})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if f := c.Flag("json"); f == nil || f.Value.Type() != "bool" {
			t.Errorf("%q: --json is %v, want the global boolean", c.CommandPath(), f)
		}
		for _, sc := range c.Commands() {
			walk(sc)
		}
	}
	walk(root)
}
