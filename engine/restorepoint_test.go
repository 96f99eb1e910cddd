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
			job := &engine.Job{
				Procs: []engine.Proc{
					{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
						return &jobs.GenSource{Size: 24, Limit: n}, nil
					}},
					{Name: "sum", Parallelism: 2, NewTask: func(int) (engine.Task, error) { return &crashAfter{limit: n + 1}, nil }},
				},
				Edges: []engine.Edge{{From: "gen", To: "sum", Partitioner: engine.RoundRobin}},
			}
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
