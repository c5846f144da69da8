package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// reporter shows the demo's story as it happens: lines of text with
// timestamps, or with --json one JSON object per line (JSON Lines), each
// with a "type": "start", "phase", "event", then "summary" last.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	json  bool
	start time.Time
	phase string // the current phase's title, for JSON events
}

func newReporter(w io.Writer, asJSON bool) *reporter {
	return &reporter{w: w, json: asJSON, start: time.Now()}
}

// event is one thing that happened, as --json prints it.
type event struct {
	Type      string    `json:"type"` // "event"
	Time      time.Time `json:"time"`
	ElapsedMS int64     `json:"elapsed_ms"` // since the demo started
	Phase     string    `json:"phase"`
	Worker    string    `json:"worker,omitempty"`
	// Event says what happened: acquired, write, released, paused,
	// resumed, crashed, release-refused, note; in the rw story also
	// waiting, releases (told as the release is made) and violation.
	Event string `json:"event"`
	// Fence is the lock's fencing token, where the backend mints one.
	Fence *uint64 `json:"fence,omitempty"`
	// Outcome of a write: accepted or rejected.
	Outcome string `json:"outcome,omitempty"`
	// Stale: a write by a worker whose lock someone else has acquired since.
	Stale   bool   `json:"stale,omitempty"`
	Message string `json:"message"`
}

// startInfo opens the story.
type startInfo struct {
	Type         string `json:"type"` // "start"
	URL          string `json:"url"`  // password redacted
	Backend      string `json:"backend"`
	Capabilities string `json:"capabilities"`
	Fencing      bool   `json:"fencing"`
	Key          string `json:"key"`
	Workers      int    `json:"workers"`
	TTLMS        int64  `json:"ttl_ms"`
	Message      string `json:"message"`
}

// phaseInfo starts a phase of the story.
type phaseInfo struct {
	Type  string `json:"type"` // "phase"
	Title string `json:"title"`
	Text  string `json:"text"`
}

// begin prints the story's opening.
func (r *reporter) begin(s startInfo) {
	s.Type = "start"
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		r.encode(s)
		return
	}
	fmt.Fprintln(r.w, s.Message)
}

// beginPhase prints a phase's title and what it shows.
func (r *reporter) beginPhase(title, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.phase = title
	if r.json {
		r.encode(phaseInfo{Type: "phase", Title: title, Text: text})
		return
	}
	fmt.Fprintf(r.w, "\n== %s\n%s\n", title, text)
}

// emit prints an event, stamped now.
func (r *reporter) emit(e event) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Type, e.Time, e.Phase = "event", now, r.phase
	e.ElapsedMS = now.Sub(r.start).Milliseconds()
	if r.json {
		r.encode(e)
		return
	}
	fmt.Fprintf(r.w, "%s %+8.3fs  %-4s %s\n", now.Format("15:04:05.000"), now.Sub(r.start).Seconds(), e.Worker, e.Message)
}

// end prints the summary.
func (r *reporter) end(s summary) {
	s.Type = "summary"
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.json {
		r.encode(s)
		return
	}
	fences := []string{fencesText(s.Fences)}
	fmt.Fprintf(r.w, "\n== Summary\n")
	if s.fencingTold() {
		fmt.Fprintf(r.w, "acquisitions      %d (%d handoffs from one worker to another)\n", s.Acquisitions, s.Handoffs)
		fmt.Fprintf(r.w, "writes accepted   %d (stale: %d)\n", s.WritesAccepted, s.StaleAccepted)
		fmt.Fprintf(r.w, "writes rejected   %d (stale: %d)\n", s.WritesRejected, s.StaleRejected)
		fmt.Fprintf(r.w, "fences seen       %s\n", strings.Join(fences, " "))
	}
	if rw := s.ReadWrite; rw != nil && rw.Skipped == "" {
		fmt.Fprintf(r.w, "readers together  %d; the writer waited %v; readers that overtook it: %d\n",
			rw.ReadersTogether, time.Duration(rw.WriterWaitMS)*time.Millisecond, rw.Overtaken)
		fmt.Fprintf(r.w, "read/write fences %s\n", fencesText(rw.Fences))
	}
	if sem := s.Semaphore; sem != nil && sem.Skipped == "" {
		fmt.Fprintf(r.w, "semaphore         %d permits, %d clients: at most %d in use, %d waited\n", sem.Limit, sem.Clients, sem.MostHeld, sem.Waited)
	}
	fmt.Fprintf(r.w, "elapsed           %v\n", time.Duration(s.ElapsedMS)*time.Millisecond)
	fmt.Fprintf(r.w, "\n%s\n", wrap(s.Verdict, 96))
}

// fencesText lists fences, or says there are none.
func fencesText(fs []uint64) string {
	if len(fs) == 0 {
		return "none (the backend mints no fencing tokens)"
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprint(f)
	}
	return strings.Join(parts, " ")
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		if i > 0 && n+1+len(word) > width {
			b.WriteByte('\n')
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}

// encode writes v as one line of JSON; r.mu is held.
func (r *reporter) encode(v any) {
	// Encoding these plain structs cannot fail; a failed write to stdout
	// has no one to report to.
	json.NewEncoder(r.w).Encode(v)
}
