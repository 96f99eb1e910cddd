package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/engine/store"
	"github.com/sluicehq/sluice/taskid"
)

// quietSource has no input yet: Read finds nothing.
type quietSource struct{}

func (quietSource) Start(int64) error { return nil }
func (quietSource) Read(dst []Record, _ int64) ([]Record, int64, error) {
	return dst, 0, nil
}

// dropTask consumes its input.
type dropTask struct{}

func (dropTask) Process([]Message, *Emitter) error { return nil }

// srcSinkJob is the job of one source, made by newSource, whose records go
// round robin to one sink that drops them.
func srcSinkJob(newSource func(int) (Source, error)) *Job {
	return &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: newSource},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
	}
}

// TestASourceLogThatFailsToCloseKeepsTheWorkerFromStartingAgain: closing
// a source log at the end of a generation fsyncs it; when that fails, its
// records may not be on disk, although the next generation would replay
// them from the page cache and a checkpoint would commit over them. The
// next Start, and every one after it, must fail with the error.
func TestASourceLogThatFailsToCloseKeepsTheWorkerFromStartingAgain(t *testing.T) {
	job := srcSinkJob(func(int) (Source, error) { return quietSource{}, nil })
	w, err := NewWorker(job, WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	failed := 0
	w.closeLog = func(l *store.Log) error {
		if err := l.Close(); err != nil {
			return err
		}
		if failed++; failed > 1 {
			return nil // a reopened log's fsync no longer reports the error
		}
		return fmt.Errorf("store: fsync: %w", syscall.EIO)
	}
	start := func(gen uint64) error {
		return w.Start(StartCmd{Gen: gen, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}})
	}
	if err := start(1); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(1); err != nil {
		t.Fatal(err)
	}
	// Start stops generation 1, closing its log: the close fails.
	if err := start(2); !errors.Is(err, syscall.EIO) || !errors.Is(err, ErrSourceLogLost) || !strings.Contains(err.Error(), "src") {
		t.Fatalf("Start after the source log failed to close returned %v; want ErrSourceLogLost naming the source, wrapping EIO", err)
	}
	if r := w.Do(Request{ID: 9, Op: "start", Start: &StartCmd{Gen: 3, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}}}); !r.LogLost || r.Err == "" {
		t.Fatalf("the answer to a start request is %+v; want an error marked log_lost for the coordinator", r)
	}
	if _, err := w.Clock(2); err == nil {
		t.Fatal("generation 2 runs although the source log of generation 1 failed to close")
	}
	w.Stop()
	if err := start(4); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a later Start returned %v; want the worker to keep refusing with EIO", err)
	}
}

// TestAStartThatFailsLeavesNoChannelOpen: senders are opened for a task's
// outputs before its constructor runs and before the senders of its later
// targets are opened. When either fails, Start fails, and the senders
// already opened must be closed: left open they stay in the node's peer
// for the life of the process and are opened again on every reconnect.
func TestAStartThatFailsLeavesNoChannelOpen(t *testing.T) {
	src := Proc{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return quietSource{}, nil }}
	sink := Proc{Name: "sink", Parallelism: 2, NewTask: func(int) (Task, error) { return dropTask{}, nil }}
	tests := []struct {
		name      string
		job       *Job
		addrs     func(self string) []string
		placement []int
		want      string
	}{{
		name: "a task whose constructor fails after its sender to the sink was opened",
		job: &Job{
			Procs: []Proc{src,
				{Name: "mid", Parallelism: 1, NewTask: func(int) (Task, error) { return nil, errors.New("mid: no state") }},
				sink},
			Edges: []Edge{{From: "src", To: "mid", Partitioner: RoundRobin}, {From: "mid", To: "sink", Partitioner: RoundRobin}},
		},
		addrs:     func(self string) []string { return []string{self} },
		placement: []int{0, 0, 0, 0},
		want:      "mid: no state",
	}, {
		name: "a source whose second target's node has an address without a port",
		job: &Job{
			Procs: []Proc{src, sink},
			Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
		},
		addrs:     func(self string) []string { return []string{self, "nowhere"} },
		placement: []int{0, 0, 1},
		want:      "nowhere",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWorker(tt.job, WorkerConfig{Dir: t.TempDir(), NoSync: true, NoChain: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			err = w.Start(StartCmd{Gen: 1, Node: 0, Addrs: tt.addrs(w.Addr()), Placement: tt.placement})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Start returned %v, want an error saying %q", err, tt.want)
			}
			for _, p := range w.node.Stats().Peers {
				if p.Channels != 0 {
					t.Errorf("after the failed Start the node has %d channels open to %s, want none", p.Channels, p.Addr)
				}
			}
			if cs := w.node.ChannelStats(); len(cs) != 0 {
				t.Errorf("after the failed Start the node has channels open: %+v", cs)
			}
		})
	}
}

