package engine_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// corruptingSum is a countSum that, just before its injected failure,
// damages the newest checkpoint file of its task.
type corruptingSum struct {
	*countSum
	corrupt func() error
}

func (c *corruptingSum) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		if m.Ts == int64(c.failAt) && !c.failed.Load() {
			if err := c.corrupt(); err != nil {
				return err
			}
		}
	}
	return c.countSum.Process(in, out)
}

// corruptNewestCheckpoint flips the last byte of the newest checkpoint
// file of task under dir and returns its time.
func corruptNewestCheckpoint(dir, task string) (int64, error) {
	newest, path := int64(-1), ""
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ts, ok := strings.CutPrefix(d.Name(), task+"@")
		if !ok || !strings.HasSuffix(ts, ".ckpt") {
			return nil
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(ts, ".ckpt"), 10, 64)
		if err == nil && n > newest {
			newest, path = n, p
		}
		return err
	})
	if err != nil || path == "" {
		return 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	b[len(b)-1] ^= 0xff
	return newest, os.WriteFile(path, b, 0o644)
}

// TestACorruptNewestCheckpointFallsBackToTheOlderOneTheLogsStillHold: the
// coordinator lets the sources cut their logs only up to the oldest
// checkpoint recovery may still choose, so that when a task's newest
// checkpoint file turns out corrupt, recovery restores the older one and
// replays from it, and the job still counts every record once. A commit
// of the newest checkpoint instead would leave no checkpoint the logs can
// replay from, and the run would end with ErrCheckpointsLost.
func TestACorruptNewestCheckpointFallsBackToTheOlderOneTheLogsStillHold(t *testing.T) {
	const n = 3000
	dir := filepath.Join(t.TempDir(), "data")
	var failed atomic.Bool
	var corrupted atomic.Int64
	corrupted.Store(-1)
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &singleSource{n: n}, nil }},
			{Name: "sum", Parallelism: 1, NewTask: func(int) (engine.Task, error) {
				return &corruptingSum{countSum: &countSum{failAt: n / 2, failed: &failed}, corrupt: func() error {
					ts, err := corruptNewestCheckpoint(dir, "task-1.0")
					corrupted.Store(ts)
					return err
				}}, nil
			}},
		},
		Edges: []engine.Edge{{From: "src", To: "sum", Partitioner: engine.Hash}},
	}
	// The source reads only below the horizon, which each checkpoint
	// raises by at most twice the last step: several checkpoints have
	// completed before it reaches the failure.
	res, err := runQuickRestarts(t, job, dir, 50, time.Millisecond)
	if err != nil {
		t.Fatalf("run after checkpoint %d was corrupted: %v", corrupted.Load(), err)
	}
	if corrupted.Load() <= 0 {
		t.Fatalf("no checkpoint was corrupted (newest %d)", corrupted.Load())
	}
	wantCountSum(t, res, n)
	if res.Recoveries != 1 {
		t.Errorf("recoveries %d, want 1", res.Recoveries)
	}
}
