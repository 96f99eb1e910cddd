package engine_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/journal"
)

// TestAStoppedCoordinatorResumesFromItsLastJournaledCheckpoint stops a
// coordinator once a checkpoint is journaled, before the job ends, and
// runs a new one on the same directory: it resumes from that checkpoint
// or a later one, with a higher generation, and the counts equal the
// reference. (cmd/loadgen's TestARestartedLoadgenResumesWordCount does the
// same with a SIGKILLed process.)
func TestAStoppedCoordinatorResumesFromItsLastJournaledCheckpoint(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(map[int]string{1: "one node", 3: "three nodes"}[nodes], func(t *testing.T) {
			input := writeText(t, 300000/slow, 7)
			dir := filepath.Join(t.TempDir(), "data")
			cfg := engine.Config{Dir: dir, Nodes: nodes, NoSync: true, InitialInterval: 200, CheckpointEvery: 20 * time.Millisecond,
				JobConfig: []byte("wordcount " + input)}
			job := jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input, Middle: 2, Last: 2})

			c, err := engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := c.Run(ctx); done <- err }()
			var before journal.State
			for before.Checkpoints < 2 {
				select {
				case err := <-done:
					t.Fatalf("the job ended (%v) before two checkpoints were journaled: make the input larger", err)
				case <-time.After(time.Millisecond):
				}
				st, err := journal.Read(filepath.Join(dir, engine.JournalFile))
				if err != nil && !errors.Is(err, os.ErrNotExist) { // Run has not created it yet
					cancel()
					<-done
					t.Fatal(err)
				}
				before = st
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the first coordinator ended with %v, want it stopped mid-job (context.Canceled)", err)
			}
			stopped, err := journal.Read(filepath.Join(dir, engine.JournalFile))
			if err != nil {
				t.Fatal(err)
			}

			c, err = engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), slow*30*time.Second)
			defer rcancel()
			res, err := c.Run(rctx)
			if err != nil {
				t.Fatal(err)
			}
			got, err := jobs.MergeCounts(res.Results)
			if err != nil {
				t.Fatal(err)
			}
			sameCounts(t, got, reference(t, input))
			r := res.Resumed
			switch {
			case r == nil:
				t.Fatal("the second coordinator did not resume the journal")
			case !r.HasCheckpoint || r.Checkpoint != stopped.Checkpoint || r.Checkpoint < before.Checkpoint:
				t.Errorf("resumed from checkpoint %d (%v), want the journal's last, %d (at least %d)",
					r.Checkpoint, r.HasCheckpoint, stopped.Checkpoint, before.Checkpoint)
			case r.Gen <= stopped.Gen:
				t.Errorf("resumed with generation %d, want above the journal's %d", r.Gen, stopped.Gen)
			}
			t.Logf("stopped after %d checkpoints (last at %d), generation %d; resumed: %+v, %d more checkpoints",
				stopped.Checkpoints, stopped.Checkpoint, stopped.Gen, *r, res.Checkpoints)
		})
	}
}

func TestAJournalOfAnotherJobIsRefusedUnlessStartingOver(t *testing.T) {
	input := writeText(t, 2000, 8)
	dir := filepath.Join(t.TempDir(), "data")
	run := func(cfg engine.Config, middle int) (*engine.Result, error) {
		t.Helper()
		cfg.Dir, cfg.NoSync, cfg.InitialInterval = dir, true, 100
		c, err := engine.NewCoordinator(jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input, Middle: middle, Last: 2}), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return c.Run(ctx)
	}
	if res, err := run(engine.Config{JobConfig: []byte("a")}, 2); err != nil || res.Resumed != nil {
		t.Fatalf("a first run: resumed %+v, %v", res.Resumed, err)
	}
	var oe *engine.OtherJobError
	for _, c := range []struct {
		name   string
		cfg    engine.Config
		middle int
		what   string
	}{
		{"another config", engine.Config{JobConfig: []byte("b")}, 2, "config"},
		{"another parallelism", engine.Config{JobConfig: []byte("a")}, 3, "shape"},
		{"another node count", engine.Config{JobConfig: []byte("a"), Nodes: 2}, 2, "nodes"},
	} {
		_, err := run(c.cfg, c.middle)
		if !errors.As(err, &oe) || !errors.Is(err, engine.ErrOtherJob) || oe.What != c.what {
			t.Errorf("%s: got %v, want an OtherJobError about the %s", c.name, err, c.what)
		}
	}
	// The same job again resumes (it had finished: it finishes again from
	// its last checkpoint, with the same counts).
	res, err := run(engine.Config{JobConfig: []byte("a")}, 2)
	if err != nil || res.Resumed == nil {
		t.Fatalf("the same job again: resumed %+v, %v", res.Resumed, err)
	}
	got, err := jobs.MergeCounts(res.Results)
	if err != nil {
		t.Fatal(err)
	}
	sameCounts(t, got, reference(t, input))
	res, err = run(engine.Config{JobConfig: []byte("b"), StartOver: true}, 3)
	if err != nil || res.Resumed != nil {
		t.Fatalf("starting over: resumed %+v, %v", res.Resumed, err)
	}
	got, err = jobs.MergeCounts(res.Results)
	if err != nil {
		t.Fatal(err)
	}
	sameCounts(t, got, reference(t, input))
}

