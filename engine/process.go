package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"
)

// ProcessSpawner makes the command of node's child process, which must run
// [ServeWorker] with its transport on listen ("" for any port the first
// time).
type ProcessSpawner func(node int, listen string) (*exec.Cmd, error)

// Launcher starts node's worker elsewhere, on another host for example,
// with its transport on listen ("" for any port the first time). The
// worker must run [ServeWorker] on the far end of the returned process's
// pipes.
type Launcher func(ctx context.Context, node int, listen string) (WorkerProcess, error)

// WorkerProcess is a running worker that a [Launcher] started.
type WorkerProcess interface {
	// Stdin carries control requests to [ServeWorker]; closing it asks
	// the worker to end.
	Stdin() io.WriteCloser
	// Stdout carries its hello line, responses and events.
	Stdout() io.Reader
	// Kill ends the worker at once, like SIGKILL.
	Kill() error
	// Wait returns once the worker has ended, saying how.
	Wait() string
}

// cmdProcess is a child process as a WorkerProcess.
type cmdProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
}

func (p *cmdProcess) Stdin() io.WriteCloser { return p.stdin }
func (p *cmdProcess) Stdout() io.Reader     { return p.stdout }
func (p *cmdProcess) Kill() error           { return p.cmd.Process.Kill() }
func (p *cmdProcess) Wait() string {
	_ = p.cmd.Wait()
	return "process exited: " + p.cmd.ProcessState.String()
}

// spawnLauncher starts workers as child processes.
func spawnLauncher(spawn ProcessSpawner) Launcher {
	return func(_ context.Context, node int, listen string) (WorkerProcess, error) {
		cmd, err := spawn(node, listen)
		if err != nil {
			return nil, err
		}
		p := &cmdProcess{cmd: cmd}
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
		if p.stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("engine: starting node %d: %w", node, err)
		}
		return p, nil
	}
}

// processHandle is a worker in a child process, or wherever a Launcher
// put it, driven over its stdin and stdout.
type processHandle struct {
	launch Launcher
	node   int
	events chan<- Event
	listen string
	// quit is closed by close: the coordinator reads no more events, and
	// the node's lines must still be read to its end.
	quit     chan struct{}
	quitOnce sync.Once

	mu struct {
		sync.Mutex
		proc    WorkerProcess
		exited  chan struct{}
		stdin   io.WriteCloser
		pending map[uint64]chan Response
		nextID  uint64
		dead    bool
		life    uint64
	}
}

func newProcessHandle(ctx context.Context, launch Launcher, node int, events chan<- Event) (*processHandle, error) {
	h := &processHandle{launch: launch, node: node, events: events, quit: make(chan struct{})}
	if err := h.restart(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *processHandle) restart(ctx context.Context) error {
	proc, err := h.launch(ctx, h.node, h.listen)
	if err != nil {
		return err
	}
	stdin := proc.Stdin()
	sc := newLineScanner(proc.Stdout(), maxWorkerLine)
	hello := make(chan error, 1)
	go func() {
		addr, err := readHello(sc, h.node)
		if err == nil {
			h.listen = addr
		}
		hello <- err
	}()
	select {
	case err = <-hello:
	case <-ctx.Done():
		err = ctx.Err()
		// The hello's read ends once the worker is gone; proc.Wait
		// reads what is left of its stdout, which must not happen
		// beside that read.
		_ = proc.Kill()
		<-hello
	}
	if err != nil {
		_ = proc.Kill()
		proc.Wait()
		return err
	}
	exited := make(chan struct{})
	h.mu.Lock()
	h.mu.proc, h.mu.stdin, h.mu.dead, h.mu.exited = proc, stdin, false, exited
	h.mu.pending = map[uint64]chan Response{}
	h.mu.life++
	life := h.mu.life
	h.mu.Unlock()
	go h.read(proc, sc, exited, life)
	return nil
}

// read takes the node's responses and events until its stdout ends. A
// line that is not a control response, or one too long to read, breaks
// the protocol: the node is killed, and its death, reported with the
// reason, is recovered from like any other (the calls waiting on it fail
// at once instead of waiting for their deadlines).
func (h *processHandle) read(proc WorkerProcess, sc *bufio.Scanner, exited chan struct{}, life uint64) {
	defer close(exited)
	broke := ""
	var failed uint64 // the generation of the last task failure passed on
	for {
		r, ok, why := readResponse(sc, h.node)
		if !ok {
			broke = why
			break
		}
		if r.Event != nil {
			// The coordinator fails a generation at its first failure and
			// uses no other of its failures; a node whose tasks fail by
			// the hundred (a bad record broadcast to a wide processor)
			// would fill its queue, which nobody reads while the recovery
			// calls the nodes, and this loop, blocked on it, would read
			// no answer: every such call (stop, start) waited out
			// callTimeout. One failure per generation is passed on, and
			// each that marks a lost log, which ends the run.
			if ev := r.Event; ev.Gen != 0 && ev.Gen == failed && !ev.LogLost {
				continue
			}
			failed = r.Event.Gen
			select {
			case h.events <- *r.Event:
			case <-h.quit:
			}
			continue
		}
		h.mu.Lock()
		ch := h.mu.pending[r.ID]
		delete(h.mu.pending, r.ID)
		h.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if broke != "" {
		_ = proc.Kill()
	}
	how := proc.Wait()
	if broke != "" {
		how = broke + ": " + how
	}
	h.mu.Lock()
	wasDead := h.mu.dead
	if h.mu.proc == proc {
		h.mu.dead = true
		for id, ch := range h.mu.pending {
			close(ch)
			delete(h.mu.pending, id)
		}
	}
	h.mu.Unlock()
	if !wasDead {
		select {
		case h.events <- Event{Task: fmt.Sprintf("node %d", h.node), Err: how, Node: h.node, Life: life}:
		case <-h.quit:
		}
	}
}

// maxWorkerLine is the longest line the coordinator reads from a worker: a
// "finish" answer carries a generation's results, base64 in one line.
const maxWorkerLine = 256 << 20

// newLineScanner reads the lines of a worker's stdout, each at most max
// bytes: a longer one ends the scan with bufio.ErrTooLong.
func newLineScanner(r io.Reader, max int) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, min(64<<10, max)), max)
	return sc
}

