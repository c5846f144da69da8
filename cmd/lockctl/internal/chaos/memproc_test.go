package chaos

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/distlock/locker"
	"github.com/distlock/locker/memory"
)

// memProcess is a worker run in this process for the tests: Serve on a
// client of a memory store, which pauses and crashes as a process does.
// SIGSTOP pauses the client and holds the worker's input and output (a
// stopped process reads no command and writes no event); SIGCONT
// resumes both; SIGKILL crashes the client (its holds stay until they
// expire) and ends the worker's streams, dropping what it would still
// write.
type memProcess struct {
	c         *memory.Client
	key       string
	gate      gate
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	done      chan struct{}
	killed    atomic.Bool
}

// memWorkers makes a round's workers as clients of one memory store.
func memWorkers() func(url, key string) process {
	store := memory.NewStore()
	quiet := slog.New(slog.DiscardHandler)
	return func(_, key string) process {
		m := &memProcess{c: memory.NewClient(&memory.Options{Store: store, Config: locker.Config{Logger: quiet}}), key: key, done: make(chan struct{})}
		m.inR, m.inW = io.Pipe()
		m.outR, m.outW = io.Pipe()
		return m
	}
}

func (m *memProcess) start(io.Writer) (io.WriteCloser, io.ReadCloser, error) {
	go func() {
		defer close(m.done)
		Serve(context.Background(), m.c, nil, m.key, gatedReader{m.inR, &m.gate}, gatedWriter{m.outW, m})
		m.outW.Close()
		m.c.Close()
	}()
	return m.inW, m.outR, nil
}

func (m *memProcess) signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGSTOP:
		m.c.Pause()
		m.gate.stop()
	case syscall.SIGCONT:
		m.gate.resume()
		m.c.Resume()
	case syscall.SIGKILL:
		m.killed.Store(true)
		m.c.Crash()
		m.gate.resume()
		m.inR.CloseWithError(io.EOF)
		m.outW.Close()
	}
	return nil
}

func (m *memProcess) wait() { <-m.done }

func (m *memProcess) pid() int { return 0 }

// gate holds readers and writers while a worker is stopped.
type gate struct {
	mu      sync.Mutex
	stopped chan struct{} // non-nil while stopped; closed on resume
}

func (g *gate) stop() {
	g.mu.Lock()
	if g.stopped == nil {
		g.stopped = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gate) resume() {
	g.mu.Lock()
	if g.stopped != nil {
		close(g.stopped)
		g.stopped = nil
	}
	g.mu.Unlock()
}

// wait returns once the worker is not stopped.
func (g *gate) wait() {
	g.mu.Lock()
	ch := g.stopped
	g.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

// gatedReader hands on what it read only while the worker runs.
type gatedReader struct {
	r io.Reader
	g *gate
}

func (r gatedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.g.wait()
	return n, err
}

// gatedWriter writes only while the worker runs, and drops what a
// killed worker would write.
type gatedWriter struct {
	w io.Writer
	m *memProcess
}

func (w gatedWriter) Write(p []byte) (int, error) {
	w.m.gate.wait()
	if w.m.killed.Load() {
		return len(p), nil
	}
	return w.w.Write(p)
}
