// Command lockctl takes distributed locks from the command line, on any
// backend of the locker library chosen by URL (memory://, redis://,
// redlock://, zookeeper://, etcd://, postgres://...).
//
//	lockctl run [--ttl D] [--wait D | --no-wait] [--grace D] [--shared | --limit N [--weight W]] KEY -- CMD ARGS...
//	lockctl elect [--value V] [--ttl D] [--wait D] [--grace D] NAME -- CMD ARGS...
//	lockctl leader [--watch] NAME
//	lockctl demo [--workers N] [--ttl D] [--story fencing|rw|all]
//	lockctl check | doctor | inspect KEY | release --force KEY
//	lockctl schema [--schema NAME]
//	lockctl bench --url URL... [--scenario ...] [--out DIR]
//	lockctl chaos --url URL... [--scenario ...] [--rounds N] [--out DIR]
//	lockctl version | --version
//	lockctl help exit-codes
//	lockctl completion bash|zsh|fish|powershell
//
// `lockctl run` is flock(1) across machines: it holds KEY (refreshed by the
// library's watchdog) while CMD runs, gives CMD the lock's key, token and
// fencing token as LOCKER_KEY, LOCKER_TOKEN and LOCKER_FENCE, and stops CMD
// if the lock is lost; with --shared it takes a read lock, with --limit N
// one of a semaphore's N permits. `lockctl elect` runs CMD the same way
// while it leads the election NAME, the others that campaign standing by,
// with the term in LOCKER_TERM (and LOCKER_FENCE) and --value in
// LOCKER_VALUE; `lockctl leader` shows who leads, and --watch follows the
// changes. `lockctl demo` shows, on the embedded
// backend with no server, why fencing tokens matter (a holder paused past
// its TTL has its stale write rejected), then readers sharing a lock
// while a writer waits, and a semaphore at its limit.
//
// --json means JSON on standard output, instead of text, on every command;
// reports go to files with check --json-file, --junit and --markdown, and
// with bench and chaos --out DIR.
//
// The URL comes from --url, else --profile's url in the config file, else
// $LOCKER_URL, else the config file's default profile (`lockctl --help`
// describes the file). Passwords in URLs are never printed.
//
// # Exit codes
//
// As timeout(1) and env(1) choose them, so that they rarely collide with
// the codes of the command `lockctl run` runs:
//
//	0      success
//	N      run, elect: the command's own exit code
//	1      demo: a stale write was accepted although the backend claims fencing;
//	       check, doctor: a case or a check failed; chaos: a cell's outcome
//	       was not what the backend's guarantees say
//	122    run: the lock was lost while the command ran, elect: the
//	       leadership was (the command was sent SIGTERM, then SIGKILL
//	       after --grace)
//	124    the lock was not acquired: held by someone else with --no-wait,
//	       or --wait elapsed (elect: not elected within --wait)
//	125    lockctl's own error: usage, config, URL, backend unreachable
//	126    run, elect: the command was found but could not be run
//	127    run, elect: the command was not found
//	128+N  run, elect: the command was killed by signal N, as shells report
//	       it (also lockctl's code when signal N stopped it waiting for the
//	       lock or to lead)
package main

import (
	"context"
	"log/slog"
	"os"

	_ "github.com/distlock/locker/etcd"          // etcd://, etcds://
	_ "github.com/distlock/locker/memory"        // memory://
	_ "github.com/distlock/locker/postgres"      // postgres://, postgresql://
	lockredis "github.com/distlock/locker/redis" // redis://, rediss://, redis+sentinel://
	_ "github.com/distlock/locker/redlock"       // redlock://
	_ "github.com/distlock/locker/zookeeper"     // zookeeper://, zk://
)

func main() {
	a := &app{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	// go-redis logs on its own, process-wide, mostly what the Locker
	// returns as errors anyway (a failed dial), which lockctl prints once:
	// its lines go through lockctl's format, at Warn, which only run
	// --verbose shows.
	lockredis.RouteClientLogs(a.logger(slog.LevelError, nil))
	os.Exit(execute(context.Background(), a, os.Args[1:]))
}
