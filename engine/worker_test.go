package engine

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/sluicehq/sluice/engine/store"
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

// TestASourceLogThatFailsToCloseKeepsTheWorkerFromStartingAgain: closing
// a source log at the end of a generation fsyncs it; when that fails, its
// records may not be on disk, although the next generation would replay
// them from the page cache and a checkpoint would commit over them. The
// next Start, and every one after it, must fail with the error.
func TestASourceLogThatFailsToCloseKeepsTheWorkerFromStartingAgain(t *testing.T) {
	job := &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return quietSource{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
	}
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
	if err := start(2); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "src") {
		t.Fatalf("Start after the source log failed to close returned %v; want an error naming the source, wrapping EIO", err)
	}
	if _, err := w.Clock(2); err == nil {
		t.Fatal("generation 2 runs although the source log of generation 1 failed to close")
	}
	w.Stop()
	if err := start(3); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a later Start returned %v; want the worker to keep refusing with EIO", err)
	}
}
