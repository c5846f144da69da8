package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/distlock/locker"
)

// logHandler writes the library's log records (what it cannot return as
// an error: a background refresh that failed and will be retried) as
// lines in lockctl's own format, so that standard error reads as one
// voice:
//
//	lockctl: warning: locker: refresh failed, retrying (key=jobs/nightly err="...")
type logHandler struct {
	mu    *sync.Mutex // shared by the handlers WithAttrs and WithGroup derive
	w     io.Writer
	level slog.Leveler
	skip  func(slog.Record) bool // records lockctl reports in words of its own; nil: none
	attrs string                 // " key=value" of WithAttrs, formatted once
	group string                 // WithGroup's prefix for keys, "" or "g."
}

func newLogHandler(w io.Writer, level slog.Leveler, skip func(slog.Record) bool) *logHandler {
	return &logHandler{mu: new(sync.Mutex), w: w, level: level, skip: skip}
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	if h.skip != nil && h.skip(r) {
		return nil
	}
	var b strings.Builder
	b.WriteString("lockctl: ")
	switch {
	case r.Level >= slog.LevelError:
		b.WriteString("error: ")
	case r.Level >= slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	b.WriteString(r.Message)
	var attrs strings.Builder
	attrs.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&attrs, h.group, a)
		return true
	})
	if attrs.Len() > 0 {
		b.WriteString(" (" + strings.TrimPrefix(attrs.String(), " ") + ")")
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.group, a)
	}
	c.attrs = b.String()
	return &c
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group += name + "."
	return &c
}

// appendAttr writes " key=value", quoting a value that has spaces or
// quotes in it, or is empty, as slog's TextHandler does.
func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, ga := range a.Value.Group() {
			appendAttr(b, group+a.Key+".", ga)
		}
		return
	}
	v := a.Value.String()
	if v == "" || strings.ContainsAny(v, " \"=\t\n") {
		v = strconv.Quote(v)
	}
	b.WriteString(" " + group + a.Key + "=" + v)
}

// isLockLoss reports whether r is the library's report that a lock is no
// longer held (its "err" wraps locker.ErrNotHeld). lockctl run holds one
// lock and says in its own words when that lock is lost, and what it does
// about it: the library's line would tell the same event a second time.
func isLockLoss(r slog.Record) bool {
	lost := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Resolve().Any().(error); ok && errors.Is(err, locker.ErrNotHeld) {
			lost = true
			return false
		}
		return true
	})
	return lost
}
