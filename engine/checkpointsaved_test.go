package engine

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/engine/checkpoint"
)

// fixedState is a stateful task whose state never changes.
type fixedState struct{ dropTask }

func (fixedState) Snapshot(dst []byte) ([]byte, error) { return append(dst, "fixed state"...), nil }
func (fixedState) Restore([]byte) error                { return nil }

// TestACheckpointIsOnDiskWhenTheWorkerAnswersIt: the coordinator journals
// a checkpoint, and lets the source logs be cut below it, once every
// worker answered the checkpoint call, so the answer must come only after
// each task's checkpoint file is durably saved. The worker fsyncs here, as
// in production, so a save still running when the answer comes is caught
// in the act.
func TestACheckpointIsOnDiskWhenTheWorkerAnswersIt(t *testing.T) {
	job := &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return quietSource{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return fixedState{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
	}
	dir := t.TempDir()
	w, err := NewWorker(job, WorkerConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Start(StartCmd{Gen: 1, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0}, Target: 10, Horizon: 20}); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(1); err != nil {
		t.Fatal(err)
	}
	// A second store on the directory reads what is on disk.
	s, err := checkpoint.OpenConfig(filepath.Join(dir, "checkpoints"), checkpoint.Config{Keep: 2, Logger: w.log, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []int64{10, 20, 30} {
		if err := w.Checkpoint(1, true, tc, tc+10); err != nil {
			t.Fatal(err)
		}
		st, err := s.Load("task-1.0", tc)
		if err != nil || !bytes.Equal(st, []byte("fixed state")) {
			t.Fatalf("right after the worker answered the checkpoint at %d, its file holds %q, %v; want the task's state", tc, st, err)
		}
	}
}
