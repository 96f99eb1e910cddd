package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// Request is one control-plane call from the coordinator to a worker. The
// same type travels as a JSON line to `loadgen node` children.
type Request struct {
	ID      uint64    `json:"id"`
	Op      string    `json:"op"` // start, stop, clock, checkpoint, horizon, commit, crash, finish, latest, exit
	Gen     uint64    `json:"gen,omitempty"`
	Start   *StartCmd `json:"start,omitempty"`
	Persist bool      `json:"persist,omitempty"`
	Ts      int64     `json:"ts,omitempty"`
	Next    int64     `json:"next,omitempty"`
	Task    string    `json:"task,omitempty"`
	Tasks   []string  `json:"tasks,omitempty"`
}

// Response answers a Request with the same ID; a line with ID 0 carries an
// Event instead.
type Response struct {
	ID       uint64               `json:"id"`
	Err      string               `json:"err,omitempty"`
	Clock    *ClockReply          `json:"clock,omitempty"`
	LatestTs int64                `json:"latest_ts,omitempty"`
	LatestOK bool                 `json:"latest_ok,omitempty"`
	Results  map[string][]byte    `json:"results,omitempty"`
	Faults   transport.FaultStats `json:"faults"`
	Event    *Event               `json:"event,omitempty"`
	Addr     string               `json:"addr,omitempty"` // the hello line
}

// Do executes one control request.
func (w *Worker) Do(req Request) Response {
	r := Response{ID: req.ID}
	var err error
	switch req.Op {
	case "start":
		if req.Start == nil {
			err = errors.New("engine: start without a command")
		} else {
			err = w.Start(*req.Start)
		}
	case "run":
		err = w.Run(req.Gen)
	case "stop":
		w.Stop()
	case "clock":
		var c ClockReply
		c, err = w.Clock(req.Gen)
		r.Clock = &c
	case "checkpoint":
		err = w.Checkpoint(req.Gen, req.Persist, req.Ts, req.Next)
	case "horizon":
		err = w.Horizon(req.Gen, req.Ts)
	case "commit":
		err = w.Commit(req.Gen, req.Ts)
	case "crash":
		var id taskid.ID
		if id, err = taskid.Parse(req.Task); err == nil {
			err = w.Crash(req.Gen, id)
		}
	case "finish":
		r.Results, err = w.Finish(req.Gen)
	case "latest":
		r.LatestTs, r.LatestOK, err = w.Latest(req.Tasks)
	default:
		err = fmt.Errorf("engine: unknown control op %q", req.Op)
	}
	r.Faults = w.TransportFaults()
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// ServeWorker runs w's side of the control plane: requests as JSON lines on
// in, responses and events as JSON lines on out (the first line says the
// worker's transport address). It returns when in ends or an "exit"
// request arrives, after closing w.
func ServeWorker(ctx context.Context, w *Worker, in io.Reader, out io.Writer) error {
	defer w.Close()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(r Response) error {
		mu.Lock()
		defer mu.Unlock()
		return enc.Encode(r)
	}
	if err := send(Response{Addr: w.Addr()}); err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case ev := <-w.Events():
				_ = send(Response{Event: &ev})
			case <-done:
				return
			}
		}
	}()
	// Requests are read beside their execution, so that a stop aborts the
	// running generation at once: a control call can wait on a task that
	// waits for credit from a node that died, until the generation stops.
	reqs := make(chan Request, 64)
	var readErr error
	go func() {
		defer close(reqs)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var req Request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				readErr = fmt.Errorf("engine: control line: %w", err)
				return
			}
			if req.Op == "stop" || req.Op == "exit" {
				w.abort()
			}
			select {
			case reqs <- req:
			case <-done:
				return
			}
		}
		readErr = sc.Err()
	}()
	for req := range reqs {
		if req.Op == "exit" {
			_ = send(Response{ID: req.ID})
			return nil
		}
		if err := send(w.Do(req)); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return readErr
}

// handle is the coordinator's side of one worker.
type handle interface {
	do(ctx context.Context, req Request) (Response, error)
	addr() string
	alive() bool
	// life counts the node's starts: it changes with every restart.
	life() uint64
	// kill ends the node's process abruptly; it fails, killing nothing,
	// when the node is already down.
	kill() error
	restart(ctx context.Context) error
	close()
}

// localHandle is a worker in this process. kill closes it abruptly, like a
// process that died, and restart makes a new one on the same address.
// mu serializes kill (a chaos driver's goroutine) with restart and close
// (the coordinator's).
type localHandle struct {
	job    *Job
	cfg    WorkerConfig
	node   int
	events chan<- Event
	w      atomic.Pointer[Worker]
	dead   atomic.Bool
	lives  atomic.Uint64
	mu     sync.Mutex
	stop   chan struct{}
}

