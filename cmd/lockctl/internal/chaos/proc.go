package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// WorkerCommand returns the command of a worker process for key on the
// deployment at url: lockctl's is "lockctl chaos-worker".
type WorkerCommand func(url, key string) *exec.Cmd

// process is a worker as the engine drives it: its standard streams and
// the signals it takes. It is a lockctl chaos-worker process
// (execProcess); the package's tests run Serve in-process instead, on
// the memory backend, whose clients pause and crash as processes do.
type process interface {
	// start starts the worker, its standard error going to stderr, and
	// returns its standard input and output.
	start(stderr io.Writer) (io.WriteCloser, io.ReadCloser, error)
	// signal sends it SIGSTOP, SIGCONT or SIGKILL.
	signal(sig syscall.Signal) error
	// wait returns once it has exited; its output has ended by then.
	wait()
	// pid is its process id, for counting its connections; 0 when it is
	// not a process of its own.
	pid() int
}

// execProcess is a worker in a process of its own.
type execProcess struct{ cmd *exec.Cmd }

// execWorkers makes worker's processes.
func execWorkers(worker WorkerCommand) func(url, key string) process {
	return func(url, key string) process { return &execProcess{cmd: worker(url, key)} }
}

func (e *execProcess) start(stderr io.Writer) (io.WriteCloser, io.ReadCloser, error) {
	e.cmd.Stderr = stderr
	in, err := e.cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	out, err := e.cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	return in, out, e.cmd.Start()
}

func (e *execProcess) signal(sig syscall.Signal) error { return e.cmd.Process.Signal(sig) }

func (e *execProcess) wait() { e.cmd.Wait() }

func (e *execProcess) pid() int { return e.cmd.Process.Pid }

// proc is one worker process as the engine sees it: its input and the
// events it wrote. The worker's connections go through proxies of its
// own (Faults), which the engine's fault commands set.
type proc struct {
	name    string
	process process
	in      io.WriteCloser
	events  chan event // every event, in order, stamped
	exited  chan struct{}
	stderr  *tail
}

// startProc starts a worker named name for key on url; every event it
// writes goes to r.observe, then to the proc's events channel.
func (r *round) startProc(ctx context.Context, name, url string) (*proc, error) {
	p := &proc{name: name, events: make(chan event, 1024), exited: make(chan struct{}), stderr: &tail{}}
	p.process = r.spawn(url, r.key)
	in, out, err := p.process.start(p.stderr)
	if err != nil {
		return nil, fmt.Errorf("starting worker %s: %w", name, err)
	}
	p.in = in
	go p.read(out, r)
	r.procs = append(r.procs, p)
	if r.started != nil {
		r.started(p)
	}
	if _, err := p.await(ctx, evReady); err != nil {
		return nil, err
	}
	return p, nil
}

// read stamps each event the worker writes and hands it on, until the
// worker's output ends.
func (p *proc) read(out io.Reader, r *round) {
	defer close(p.exited)
	defer close(p.events)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			e = event{Ev: evError, Err: "unreadable output: " + sc.Text()}
		}
		e.At = r.since()
		r.observe(p.name, e)
		p.events <- e
	}
	p.process.wait()
}

// send writes a command line to the worker. A stopped worker reads it
// when it resumes.
func (p *proc) send(cmd string) error {
	_, err := io.WriteString(p.in, cmd+"\n")
	return err
}

// await returns the worker's next event of one of the kinds in want,
// skipping "lost" events unless asked for; an "error" event is an error.
func (p *proc) await(ctx context.Context, want ...string) (event, error) {
	for {
		select {
		case <-ctx.Done():
			return event{}, fmt.Errorf("worker %s: waiting for %s: %w", p.name, strings.Join(want, " or "), ctx.Err())
		case e, ok := <-p.events:
			switch {
			case !ok:
				return event{}, fmt.Errorf("worker %s exited while waiting for %s%s", p.name, strings.Join(want, " or "), p.stderr.say())
			case slices.Contains(want, e.Ev):
				return e, nil
			case e.Ev == evError:
				return e, &workerError{p.name, e.Err}
			}
		}
	}
}

// do sends cmd and awaits one of want, within d.
func (p *proc) do(ctx context.Context, d time.Duration, cmd string, want ...string) (event, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := p.send(cmd); err != nil {
		return event{}, fmt.Errorf("worker %s: %s: %w", p.name, cmd, err)
	}
	return p.await(ctx, want...)
}

func (p *proc) signal(sig syscall.Signal) error {
	return p.process.signal(sig)
}

// stop ends the worker: end of input lets it release what it holds; a
// worker that does not exit soon (a stopped one) is killed.
func (p *proc) stop() {
	p.in.Close()
	p.signal(syscall.SIGCONT)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.process.signal(syscall.SIGKILL)
		<-p.exited
	}
}

// fault has the worker set its proxies: see Faults.apply.
func (p *proc) fault(ctx context.Context, args ...string) error {
	_, err := p.do(ctx, 10*time.Second, "fault "+strings.Join(args, " "), evFaulted)
	return err
}

// cut drops the worker's connections to the hosts at the given indexes
// of its URL (every server when none is given) and refuses new ones.
func (p *proc) cut(ctx context.Context, hosts ...int) error {
	args := []string{"cut"}
	for _, h := range hosts {
		args = append(args, strconv.Itoa(h))
	}
	return p.fault(ctx, args...)
}

// restore lets the worker reach every server again, without delay, and
// delivers the replies held back. A worker that has exited has nothing
// to restore.
func (p *proc) restore(ctx context.Context) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	return p.fault(ctx, "restore")
}

// tail keeps the last few KiB a worker wrote to its standard error, for
// error messages.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 2048

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailSize {
		t.buf = t.buf[len(t.buf)-tailSize:]
	}
	return len(b), nil
}

// say is the tail as the end of an error message, or "".
func (t *tail) say() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.TrimSpace(string(t.buf)); s != "" {
		return ": " + s
	}
	return ""
}

// workerError is an error a worker reported (an acquisition that timed
// out, a release refused), as opposed to a failure to run it.
type workerError struct{ name, msg string }

func (e *workerError) Error() string { return "worker " + e.name + ": " + e.msg }

func (e *workerError) Is(target error) bool { return target == errWorker }

// errWorker matches every workerError.
var errWorker = errors.New("a worker reported an error")
