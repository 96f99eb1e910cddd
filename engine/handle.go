package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

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
	stop   chan struct{} // closed when the current worker is killed or closed
	// quit is closed by close: the coordinator reads no more events, and
	// nothing may wait to hand it one.
	quit     chan struct{}
	quitOnce sync.Once
}

func newLocalHandle(job *Job, cfg WorkerConfig, node int, events chan<- Event) (*localHandle, error) {
	h := &localHandle{job: job, cfg: cfg, node: node, events: events, quit: make(chan struct{})}
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
		return r, r.err()
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
	select {
	case h.events <- Event{Task: fmt.Sprintf("node %d", h.node), Err: "killed", Node: h.node, Life: h.life()}:
	case <-h.quit:
	}
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
				select { // once the run has ended, nobody reads events
				case h.events <- ev:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}(w, h.stop)
	return nil
}

func (h *localHandle) close() {
	h.quitOnce.Do(func() { close(h.quit) }) // before mu, which a kill may hold waiting on events
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.dead.Swap(true) {
		close(h.stop)
		h.w.Load().Close()
	}
}