func newLocalHandle(job *Job, cfg WorkerConfig, node int, events chan<- Event) (*localHandle, error) {
	h := &localHandle{job: job, cfg: cfg, node: node, events: events}
	if err := h.restart(context.Background()); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *localHandle) do(ctx context.Context, req Request) (Response, error) {
	w := h.w.Load()
	if h.dead.Load() || w == nil {
		return Response{}, fmt.Errorf("engine: node %d is down", h.node)
	}
	r := w.Do(req)
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

func (h *localHandle) addr() string { return h.cfg.Listen }
func (h *localHandle) alive() bool  { return !h.dead.Load() }
func (h *localHandle) life() uint64 { return h.lives.Load() }

// errDown is kill's answer for a node that is already down.
var errDown = errors.New("engine: node is already down")

func (h *localHandle) kill() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dead.Swap(true) {
		return errDown
	}
	close(h.stop)
	h.events <- Event{Task: fmt.Sprintf("node %d", h.node), Err: "killed", Node: h.node, Life: h.life()}
	h.w.Load().Close()
	return nil
}

func (h *localHandle) restart(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, err := NewWorker(h.job, h.cfg)
	if err != nil {
		return err
	}
	h.cfg.Listen = w.Addr() // keep the port across restarts
	h.w.Store(w)
	h.stop = make(chan struct{})
	h.lives.Add(1)
	h.dead.Store(false)
	go func(w *Worker, stop chan struct{}) {
		for {
			select {
			case ev := <-w.Events():
				h.events <- ev
			case <-stop:
				return
			}
		}
	}(w, h.stop)
	return nil
}

func (h *localHandle) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dead.Swap(true) {
		close(h.stop)
		h.w.Load().Close()
	}
}

// ProcessSpawner makes the command of node's child process, which must run
// [ServeWorker] with its transport on listen ("" for any port the first
// time).
type ProcessSpawner func(node int, listen string) (*exec.Cmd, error)

// processHandle is a worker in a child process, driven over its stdin and
// stdout.
type processHandle struct {
	spawn  ProcessSpawner
	node   int
	events chan<- Event
	listen string

	mu struct {
		sync.Mutex
		cmd     *exec.Cmd
		exited  chan struct{}
		stdin   io.WriteCloser
		pending map[uint64]chan Response
		nextID  uint64
		dead    bool
		life    uint64
	}
}

func newProcessHandle(ctx context.Context, spawn ProcessSpawner, node int, events chan<- Event) (*processHandle, error) {
	h := &processHandle{spawn: spawn, node: node, events: events}
	if err := h.restart(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *processHandle) restart(ctx context.Context) error {
	cmd, err := h.spawn(h.node, h.listen)
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("engine: starting node %d: %w", h.node, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	hello := make(chan error, 1)
	go func() {
		if !sc.Scan() {
			hello <- fmt.Errorf("engine: node %d exited before saying hello: %v", h.node, sc.Err())
			return
		}
		var r Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || r.Addr == "" {
			hello <- fmt.Errorf("engine: node %d said %q instead of hello", h.node, sc.Text())
			return
		}
		h.listen = r.Addr
		hello <- nil
	}()
	select {
	case err = <-hello:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	exited := make(chan struct{})
	h.mu.Lock()
	h.mu.cmd, h.mu.stdin, h.mu.dead, h.mu.exited = cmd, stdin, false, exited
	h.mu.pending = map[uint64]chan Response{}
	h.mu.life++
	life := h.mu.life
	h.mu.Unlock()
	go h.read(cmd, sc, exited, life)
	return nil
}

func (h *processHandle) read(cmd *exec.Cmd, sc *bufio.Scanner, exited chan struct{}, life uint64) {
	defer close(exited)
	for sc.Scan() {
		var r Response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		if r.Event != nil {
			h.events <- *r.Event
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
	_ = cmd.Wait()
	h.mu.Lock()
	wasDead := h.mu.dead
	if h.mu.cmd == cmd {
		h.mu.dead = true
		for id, ch := range h.mu.pending {
			close(ch)
			delete(h.mu.pending, id)
		}
	}
	h.mu.Unlock()
	if !wasDead {
		h.events <- Event{Task: fmt.Sprintf("node %d", h.node), Err: "process exited: " + cmd.ProcessState.String(),
			Node: h.node, Life: life}
	}
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
			return r, errors.New(r.Err)
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
	cmd, dead, exited := h.mu.cmd, h.mu.dead, h.mu.exited
	h.mu.Unlock()
	if dead {
		return errDown
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	<-exited // the handle is down when kill returns
	return nil
}

func (h *processHandle) close() {
	h.mu.Lock()
	cmd, stdin, dead, exited := h.mu.cmd, h.mu.stdin, h.mu.dead, h.mu.exited
	h.mu.dead = true
	h.mu.Unlock()
	if cmd == nil {
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
		_ = cmd.Process.Kill()
		<-exited
	}
}