// readHello reads a worker's first line, its hello, and returns the
// transport address it names.
func readHello(sc *bufio.Scanner, node int) (string, error) {
	if !sc.Scan() {
		return "", fmt.Errorf("engine: node %d exited before saying hello: %v", node, sc.Err())
	}
	var r Response
	if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Addr == "" {
		return "", fmt.Errorf("engine: node %d said %.200q instead of hello", node, sc.Bytes())
	}
	return r.Addr, nil
}

// readResponse reads a worker's next line after its hello: a response or
// an event. ok is false once the lines end; then broke says how the worker
// broke the control protocol (a line that is not a response, one too long
// to read), "" if its output simply ended.
func readResponse(sc *bufio.Scanner, node int) (r Response, ok bool, broke string) {
	if !sc.Scan() {
		if err := sc.Err(); err != nil {
			return Response{}, false, fmt.Sprintf("engine: node %d: reading its control lines: %v; killed it", node, err)
		}
		return Response{}, false, ""
	}
	if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
		return Response{}, false, fmt.Sprintf("engine: node %d broke the control protocol with the line %.200q (%v); killed it", node, sc.Bytes(), err)
	}
	return r, true, ""
}

func (h *processHandle) do(ctx context.Context, req Request) (Response, error) {
	h.mu.Lock()
	if h.mu.dead {
		h.mu.Unlock()
		return Response{}, fmt.Errorf("engine: node %d is down", h.node)
	}
	h.mu.nextID++
	req.ID = h.mu.nextID
	ch := make(chan Response, 1)
	h.mu.pending[req.ID] = ch
	b, _ := json.Marshal(req)
	_, err := h.mu.stdin.Write(append(b, '\n'))
	h.mu.Unlock()
	if err != nil {
		return Response{}, fmt.Errorf("engine: node %d: %w", h.node, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return Response{}, fmt.Errorf("engine: node %d exited", h.node)
		}
		if r.Err != "" {
			return r, r.err()
		}
		if f := r.lacks(req.Op); f != "" {
			// The call fails like any other: its generation fails and
			// is recovered, within the restart policy.
			return r, fmt.Errorf("engine: node %d broke the control protocol: its answer to %s has no %q field", h.node, req.Op, f)
		}
		return r, nil
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.mu.pending, req.ID)
		h.mu.Unlock()
		return Response{}, fmt.Errorf("engine: node %d did not answer %s: %w", h.node, req.Op, ctx.Err())
	}
}

func (h *processHandle) addr() string { return h.listen }

func (h *processHandle) alive() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.mu.dead
}

func (h *processHandle) life() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.mu.life
}

func (h *processHandle) kill() error {
	h.mu.Lock()
	proc, dead, exited := h.mu.proc, h.mu.dead, h.mu.exited
	h.mu.Unlock()
	if dead {
		return errDown
	}
	if err := proc.Kill(); err != nil {
		return err
	}
	<-exited // the handle is down when kill returns
	return nil
}

func (h *processHandle) close() {
	h.quitOnce.Do(func() { close(h.quit) })
	h.mu.Lock()
	proc, stdin, dead, exited := h.mu.proc, h.mu.stdin, h.mu.dead, h.mu.exited
	h.mu.dead = true
	h.mu.Unlock()
	if proc == nil {
		return
	}
	if !dead {
		b, _ := json.Marshal(Request{ID: 1 << 62, Op: "exit"})
		_, _ = stdin.Write(append(b, '\n'))
		_ = stdin.Close()
	}
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		_ = proc.Kill()
		<-exited
	}
}
