package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
)

func init() {
	addCommand(newInspectCmd)
	addCommand(newReleaseCmd)
}

// inspectTimeout bounds Inspect and ForceRelease: one or two round trips.
const inspectTimeout = 30 * time.Second

func newInspectCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect KEY",
		Short: "Show who holds a key: token, fence, remaining TTL, waiters",
		Long: `Inspect reads who holds KEY on the backend's servers, without taking it:
whether it is held, the holder's token and fencing token, how long its
lock still lasts on the server, and how many clients wait for it, each
where the backend can tell. The detail lines name what the backend stores
(the Redis key, the ZooKeeper node and session, the etcd entry and lease,
each Redlock node's copy). ZooKeeper keeps no TTL per lock: a lock lasts
as long as its holder's session, and inspect shows that session's timeout,
which the server the session is connected to lists (the four-letter word
cons); where no server the URL names lists it, the detail says why.

The answer is a snapshot: the holder may release or lose the key right
after. Use the same URL and prefix (?prefix=) as the applications do, or
the key named is not theirs.`,
		Example: `  lockctl inspect --url redis://10.0.0.5:6379 jobs/nightly
  lockctl --profile prod inspect --json orders/42`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return a.inspect(c.Context(), args[0])
		},
	}
}

// inspectOutput is what lockctl inspect prints with --json.
type inspectOutput struct {
	URL     string            `json:"url"` // password redacted
	Backend string            `json:"backend"`
	Key     string            `json:"key"`
	Held    bool              `json:"held"`
	Token   string            `json:"token,omitempty"`
	Fence   *uint64           `json:"fence,omitempty"`
	TTLMS   *int64            `json:"ttl_ms,omitempty"`
	Waiters *int              `json:"waiters,omitempty"`
	Detail  map[string]string `json:"detail,omitempty"`
}

// inspected is a key as Inspect found it, with the Locker that looked.
type inspected struct {
	t target
	l locker.Locker
	h locker.Holder
}

// inspectKey opens a Locker for the resolved URL and inspects key with
// it, within inspectTimeout. The caller closes the Locker.
func (a *app) inspectKey(ctx context.Context, key string) (*inspected, error) {
	t, err := a.resolve("")
	if err != nil {
		return nil, withCode(exitError, err)
	}
	l, err := a.open(ctx, t, locker.WithLogger(a.logger(slog.LevelError, nil)))
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	h, err := locker.Inspect(ictx, l, key)
	if err != nil {
		l.Close()
		return nil, withCode(exitError, err)
	}
	return &inspected{t: t, l: l, h: h}, nil
}

func (a *app) inspect(ctx context.Context, key string) error {
	in, err := a.inspectKey(ctx, key)
	if err != nil {
		return err
	}
	defer in.l.Close()
	t, l, h := in.t, in.l, in.h
	out := inspectOutput{URL: locker.Redact(t.url), Backend: l.Capabilities().Name, Key: key, Held: h.Held, Token: h.Token, Detail: h.Detail}
	if h.Fenced {
		out.Fence = &h.Fence
	}
	if h.TTLKnown {
		ms := h.TTL.Milliseconds()
		out.TTLMS = &ms
	}
	if h.WaitersKnown {
		out.Waiters = &h.Waiters
	}
	if a.json {
		return writeJSON(a.stdout, out)
	}
	printInspect(a.stdout, out, l.Capabilities())
	return nil
}

// printInspect prints out as a two-column table.
func printInspect(w io.Writer, out inspectOutput, caps locker.Capabilities) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("key", out.Key)
	row("backend", out.Backend+" ("+out.URL+")")
	if out.Held {
		row("held", "yes")
		row("token", orUnknown(out.Token))
	} else {
		row("held", "no")
	}
	switch {
	case out.Fence != nil:
		row("fence", fmt.Sprint(*out.Fence))
	case !caps.Fencing:
		row("fence", "none: this backend mints no fencing tokens")
	case out.Held:
		row("fence", "unknown")
	}
	switch {
	case out.TTLMS != nil:
		row("ttl", (time.Duration(*out.TTLMS)*time.Millisecond).String()+" on the server")
	case out.Held:
		row("ttl", ttlNotReadable(out.Detail))
	}
	if out.Waiters != nil {
		row("waiters", fmt.Sprint(*out.Waiters))
	} else {
		row("waiters", "unknown: this backend keeps no queue on the server")
	}
	keys := make([]string, 0, len(out.Detail))
	for k := range out.Detail {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		row(k, out.Detail[k])
	}
	tw.Flush()
}

