package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
	"github.com/distlock/locker/cmd/lockctl/internal/buildinfo"
)

// app is what every subcommand shares: the global flags, the process's
// standard streams and environment, and how to reach a backend. A
// subcommand is one file with a constructor newXCmd(*app) *cobra.Command
// that registers itself with addCommand from its init function.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string

	// Global flags.
	url        string
	profile    string
	configPath string
	json       bool
}

// commands are the constructors of lockctl's subcommands, added by their
// files' init functions; cobra lists them sorted by name.
var commands []func(*app) *cobra.Command

// addCommand registers a subcommand's constructor.
func addCommand(newCmd func(*app) *cobra.Command) {
	commands = append(commands, newCmd)
}

// openTimeout bounds locker.Open: some clients (etcd's) retry an
// unreachable server until their context ends, and a lockctl that hangs
// while connecting helps no one.
const openTimeout = 15 * time.Second

// rootLong is the long help of lockctl.
const rootLong = `lockctl takes distributed locks on any backend of the locker library
(memory, Redis, Redlock, ZooKeeper, etcd, PostgreSQL), chosen by URL.

Which deployment a command talks to, first match wins:
  1. --url URL
  2. --profile NAME: that profile's url in the config file
  3. $LOCKER_URL
  4. the config file's default profile
  5. memory:// (the embedded, in-process backend), for demo only

The config file is YAML with named profiles; it is --config FILE, else
$XDG_CONFIG_HOME/lockctl/config.yaml, else ~/.config/lockctl/config.yaml:

  default: local            # used when --profile is not given (optional)
  profiles:
    local:
      url: redis://127.0.0.1:6379
    prod:
      url: etcd://user:secret@10.0.0.1:2379,10.0.0.2:2379/locks
      ttl: 1m               # TTL of what "lockctl run" and "elect" take (optional)

A profile's ttl applies when the profile is in use: named with --profile,
or the default one whose url was chosen. Passwords in URLs are shown as
xxxxx in everything lockctl prints.

Exit codes: see "lockctl help exit-codes".`

// newRootCmd returns the lockctl command with every subcommand.
func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "lockctl",
		Short: "Distributed locks from the command line",
		Long:  rootLong,
		Example: `  # Show fencing at work, with no server (the embedded memory:// backend):
  lockctl demo

  # Run a nightly job on at most one machine at a time:
  lockctl run --url redis://10.0.0.5:6379 --no-wait jobs/nightly -- ./nightly.sh

  # One scheduler leads, the others stand by; who leads:
  lockctl elect --url etcd://10.0.0.1:2379 --value "$(hostname)" cron/scheduler -- ./scheduler
  lockctl leader --url etcd://10.0.0.1:2379 cron/scheduler

  # The same, with the URL in the environment or in a profile:
  LOCKER_URL=etcd://10.0.0.1:2379 lockctl run jobs/nightly -- ./nightly.sh
  lockctl --profile prod run jobs/nightly -- ./nightly.sh`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       versionText(buildinfo.Read()),
	}
	// --version prints what lockctl version prints. Defined here rather
	// than by cobra, which would also make it -v: "lockctl run -v" is
	// --verbose, and one letter should not mean two things.
	root.SetVersionTemplate("{{.Version}}")
	root.Flags().Bool("version", false, "print lockctl's, the locker library's and Go's versions (as lockctl version does)")
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "locker URL, e.g. redis://127.0.0.1:6379 (else --profile's url, $LOCKER_URL, the default profile's; see lockctl --help)")
	pf.StringVar(&a.profile, "profile", "", "use the named profile of the config file")
	pf.StringVar(&a.configPath, "config", "", "config file (default $XDG_CONFIG_HOME/lockctl/config.yaml or ~/.config/lockctl/config.yaml)")
	pf.BoolVar(&a.json, "json", false, "JSON on standard output instead of text, on every command (reports to files: check --json-file, bench and chaos --out)")
	root.RegisterFlagCompletionFunc("profile", a.completeProfiles)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitf(exitError, "%v (see %s --help)", err, c.CommandPath())
	})
	for _, newCmd := range commands {
		root.AddCommand(newCmd(a))
	}
	root.AddCommand(newExitCodesTopic())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	setBuiltinExamples(root)
	return root
}

