package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/checkpoint"
	"github.com/sluicehq/sluice/engine/journal"
)

// TestAResumedJobRestoresOnlyACheckpointEveryTaskCanLoad runs a job with
// two stateful tasks to its end and cuts its journal's last checkpoint
// (and the commit after it): what a coordinator killed after every
// worker saved a checkpoint, before it journaled it, leaves. Every task
// then holds the journal's last checkpoint P and the newer N. One task's
// copy of P is corrupted; the newest checkpoint each node holds is still
// N, at or after P, which the coordinator took for "every node holds P".
//
// When the other task holds N, the job must resume from N, which every
// task can load, without a failure, and say so in Result.Resumed; it used
// to restore P, fail the
// task's start (after the start had deleted N), and end with
// ErrCheckpointsLost. When the other task's N is corrupt too, no
// checkpoint is common, and the job must end with ErrCheckpointsLost
// before it journals a generation, whose start discards checkpoints; it
// used to journal and start one, deleting the task's good N, and fail a
// recovery before it said so.
func TestAResumedJobRestoresOnlyACheckpointEveryTaskCanLoad(t *testing.T) {
	for _, c := range []struct {
		name  string
		nodes int
		// alsoNewer corrupts task 1.1's newer checkpoint too.
		alsoNewer bool
	}{
		{"one node, the newer checkpoint is common", 1, false},
		{"two nodes, the newer checkpoint is common", 2, false},
		{"two nodes, no checkpoint is common", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 200000
			dir := filepath.Join(t.TempDir(), "data")
			job := sumJob(n)
			// The step between checkpoints at most doubles from 5000, so
			// the first run completes at least four before 200000.
			cfg := engine.Config{Dir: dir, Nodes: c.nodes, NoSync: true, InitialInterval: 5000, CheckpointEvery: 5 * time.Millisecond,
				LogSegmentBytes: 4 << 10, JobConfig: []byte("sum")}
			ctx, cancel := context.WithTimeout(context.Background(), slow*60*time.Second) // a hang guard
			defer cancel()
			c1, err := engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c1.Run(ctx)
			if err != nil {
				t.Fatalf("the first run: %v", err)
			}
			checkSummedOver(t, res, n)

			jpath := filepath.Join(dir, engine.JournalFile)
			full, err := journal.Read(jpath)
			if err != nil {
				t.Fatal(err)
			}
			cutLastCheckpoint(t, jpath)
			stopped, err := journal.Read(jpath)
			if err != nil {
				t.Fatal(err)
			}
			older, newer := stopped.Checkpoint, full.Checkpoint
			if !stopped.HasCheckpoint || stopped.Checkpoints != full.Checkpoints-1 || older >= newer {
				t.Fatalf("the cut journal holds %d checkpoints, the last %d (%v); want %d, before %d",
					stopped.Checkpoints, older, stopped.HasCheckpoint, full.Checkpoints-1, newer)
			}
			file := func(task string, ts int64) string {
				t.Helper()
				files, err := filepath.Glob(filepath.Join(dir, "node*", "checkpoints", task+"@*.ckpt"))
				if err != nil {
					t.Fatal(err)
				}
				var tss []int64
				for _, f := range files {
					tss = append(tss, ckptTs(f))
				}
				slices.Sort(tss)
				if !slices.Equal(tss, []int64{older, newer}) {
					t.Fatalf("%s holds checkpoints %v, want %d and %d", task, tss, older, newer)
				}
				return filepath.Join(filepath.Dir(files[0]), task+"@"+strconv.FormatInt(ts, 10)+".ckpt")
			}
			corrupt := func(path string) {
				t.Helper()
				if err := os.WriteFile(path, []byte("not a checkpoint"), 0o644); err != nil {
					t.Fatal(err)
				}
				s, err := checkpoint.Open(filepath.Dir(path))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Load(filepath.Base(path)[:len("task-1.0")], ckptTs(path)); !errors.Is(err, checkpoint.ErrCorrupt) {
					t.Fatalf("loading the corrupted %s: %v, want ErrCorrupt: the fault did not happen", path, err)
				}
			}
			corrupt(file("task-1.0", older))
			if c.alsoNewer {
				corrupt(file("task-1.1", newer))
			}
			before := checkpointFiles(t, filepath.Join(dir, "node*", "checkpoints", "task-*.ckpt"))

			c2, err := engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err = c2.Run(ctx)
			if c.alsoNewer {
				if !errors.Is(err, engine.ErrCheckpointsLost) {
					t.Fatalf("the resumed run ended with %v, want ErrCheckpointsLost", err)
				}
				t.Log(err)
				if after, err := journal.Read(jpath); err != nil || after.Generations != stopped.Generations {
					t.Errorf("the journal went from %d generations to %d (%v): want no new generation", stopped.Generations, after.Generations, err)
				}
				if after := checkpointFiles(t, filepath.Join(dir, "node*", "checkpoints", "task-*.ckpt")); !maps.Equal(after, before) {
					t.Errorf("the checkpoint files changed: %d before, %d after", len(before), len(after))
				}
				return
			}
			if err != nil {
				t.Fatalf("the resumed run ended with %v; every task holds checkpoint %d intact", err, newer)
			}
			checkSummedOver(t, res, n)
			if res.Recoveries != 0 {
				t.Errorf("%d recoveries, want none: the restore point must be one every task can load", res.Recoveries)
			}
			if r := res.Resumed; r == nil || !r.HasCheckpoint || r.Checkpoint != newer {
				t.Errorf("resumed %+v, want from checkpoint %d", r, newer)
			}
		})
	}
}

