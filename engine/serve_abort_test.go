package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// oneRecord is a source with one record, at timestamp 1.
type oneRecord struct{ read bool }

func (*oneRecord) Start(int64) error { return nil }
func (s *oneRecord) Read(dst []Record, _ int64) ([]Record, int64, error) {
	if s.read {
		return dst, 2, nil
	}
	s.read = true
	return append(dst, Record{Ts: 1, Payload: []byte("x")}), 2, nil
}

// fanOut emits n messages for each message it processes, and says on
// processing that it did.
type fanOut struct {
	n          int
	processing chan<- struct{}
}

func (f fanOut) Process(in []Message, out *Emitter) error {
	for _, m := range in {
		for range f.n {
			out.Emit(m.Ts, nil, []byte("y"))
		}
	}
	select {
	case f.processing <- struct{}{}:
	default:
	}
	return nil
}

// stuckCall starts ServeWorker on a worker whose checkpoint call waits on
// its generation: the call waits for the lock of a task that waits for
// credit from a node that never answers. It returns once the call holds
// the worker, with the pipe the coordinator writes requests to, ServeWorker's
// context's cancel, and its result.
func stuckCall(t *testing.T) (w *Worker, job *Job, dir string, coordinator *io.PipeWriter, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	processing := make(chan struct{}, 1)
	job = &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return &oneRecord{}, nil }},
			{Name: "fan", Parallelism: 1, NewTask: func(int) (Task, error) {
				return fanOut{n: 2 * transport.DefaultWindowMessages, processing: processing}, nil
			}},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "fan", Partitioner: RoundRobin}, {From: "fan", To: "sink", Partitioner: RoundRobin}},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String() // the sink's node: nothing listens there
	l.Close()
	dir = t.TempDir()
	w, err = NewWorker(job, WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	in, coordinator := io.Pipe()
	t.Cleanup(func() { coordinator.Close() }) // ends ServeWorker's reader
	lines, out := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	served := make(chan error, 1)
	go func() { served <- ServeWorker(ctx, w, in, out); out.Close() }()
	answers := bufio.NewScanner(lines)
	answers.Scan() // the hello line
	send := func(req Request) {
		b, _ := json.Marshal(req)
		if _, err := fmt.Fprintf(coordinator, "%s\n", b); err != nil {
			t.Fatal(err)
		}
	}
	call := func(req Request) {
		send(req)
		for answers.Scan() {
			var r Response
			if err := json.Unmarshal(answers.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.ID == req.ID {
				if r.Err != "" {
					t.Fatalf("%s: %s", req.Op, r.Err)
				}
				return
			}
		}
		t.Fatalf("no answer to %s", req.Op)
	}
	call(Request{ID: 1, Op: "start", Start: &StartCmd{Gen: 1, Node: 0, Addrs: []string{w.Addr(), dead},
		Placement: []int{0, 0, 1}, Target: math.MaxInt64, Horizon: math.MaxInt64}})
	call(Request{ID: 2, Op: "run", Gen: 1})
	go func() { // whatever else it writes
		for answers.Scan() {
		}
	}()
	select {
	case <-processing: // and then waits for credit to send its output
	case <-time.After(30 * time.Second): // a hang guard, far beyond any wait
		t.Fatal("the task never processed the source's record")
	}
	send(Request{ID: 3, Op: "checkpoint", Gen: 1, Ts: 1, Next: 2})
	guard := time.Now().Add(30 * time.Second)
	for w.mu.TryLock() { // until the checkpoint holds the worker
		w.mu.Unlock()
		if time.Now().After(guard) {
			t.Fatal("the checkpoint call never started")
		}
		runtime.Gosched()
	}
	return w, job, dir, coordinator, cancel, served
}

// TestServeWorkerEndsWhenItsContextDoesDuringACall: a worker process told to
// stop (loadgen node's context ends on SIGTERM) while a control call waits
// on its generation (a checkpoint, for the lock of a task that waits for
// credit from a node that never answers) returns ctx's error and closes its
// worker. It used to wait for the call, which waits for the generation to
// stop, which only its coordinator would have asked for: for ever.
func TestServeWorkerEndsWhenItsContextDoesDuringACall(t *testing.T) {
	_, job, dir, _, cancel, done := stuckCall(t)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ServeWorker returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, far beyond any wait
		t.Fatal("ServeWorker still waits for its control call after its context ended")
	}
	again, err := NewWorker(job, WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatalf("a new worker on the directory: %v (ServeWorker did not close its worker)", err)
	}
	again.Close()
}

// TestServeWorkerEndsWhenItsInputDoesDuringACall: a worker process whose
// coordinator dies (its stdin ends: the coordinator was SIGKILLed, or the
// agent lost the coordinator's connection) while a control call waits on
// its generation returns and closes its worker, as it does when its input
// ends between calls. It used to wait for the call for ever, since only
// the dead coordinator could have stopped the generation: the process,
// its port and its directory's lock outlived the run.
func TestServeWorkerEndsWhenItsInputDoesDuringACall(t *testing.T) {
	_, job, dir, coordinator, _, done := stuckCall(t)
	coordinator.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeWorker returned %v, want nil: its input ended", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, far beyond any wait
		t.Fatal("ServeWorker still waits for its control call after its input ended")
	}
	again, err := NewWorker(job, WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatalf("a new worker on the directory: %v (ServeWorker did not close its worker)", err)
	}
	again.Close()
}