// TestAWorkerRefusesToStartOnALogThatFailedAnFsyncInAnEarlierProcess: a
// worker whose source log failed an fsync, and whose process died before
// its coordinator heard of it, leaves the log's record of the failure
// (store.SyncFailedFile) behind. The worker that takes over the directory
// must refuse every generation with ErrSourceLogLost naming the failure,
// as the one that saw it would have, so that the coordinator ends the run
// instead of replaying a log that may miss records. It used to open the
// log and go on.
func TestAWorkerRefusesToStartOnALogThatFailedAnFsyncInAnEarlierProcess(t *testing.T) {
	job := srcSinkJob(func(int) (Source, error) { return quietSource{}, nil })
	dir := t.TempDir()
	w, err := NewWorker(job, WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	start := func(w *Worker, gen uint64) error {
		return w.Start(StartCmd{Gen: gen, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}})
	}
	if err := start(w, 1); err != nil {
		t.Fatal(err)
	}
	// What the log leaves when its fsync fails, before the process dies.
	marker := filepath.Join(w.logDir(taskid.ID{Processor: 0, Index: 0}), store.SyncFailedFile)
	if err := os.WriteFile(marker, []byte("store: fsync: "+syscall.EIO.Error()), 0o644); err != nil {
		t.Fatal(err)
	}
	w.Close()
	again, err := NewWorker(job, WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := start(again, 2); !errors.Is(err, ErrSourceLogLost) || !strings.Contains(err.Error(), syscall.EIO.Error()) || !strings.Contains(err.Error(), `"src"`) {
		t.Fatalf("Start on the directory of a log whose fsync failed returned %v; want ErrSourceLogLost naming the source and the failure", err)
	}
	if r := again.Do(Request{ID: 9, Op: "start", Start: &StartCmd{Gen: 3, Node: 0, Addrs: []string{again.Addr()}, Placement: []int{0, 0}}}); !r.LogLost {
		t.Fatalf("the answer to a start request is %+v; want an error marked log_lost for the coordinator", r)
	}
	if _, err := again.Clock(3); err == nil {
		t.Fatal("a generation runs on a source log whose fsync failed")
	}
}

// TestASourceLogThatFailsToSyncAtACheckpointIsALostLog: a checkpoint
// fsyncs the source logs; when that fails, the log may have lost records
// (it refuses every later Append and Sync, and every later Open of its
// directory), so no recovery can replay it exactly once. The checkpoint
// must fail with ErrSourceLogLost, marked for the coordinator, which then
// ends the run at once, and the worker must start no generation after it.
// It used to return the bare fsync error: the coordinator took it for a
// task failure and recovered, and with a restart policy that was used up,
// or NoRestarts, the run ended with ErrRestartsExhausted instead.
func TestASourceLogThatFailsToSyncAtACheckpointIsALostLog(t *testing.T) {
	job := srcSinkJob(func(int) (Source, error) { return quietSource{}, nil })
	w, err := NewWorker(job, WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.syncLog = func(*store.Log) error { return fmt.Errorf("store: fsync: %w", syscall.EIO) }
	start := func(gen uint64) error {
		return w.Start(StartCmd{Gen: gen, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}, Target: 10, Horizon: 20})
	}
	if err := start(1); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(1); err != nil {
		t.Fatal(err)
	}
	r := w.Do(Request{ID: 7, Op: "checkpoint", Gen: 1, Persist: true, Ts: 10, Next: 20})
	if r.Err == "" || !r.LogLost || !strings.Contains(r.Err, syscall.EIO.Error()) || !strings.Contains(r.Err, `"src"`) {
		t.Fatalf("the answer to a checkpoint whose log sync failed is %+v; want an error naming the source and EIO, marked log_lost", r)
	}
	if err := start(2); !errors.Is(err, ErrSourceLogLost) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Start after the source log failed to sync returned %v; want ErrSourceLogLost wrapping EIO", err)
	}
}

// oneRecordSource reads one record, then finds nothing more.
type oneRecordSource struct{ read bool }

func (*oneRecordSource) Start(int64) error { return nil }
func (s *oneRecordSource) Read(dst []Record, _ int64) ([]Record, int64, error) {
	if s.read {
		return dst, 1, nil
	}
	s.read = true
	return append(dst, Record{Ts: 0, Payload: []byte("r")}), 1, nil
}

// TestASourceWhoseLogAppendFailsAfterAFailedFsyncReportsALostLog: once an
// fsync of a source log has failed (a background one that Append
// started, or the one that seals a segment), the log refuses every later
// Append with an error wrapping store.ErrSyncFailed, and every later Open
// of its directory: no recovery can replay it. The source's failure must
// wrap ErrSourceLogLost, name the source, and reach the coordinator as an
// event marked log_lost, also as a worker process's JSON line. It used to
// be a plain failure event, which the coordinator recovered from.
func TestASourceWhoseLogAppendFailsAfterAFailedFsyncReportsALostLog(t *testing.T) {
	job := srcSinkJob(func(int) (Source, error) { return &oneRecordSource{}, nil })
	w, err := NewWorker(job, WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.appendLog = func(*store.Log, []Record) error {
		return fmt.Errorf("%w: store: background fsync: %w", store.ErrSyncFailed, syscall.EIO)
	}
	if err := w.Start(StartCmd{Gen: 1, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}, Target: 10, Horizon: 20}); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(1); err != nil {
		t.Fatal(err)
	}
	ev := <-w.Events()
	if !ev.LogLost || ev.Gen != 1 || ev.Task != "0.0" || !strings.Contains(ev.Err, ErrSourceLogLost.Error()) ||
		!strings.Contains(ev.Err, `"src"`) || !strings.Contains(ev.Err, syscall.EIO.Error()) {
		t.Fatalf("the source's failure is reported as %+v; want an event of task 0.0 in generation 1 marked log_lost, naming the source and EIO", ev)
	}
	if err := ev.err(); !errors.Is(err, ErrSourceLogLost) {
		t.Fatalf("the coordinator reads the event as %v, want an error wrapping ErrSourceLogLost", err)
	}
	b, err := json.Marshal(Response{Event: &ev})
	if err != nil {
		t.Fatal(err)
	}
	var r Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if r.Event == nil || *r.Event != ev {
		t.Fatalf("the event's line %s reads back as %+v, want %+v", b, r.Event, ev)
	}
}
