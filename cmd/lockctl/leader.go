package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/locker"
)

func init() { addCommand(newLeaderCmd) }

// leaderCmd is one `lockctl leader`.
type leaderCmd struct {
	app   *app
	watch bool
}

// leaderLong is the long help of lockctl leader.
const leaderLong = `Leader reads who leads the election NAME (lockctl elect, or the library's
Election) on the backend's servers: the leader's value, its term and its
token, or "no leader". It exits 0 either way, as inspect does for a free
key; with --json, "leader" is false when no one leads.

The term is the leader's fencing token, larger for every new leader.
Redlock mints none: its leaders have no term. The token is shown where the
backend stores tokens on the server (memory, Redis, Redlock, PostgreSQL).

--watch prints the leader, then every change as the library's
Election.Observe reports it (a new leader, a new value), one line each,
until interrupted (SIGINT, SIGTERM; exit 0). If no one leads when it
starts it says so once; after that it reports leaders, not their absence:
a leader that resigns or dies shows as the next leader. Where the backend
notifies (ZooKeeper, etcd, memory; Redis, Redlock and PostgreSQL through
their release notices, and a dead Redis leader once its TTL has run out),
changes show within a round trip; elsewhere within a second. With --json
each line is one JSON object, stamped with when it was seen.

The answer is a snapshot: the leader may resign or lose the election right
after. Use the same URL and prefix (?prefix=) as the campaigners do.`

func newLeaderCmd(a *app) *cobra.Command {
	lc := &leaderCmd{app: a}
	c := &cobra.Command{
		Use:   "leader NAME",
		Short: "Show who leads an election (value, term, token); --watch follows the changes",
		Long:  leaderLong,
		Example: `  lockctl leader --url etcd://10.0.0.1:2379 cron/scheduler
  lockctl --profile prod leader --json web/primary

  # Follow the leadership, a line per change, until Ctrl-C:
  lockctl leader --watch web/primary`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return lc.run(c.Context(), args[0])
		},
	}
	c.Flags().BoolVarP(&lc.watch, "watch", "w", false, "print every change of leader or value until interrupted")
	return c
}

// leaderOutput is what lockctl leader prints with --json: one object, or
// with --watch one a line.
type leaderOutput struct {
	URL     string `json:"url"` // password redacted
	Backend string `json:"backend"`
	Name    string `json:"name"`
	// Leader is false when no one leads; the fields below are then
	// empty.
	Leader bool `json:"leader"`
	// Value is the leader's value where it is UTF-8 text, else
	// ValueBase64 has it.
	Value       string `json:"value,omitempty"`
	ValueBase64 string `json:"value_base64,omitempty"`
	// Term is absent where the backend mints none (Redlock) or did not
	// report it.
	Term  *uint64 `json:"term,omitempty"`
	Token string  `json:"token,omitempty"`
	// At is when --watch saw the change.
	At *time.Time `json:"at,omitempty"`

	value []byte // the value, for text output
}

func (lc *leaderCmd) run(ctx context.Context, name string) error {
	a := lc.app
	t, err := a.resolve("")
	if err != nil {
		return withCode(exitError, err)
	}
	l, err := a.open(ctx, t, locker.WithLogger(a.logger(slog.LevelError, nil)))
	if err != nil {
		return err
	}
	defer l.Close()
	out := leaderOutput{URL: locker.Redact(t.url), Backend: l.Capabilities().Name, Name: name}
	e := locker.NewElection(l, name)
	lctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	ldr, err := e.Leader(lctx)
	cancel()
	switch {
	case errors.Is(err, locker.ErrNoLeader):
	case err != nil:
		return withCode(exitError, err)
	default:
		out.set(ldr)
	}
	if !lc.watch {
		if a.json {
			return writeJSON(a.stdout, out)
		}
		printLeader(a.stdout, out, l.Capabilities())
		return nil
	}
	return lc.follow(ctx, e, out)
}

// set fills out with the leader ldr.
func (out *leaderOutput) set(ldr locker.Leader) {
	out.Leader, out.Token, out.value = true, ldr.Token, ldr.Value
	out.Value, out.ValueBase64 = jsonValue(ldr.Value)
	out.Term = nil
	if ldr.Termed {
		term := ldr.Term
		out.Term = &term
	}
}

// follow prints the leader as --watch does until a signal or ctx ends
// it: "no leader" once if no one leads now (out), then each leader
// Observe reports.
func (lc *leaderCmd) follow(ctx context.Context, e *locker.Election, out leaderOutput) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Observe's first report is the leader now, if there is one: the
	// reading above is printed only when it found none.
	if !out.Leader {
		if err := lc.printChange(out); err != nil {
			return err
		}
	}
	for ldr := range e.Observe(ctx) {
		out.set(ldr)
		if err := lc.printChange(out); err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		return exitf(exitError, "watching %q ended: the backend's changes could not be followed", out.Name)
	}
	return nil
}

// printChange prints one change as --watch does: a JSON line, or a line
// of text starting with the time it was seen.
func (lc *leaderCmd) printChange(out leaderOutput) error {
	now := time.Now()
	w := lc.app.stdout
	if lc.app.json {
		out.At = &now
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if !out.Leader {
		_, err := fmt.Fprintf(w, "%s  no leader\n", now.Format(time.RFC3339Nano))
		return err
	}
	term := "no term"
	if out.Term != nil {
		term = fmt.Sprintf("term %d", *out.Term)
	}
	_, err := fmt.Fprintf(w, "%s  leader: %s, value %s, token %s\n", now.Format(time.RFC3339Nano), term, outValue(out), orUnknown(out.Token))
	return err
}

// printLeader prints out as a two-column table.
func printLeader(w io.Writer, out leaderOutput, caps locker.Capabilities) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("name", out.Name)
	row("backend", out.Backend+" ("+out.URL+")")
	if !out.Leader {
		row("leader", "no leader")
		tw.Flush()
		return
	}
	row("leader", "yes")
	row("value", outValue(out))
	row("term", outTerm(out, caps))
	token := out.Token
	if token == "" {
		token = "unknown: this backend keeps no token on the server (lockctl inspect shows its node or lease)"
	}
	row("token", token)
	tw.Flush()
}

// outTerm says a leader's term: its number, or why there is none.
func outTerm(out leaderOutput, caps locker.Capabilities) string {
	switch {
	case out.Term != nil:
		return fmt.Sprint(*out.Term)
	case !caps.Fencing:
		return "no term: this backend mints none (no fencing), so a deposed leader's writes cannot be told from the leader's"
	}
	return "no term: the backend did not report one"
}

// outValue says a leader's value for text output.
func outValue(out leaderOutput) string {
	if len(out.value) == 0 {
		return "none"
	}
	return valueText(out.value)
}