// setBuiltinExamples gives cobra's own help and completion commands
// examples, as every lockctl command has.
func setBuiltinExamples(root *cobra.Command) {
	shells := map[string]string{
		"bash":       "  source <(lockctl completion bash)",
		"zsh":        `  lockctl completion zsh > "${fpath[1]}/_lockctl"`,
		"fish":       "  lockctl completion fish | source",
		"powershell": "  lockctl completion powershell | Out-String | Invoke-Expression",
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  lockctl help run\n  lockctl help exit-codes"
		case "completion":
			c.Example = `  # Load completions into the current bash shell:
  source <(lockctl completion bash)

  # Install them for zsh:
  lockctl completion zsh > "${fpath[1]}/_lockctl"`
			for _, sc := range c.Commands() {
				sc.Example = shells[sc.Name()]
			}
		}
	}
}

// execute runs lockctl with args and returns its exit code.
func execute(ctx context.Context, a *app, args []string) int {
	root := newRootCmd(a)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	code, show := exitStatus(err)
	if show {
		fmt.Fprintf(a.stderr, "lockctl: %v\n", err)
	}
	return code
}

// target is the deployment a command talks to.
type target struct {
	url    string
	source string        // where url came from, for messages
	ttl    time.Duration // the profile's ttl; 0 if none
}

// resolve picks the URL as the root command's help says. fallback is the
// URL to use when nothing names one ("" makes that an error).
func (a *app) resolve(fallback string) (target, error) {
	switch {
	case a.url != "" && a.profile == "":
		return target{url: a.url, source: "--url"}, nil
	case a.url != "":
		// The URL is --url's, the rest the profile's.
		return a.useProfile(target{url: a.url, source: "--url"}, a.profile)
	case a.profile != "":
		return a.useProfile(target{}, a.profile)
	case a.getenv("LOCKER_URL") != "":
		return target{url: a.getenv("LOCKER_URL"), source: "$LOCKER_URL"}, nil
	}
	cfg, err := a.config()
	switch {
	case err != nil:
		return target{}, err
	case cfg.Default != "":
		return cfg.use(target{}, cfg.Default)
	case fallback != "":
		return target{url: fallback, source: "the default"}, nil
	}
	where := "no config file"
	if cfg.path != "" {
		where = "config file " + cfg.path
		if !cfg.found {
			where += ", which does not exist"
		}
	}
	return target{}, fmt.Errorf("no locker URL: give --url URL, set LOCKER_URL, or choose a profile with --profile NAME (%s)", where)
}

// useProfile returns t with the settings of the named profile of the
// config file.
func (a *app) useProfile(t target, name string) (target, error) {
	cfg, err := a.config()
	if err != nil {
		return target{}, err
	}
	return cfg.use(t, name)
}

// config reads the config file: --config, else the default one, which
// need not exist.
func (a *app) config() (*configFile, error) {
	if a.configPath != "" {
		return loadConfig(a.configPath, true)
	}
	return loadConfig(defaultConfigPath(a.getenv), false)
}

// scheme returns the URL's scheme in lower case.
func scheme(rawURL string) string {
	s, _, _ := strings.Cut(rawURL, "://")
	return strings.ToLower(s)
}

// logger returns a logger for what the library cannot return as an error
// (a background refresh that failed and will be retried), on standard
// error in lockctl's format, from level up, leaving out the records skip
// picks (nil: none).
func (a *app) logger(level slog.Level, skip func(slog.Record) bool) *slog.Logger {
	return slog.New(newLogHandler(a.stderr, level, skip))
}

// open opens a Locker for t, bounded by openTimeout. Its errors (a bad
// URL, an unreachable backend) end lockctl with exitError and say where
// the URL came from.
func (a *app) open(ctx context.Context, t target, opts ...locker.OpenOption) (locker.Locker, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	l, err := locker.Open(ctx, t.url, opts...)
	if err != nil {
		return nil, exitf(exitError, "%w (URL from %s)", err, t.source)
	}
	return l, nil
}

// completeProfiles completes --profile with the config file's profiles.
func (a *app) completeProfiles(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	cfg, err := a.config()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return cfg.names(), cobra.ShellCompDirectiveNoFileComp
}
