package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
	"github.com/distlock/locker/backend"
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
		Short: "Show who holds a key: each holder's kind, token, fence, value, remaining TTL; the waiters",
		Long: `Inspect reads who holds KEY on the backend's servers, without taking it:
whether it is held, each holder's token and fencing token, how long its
lock still lasts on the server, and the clients that wait for it, each
where the backend can tell. A holder's value, what it says of itself
(the library's WithValue, an election leader's lockctl elect --value),
is shown where it has one; with --json it is "value", or "value_base64"
for a value that is not UTF-8 text. The detail lines name what the backend stores
(the Redis key, the ZooKeeper node and session, the etcd entry and lease,
each Redlock node's copy). ZooKeeper keeps no TTL per lock: a lock lasts
as long as its holder's session, and inspect shows that session's timeout,
which the server the session is connected to lists (the four-letter word
cons); where no server the URL names lists it, the detail says why.

A key may have several holders: the shared holders of a read lock, the
permit holders of a semaphore (lockctl run --shared, --limit). Inspect then
lists every one in grant order with its kind (exclusive, shared, or permit
with the semaphore's limit and the permits it takes), and the waiters in
queue order with what each asks for, where the backend keeps a queue on
its servers (memory, ZooKeeper, etcd) and lists it. With --json they are
"holds" and "queue"; the top-level token, fence and ttl_ms are the first
holder's.

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
	URL     string  `json:"url"` // password redacted
	Backend string  `json:"backend"`
	Key     string  `json:"key"`
	Held    bool    `json:"held"`
	Token   string  `json:"token,omitempty"`
	Fence   *uint64 `json:"fence,omitempty"`
	TTLMS   *int64  `json:"ttl_ms,omitempty"`
	Waiters *int    `json:"waiters,omitempty"`
	// Value is the first holder's value (WithValue, an election's
	// leader's), where it is UTF-8 text; else ValueBase64 has it.
	Value       string            `json:"value,omitempty"`
	ValueBase64 string            `json:"value_base64,omitempty"`
	Detail      map[string]string `json:"detail,omitempty"`
	// Holds are every holder, in grant order; the fields above are the
	// first one's. Queue are the waiters, in queue order, where the
	// backend lists them.
	Holds []holdOutput `json:"holds,omitempty"`
	Queue []holdOutput `json:"queue,omitempty"`
}

// holdOutput is one holder or waiter as lockctl inspect prints it.
type holdOutput struct {
	// Kind is exclusive, shared or permit; empty where the backend did
	// not say.
	Kind string `json:"kind,omitempty"`
	// Limit and Weight are a permit's: the semaphore's permits and how
	// many the hold takes.
	Limit  int     `json:"limit,omitempty"`
	Weight int     `json:"weight,omitempty"`
	Token  string  `json:"token,omitempty"`
	Fence  *uint64 `json:"fence,omitempty"`
	TTLMS  *int64  `json:"ttl_ms,omitempty"`
	// Value is the hold's value as text, or ValueBase64 where it is not
	// UTF-8.
	Value       string            `json:"value,omitempty"`
	ValueBase64 string            `json:"value_base64,omitempty"`
	Detail      map[string]string `json:"detail,omitempty"`

	value []byte // the value, for text output
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
	caps := in.l.Capabilities()
	out := newInspectOutput(in.h, caps)
	out.URL, out.Key = locker.Redact(in.t.url), key
	if a.json {
		return writeJSON(a.stdout, out)
	}
	printInspect(a.stdout, out, caps)
	return nil
}

// newInspectOutput turns what Inspect found into what inspect prints. A
// backend that lists no holds (one that predates kinds) has its one
// holder described by the Holder's own fields: exclusive where the
// backend admits no other kind, of unknown kind otherwise.
func newInspectOutput(h locker.Holder, caps locker.Capabilities) inspectOutput {
	out := inspectOutput{Backend: caps.Name, Held: h.Held, Token: h.Token, Detail: h.Detail}
	out.Value, out.ValueBase64 = jsonValue(h.Value)
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
	for _, hd := range h.Holds {
		out.Holds = append(out.Holds, newHoldOutput(hd))
	}
	if len(out.Holds) == 0 && h.Held {
		only := holdOutput{Token: h.Token, Fence: out.Fence, TTLMS: out.TTLMS, value: h.Value}
		only.Value, only.ValueBase64 = out.Value, out.ValueBase64
		if !caps.Shared && !caps.Permits {
			only.Kind = locker.Kind(0).String() // exclusive: the only kind it admits
		}
		out.Holds = []holdOutput{only}
	}
	for _, w := range h.Queue {
		out.Queue = append(out.Queue, newHoldOutput(w))
	}
	return out
}

func newHoldOutput(hd locker.Hold) holdOutput {
	o := holdOutput{Kind: hd.Kind.String(), Token: hd.Token, Detail: hd.Detail, value: hd.Value}
	o.Value, o.ValueBase64 = jsonValue(hd.Value)
	if hd.Kind == backend.Permit {
		o.Limit, o.Weight = hd.Limit, hd.Weight
	}
	if hd.Fenced {
		o.Fence = &hd.Fence
	}
	if hd.TTLKnown {
		ms := hd.TTL.Milliseconds()
		o.TTLMS = &ms
	}
	return o
}

// several reports whether out has more to say of its holders than one
// exclusive hold: then they are listed in a table of their own.
func (out inspectOutput) several() bool {
	return len(out.Holds) > 1 || len(out.Holds) == 1 && out.Holds[0].Kind != "" && out.Holds[0].Kind != locker.Kind(0).String()
}

// printInspect prints out as a two-column table, then the holders and
// the waiters each in a table of their own where there is more to say
// than one exclusive holder and a count.
func printInspect(w io.Writer, out inspectOutput, caps locker.Capabilities) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("key", out.Key)
	row("backend", out.Backend+" ("+out.URL+")")
	switch {
	case !out.Held:
		row("held", "no")
	case out.several():
		row("held", fmt.Sprintf("yes, by %s", holdersText(out.Holds)))
	default:
		row("held", "yes")
		row("token", orUnknown(out.Token))
		if len(out.Holds) == 1 && len(out.Holds[0].value) > 0 {
			row("value", valueText(out.Holds[0].value))
		}
	}
	if !out.several() {
		printFirstHolder(row, out, caps)
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
	if out.several() {
		fmt.Fprintln(w, "\nholders, in grant order:")
		printHolds(w, out.Holds, true, caps)
	}
	if len(out.Queue) > 0 {
		fmt.Fprintln(w, "\nwaiters, in queue order:")
		printHolds(w, out.Queue, false, caps)
	}
}

// printFirstHolder prints the fence and TTL rows of a key with one
// exclusive holder (or none), as inspect always has.
func printFirstHolder(row func(k, v string), out inspectOutput, caps locker.Capabilities) {
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
}

// holdersText says who holds a key with several holders: "3 shared
// holders", "a semaphore of 4 permits: 3 taken by 2 holders".
func holdersText(hs []holdOutput) string {
	first := hs[0]
	if first.Kind == backend.Permit.String() {
		taken := 0
		for _, h := range hs {
			taken += h.Weight
		}
		return fmt.Sprintf("a semaphore of %d permits: %d taken by %d holder%s", first.Limit, taken, len(hs), plural(len(hs)))
	}
	kinds := map[string]int{}
	for _, h := range hs {
		kinds[orUnknown(h.Kind)]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, fmt.Sprintf("%d %s holder%s", kinds[k], k, plural(kinds[k])))
	}
	return strings.Join(parts, ", ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// printHolds prints holders (held: with token, fence and TTL) or
// waiters as a table, one a line.
func printHolds(w io.Writer, hs []holdOutput, held bool, caps locker.Capabilities) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	values := held && slices.ContainsFunc(hs, func(h holdOutput) bool { return len(h.value) > 0 })
	switch {
	case values:
		fmt.Fprintln(tw, "  #\tkind\ttoken\tfence\tttl\tvalue\tdetail")
	case held:
		fmt.Fprintln(tw, "  #\tkind\ttoken\tfence\tttl\tdetail")
	default:
		fmt.Fprintln(tw, "  #\tkind\tdetail")
	}
	for i, h := range hs {
		kind := orUnknown(h.Kind)
		if h.Kind == backend.Permit.String() {
			kind = fmt.Sprintf("%d permit%s of %d", h.Weight, plural(h.Weight), h.Limit)
		}
		if !held {
			fmt.Fprintf(tw, "  %d\t%s\t%s\n", i+1, kind, detailText(h.Detail))
			continue
		}
		fence := "unknown"
		switch {
		case h.Fence != nil:
			fence = fmt.Sprint(*h.Fence)
		case !caps.Fencing:
			fence = "none"
		}
		ttl := "unknown"
		if d, err := time.ParseDuration(h.Detail["session timeout"]); err == nil {
			ttl = "session " + d.String() // ZooKeeper: the hold lasts as long as its session
		}
		if h.TTLMS != nil {
			ttl = (time.Duration(*h.TTLMS) * time.Millisecond).String()
		}
		if values {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, kind, orUnknown(h.Token), fence, ttl, holdValueText(h.value), detailText(h.Detail))
			continue
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", i+1, kind, orUnknown(h.Token), fence, ttl, detailText(h.Detail))
	}
	tw.Flush()
}

// holdValueText is a hold's value in a table cell: "-" if none.
func holdValueText(v []byte) string {
	if len(v) == 0 {
		return "-"
	}
	return valueText(v)
}

// detailText prints a hold's detail as "k=v, k=v", sorted; "-" if none.
func detailText(d map[string]string) string {
	if len(d) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		parts = append(parts, k+"="+d[k])
	}
	return strings.Join(parts, ", ")
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
it (every holder, where a read lock or a semaphore has several), and wakes
its waiters as a release would: the operator's way out when a
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
	if n := len(h.Holds); n > 1 {
		// Every holder loses its hold; name the first, count the rest.
		parts[0] = fmt.Sprintf("%d holders, the first with token %s", n, orUnknown(h.Token))
	}
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