// TestAResumedJobWhoseCheckpointIsGoneStopsBeforeDiscardingAnything runs a
// job with two stateful tasks until commits have let its source delete log
// segments, stops the coordinator, and removes (or corrupts) one task's
// checkpoint files. Its successor can resume from no checkpoint the logs
// reach back to: it must end with ErrCheckpointsLost, naming that task,
// before it journals a generation, and leave the other task's checkpoints
// as they were. It used to know nothing of the journaled commits, start
// the job over from the remains of the logs, and delete every checkpoint.
func TestAResumedJobWhoseCheckpointIsGoneStopsBeforeDiscardingAnything(t *testing.T) {
	for _, c := range []struct {
		name string
		harm func(path string) error
	}{
		{"removed", os.Remove},
		{"corrupted", func(path string) error { return os.WriteFile(path, []byte("not a checkpoint"), 0o644) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 400000
			dir := filepath.Join(t.TempDir(), "data")
			job := sumJob(n)
			cfg := engine.Config{Dir: dir, NoSync: true, InitialInterval: 5000, CheckpointEvery: 5 * time.Millisecond,
				LogSegmentBytes: 4 << 10, JobConfig: []byte("sum")}
			c1, err := engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := c1.Run(ctx); done <- err }()
			jpath := filepath.Join(dir, engine.JournalFile)
			for {
				// Three checkpoints: the commits after the second and third
				// let the source delete records below the first.
				if st, err := journal.Read(jpath); err == nil && st.Checkpoints >= 3 {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("the job ended (%v) before three checkpoints were journaled: make the input larger", err)
				case <-time.After(time.Millisecond):
				}
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the first coordinator ended with %v, want it stopped mid-job (context.Canceled)", err)
			}
			stopped, err := journal.Read(jpath)
			if err != nil {
				t.Fatal(err)
			}

			ckpts := filepath.Join(dir, "node0", "checkpoints")
			harmed, err := filepath.Glob(filepath.Join(ckpts, "task-1.0@*.ckpt"))
			if err != nil || len(harmed) == 0 {
				t.Fatalf("task 1.0 has no checkpoint files to harm (%v)", err)
			}
			for _, f := range harmed {
				if err := c.harm(f); err != nil {
					t.Fatal(err)
				}
			}
			others := checkpointFiles(t, filepath.Join(ckpts, "task-1.1@*.ckpt"))
			if len(others) == 0 {
				t.Fatal("task 1.1 has no checkpoint files")
			}

			c2, err := engine.NewCoordinator(job, cfg)
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithTimeout(context.Background(), slow*60*time.Second) // a hang guard
			defer rcancel()
			_, err = c2.Run(rctx)
			if !errors.Is(err, engine.ErrCheckpointsLost) {
				t.Fatalf("the resumed run ended with %v, want ErrCheckpointsLost", err)
			}
			if !strings.Contains(err.Error(), "task-1.0 on node 0") {
				t.Errorf("the error does not name task-1.0 on node 0: %v", err)
			}
			t.Log(err)
			if after, err := journal.Read(jpath); err != nil || after.Gen != stopped.Gen || after.Generations != stopped.Generations {
				t.Errorf("the journal went from generation %d (%d journaled) to %d (%d), %v: want no new generation",
					stopped.Gen, stopped.Generations, after.Gen, after.Generations, err)
			}
			if after := checkpointFiles(t, filepath.Join(ckpts, "task-1.1@*.ckpt")); !maps.Equal(after, others) {
				t.Errorf("task 1.1's checkpoint files changed: %d before, %d after", len(others), len(after))
			}
		})
	}
}

// checkpointFiles maps the files that pattern matches to their contents.
func checkpointFiles(t *testing.T, pattern string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(f)] = string(b)
	}
	return m
}

// sumJob is a source of n generated records and two stateful tasks that
// sum them (crashAfter, which never crashes with a limit above n), the
// records dealt round robin.
func sumJob(n int) *engine.Job {
	return &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &jobs.GenSource{Size: 24, Limit: int64(n)}, nil
			}},
			{Name: "sum", Parallelism: 2, NewTask: func(int) (engine.Task, error) { return &crashAfter{limit: n + 1}, nil }},
		},
		Edges: []engine.Edge{{From: "gen", To: "sum", Partitioner: engine.RoundRobin}},
	}
}