// ttlNotReadable says what is known of the TTL of a holder whose
// remaining validity the backend cannot read. ZooKeeper's lock lasts as
// long as its holder's session, whose timeout the detail carries when the
// server told it.
func ttlNotReadable(detail map[string]string) string {
	if d, err := time.ParseDuration(detail["session timeout"]); err == nil {
		return fmt.Sprintf("%v: the holder's session timeout (the server ends the session, and the lock, %v after it last hears from the holder; the time left is not readable)", d, d)
	}
	return "unknown (see detail)"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// releaseCmd is one `lockctl release --force`.
type releaseCmd struct {
	app   *app
	force bool
	yes   bool
}

func newReleaseCmd(a *app) *cobra.Command {
	r := &releaseCmd{app: a}
	c := &cobra.Command{
		Use:   "release --force KEY",
		Short: "Break-glass: free a key whoever holds it",
		Long: `Release --force deletes KEY's lock on the backend's servers, whoever holds
it, and wakes its waiters as a release would: the operator's way out when a
holder is stuck (a process hung while holding, a lock left by a client that
will never come back before its TTL).

WARNING: if the holder is alive, this breaks mutual exclusion. The holder
keeps running, believing it holds the lock, until its Lost signal fires
(memory and etcd at once; Redis, Redlock and ZooKeeper at its next refresh,
up to a third of its TTL later), while the next client takes the key. Only
fencing tokens checked by the resource you protect keep the two apart.

It asks for confirmation: type the key. --yes skips that, for scripts; without
a terminal on standard input, --yes is required. It never removes a waiter
from a queue. It exits 0 whether it freed a lock or found none, and says
which.`,
		Example: `  lockctl inspect --url etcd://10.0.0.1:2379 jobs/nightly
  lockctl release --force --url etcd://10.0.0.1:2379 jobs/nightly
  lockctl release --force --yes --json --profile prod orders/42`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return r.run(c.Context(), args[0])
		},
	}
	c.Flags().BoolVar(&r.force, "force", false, "required: release the key whoever holds it")
	c.Flags().BoolVarP(&r.yes, "yes", "y", false, "do not ask for confirmation")
	return c
}

// releaseOutput is what lockctl release --force prints with --json.
type releaseOutput struct {
	URL      string `json:"url"` // password redacted
	Key      string `json:"key"`
	Released bool   `json:"released"` // false: nothing was held
	Holder   string `json:"holder,omitempty"`
	Error    string `json:"error,omitempty"` // set when released is true but some servers were not reached
}

func (r *releaseCmd) run(ctx context.Context, key string) error {
	a := r.app
	if !r.force {
		return exitf(exitError, "release takes --force: it frees the key whoever holds it, which breaks mutual exclusion if the holder is alive (see lockctl release --help)")
	}
	in, err := a.inspectKey(ctx, key)
	if err != nil {
		return err
	}
	defer in.l.Close()
	t, holder := in.t, describeHolder(in.h)
	if !r.yes {
		if err := r.confirm(key, holder, t.url); err != nil {
			return err
		}
	}
	// A timeout of its own: the confirmation may have taken a while.
	rctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	released, err := locker.ForceRelease(rctx, in.l, key)
	out := releaseOutput{URL: locker.Redact(t.url), Key: key, Released: released, Holder: holder}
	if err != nil {
		if !released {
			return withCode(exitError, err)
		}
		out.Error = err.Error()
	}
	if a.json {
		return writeJSON(a.stdout, out)
	}
	switch {
	case released && err != nil:
		fmt.Fprintf(a.stdout, "released %s (%s), but: %v\n", key, holder, err)
	case released:
		fmt.Fprintf(a.stdout, "released %s (%s)\n", key, holder)
	default:
		fmt.Fprintf(a.stdout, "%s was not held: nothing to release\n", key)
	}
	return nil
}

// describeHolder says who holds a key, in a few words.
func describeHolder(h locker.Holder) string {
	if !h.Held {
		return "not held"
	}
	parts := []string{"token " + orUnknown(h.Token)}
	if h.Fenced {
		parts = append(parts, fmt.Sprintf("fence %d", h.Fence))
	}
	if h.TTLKnown {
		parts = append(parts, "ttl "+h.TTL.Round(time.Millisecond).String())
	}
	return strings.Join(parts, ", ")
}

// confirm asks the operator to type the key, on a terminal.
func (r *releaseCmd) confirm(key, holder, url string) error {
	a := r.app
	if !isTerminal(a.stdin) {
		return exitf(exitError, "release --force asks for confirmation on a terminal; standard input is not one: add --yes to release %q without asking", key)
	}
	fmt.Fprintf(a.stderr, "WARNING: this frees %q on %s whoever holds it (%s).\n", key, locker.Redact(url), holder)
	fmt.Fprintf(a.stderr, "A live holder keeps running, believing it holds the lock, until its Lost fires;\n")
	fmt.Fprintf(a.stderr, "only fencing tokens checked by your resource keep it and the next holder apart.\n")
	fmt.Fprintf(a.stderr, "Type the key to release it: ")
	line, err := bufio.NewReader(a.stdin).ReadString('\n')
	if err != nil && line == "" {
		return exitf(exitError, "no confirmation read: %v", err)
	}
	if strings.TrimRight(line, "\r\n") != key {
		return exitf(exitError, "confirmation did not match the key: nothing released")
	}
	return nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