// cutLastCheckpoint truncates the journal at path before its last
// checkpoint record, dropping it and the records after it.
func cutLastCheckpoint(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const magic, header, kindCheckpoint = 8, 9, 3 // journal/format.go
	cut := -1
	for off := magic; off < len(b); {
		if off+header > len(b) {
			t.Fatalf("journal %s: a torn record at %d", path, off)
		}
		if b[off+8] == kindCheckpoint {
			cut = off
		}
		off += header + int(binary.LittleEndian.Uint32(b[off+4:]))
	}
	if cut < 0 {
		t.Fatalf("journal %s holds no checkpoint", path)
	}
	if err := os.Truncate(path, int64(cut)); err != nil {
		t.Fatal(err)
	}
}

// checkSummedOver checks that the sink tasks 1.0 and 1.1 of a finished
// run counted n messages in all, summing to n(n-1)/2.
func checkSummedOver(t *testing.T, res *engine.Result, n uint64) {
	t.Helper()
	var got, sum uint64
	for _, id := range []string{"1.0", "1.1"} {
		b := res.Results[id]
		if len(b) != 16 {
			t.Fatalf("sink %s result %x", id, b)
		}
		got += binary.LittleEndian.Uint64(b)
		sum += binary.LittleEndian.Uint64(b[8:])
	}
	if got != n || sum != n*(n-1)/2 {
		t.Errorf("summed %d messages to %d, want %d to %d", got, sum, n, n*(n-1)/2)
	}
}

// TestAStartThatCannotLoadItsRestorePointKeepsTheNewerCheckpoints starts
// a worker whose two stateful tasks hold checkpoints at 100 and 200, to
// restore 100, which the second task cannot load (its copy went bad after
// the coordinator checked it). The start fails, and every task's 200 must
// still be there, for the coordinator to restore next; Start used to
// discard each task's newer checkpoints before it loaded its restore
// point. A start that succeeds still discards them.
func TestAStartThatCannotLoadItsRestorePointKeepsTheNewerCheckpoints(t *testing.T) {
	dir := t.TempDir()
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &jobs.GenSource{Size: 24, Limit: 1000}, nil
			}},
			{Name: "sum", Parallelism: 2, NewTask: func(int) (engine.Task, error) { return &crashAfter{limit: 1001}, nil }},
		},
		Edges: []engine.Edge{{From: "gen", To: "sum", Partitioner: engine.RoundRobin}},
	}
	store, err := checkpoint.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	state := func(n uint64) []byte {
		b, _ := (&crashAfter{n: n, sum: n * (n - 1) / 2}).Snapshot(nil)
		return b
	}
	tasks := []string{"task-1.0", "task-1.1"}
	for _, task := range tasks {
		for _, ts := range []int64{100, 200} {
			if err := store.Save(task, ts, state(uint64(ts/2))); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad := filepath.Join(dir, "checkpoints", "task-1.1@100.ckpt")
	if err := os.WriteFile(bad, []byte("not a checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}

	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	start := engine.StartCmd{Gen: 1, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0, 0},
		Restore: 100, HasRestore: true, Target: 300, Horizon: 400}
	if err := w.Start(start); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Fatalf("the start ended with %v, want task-1.1's corrupt checkpoint: the fault did not happen", err)
	}
	for _, task := range tasks {
		if _, err := store.Load(task, 200); err != nil {
			t.Errorf("after the failed start, %s's newer checkpoint: %v", task, err)
		}
	}

	if err := store.Save("task-1.1", 100, state(50)); err != nil { // mended
		t.Fatal(err)
	}
	start.Gen = 2
	if err := w.Start(start); err != nil {
		t.Fatalf("the start with every restore point intact: %v", err)
	}
	w.Stop()
	for _, task := range tasks {
		if tss, err := store.List(task); err != nil || !slices.Equal(tss, []int64{100}) {
			t.Errorf("after a start from 100, %s holds checkpoints %v (%v), want only 100", task, tss, err)
		}
	}
}
