package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
