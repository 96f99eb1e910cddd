package engine_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/taskid"
)

// stallingSum is a countSum that counts in copies its Restores: before
// the first recovery, each is the engine copying the state over to the
// checkpoint copy, as the first run at or beyond the next checkpoint's
// time arrives. The main instance with a stall calls it on a run that
// caused a copy, the third or a later one, holding the task (and its
// node's checkpoint call) until stall returns; it fails with stall's
// error, or with none processes the run, and calls stall again on the
// next copy.
type stallingSum struct {
	*countSum
	copies *atomic.Int64
	seen   int64 // copies when this instance last processed
	fired  *atomic.Bool
	stall  func() error
}

func (s *stallingSum) Restore(b []byte) error {
	s.copies.Add(1)
	return s.countSum.Restore(b)
}

func (s *stallingSum) Process(in []engine.Message, out *engine.Emitter) error {
	if s.stall != nil && !out.CheckpointCopy() && !s.fired.Load() {
		n := s.copies.Load()
		copied := n > s.seen
		s.seen = n
		if copied && n >= 3 {
			if err := s.stall(); err != nil {
				return err
			}
		}
	}
	return s.countSum.Process(in, out)
}

// checkpointTimes lists the times of task's checkpoint files in dir.
func checkpointTimes(dir, task string) []int64 {
	ents, _ := os.ReadDir(dir)
	var tss []int64
	for _, e := range ents {
		ts, ok := strings.CutPrefix(e.Name(), task+"@")
		if !ok || !strings.HasSuffix(ts, ".ckpt") {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSuffix(ts, ".ckpt"), 10, 64); err == nil {
			tss = append(tss, n)
		}
	}
	return tss
}

// TestACheckpointSavedOnOneNodeOnlyKeepsTheOlderOneRecoveryMayChoose: the
// coordinator has completed checkpoints c and d and let the logs cut to c,
// the oldest recovery may still choose, so that a corrupt d leaves c
// (package doc: "the stores keep two per task, so that a corrupt newest
// file leaves an older one the logs can replay from"). Checkpoint e is
// then saved by the task of node 0, while the task of node 1 fails before
// it saves e: e never completes, and d is the newest completed
// checkpoint. With d corrupt on node 1, recovery must restore c, which
// both tasks saved. Node 0 used to delete its c on saving e (keeping its
// newest two, d and e), so no checkpoint was common from c on and the run
// ended with ErrCheckpointsLost.
func TestACheckpointSavedOnOneNodeOnlyKeepsTheOlderOneRecoveryMayChoose(t *testing.T) {
	const n = 3000
	dir := filepath.Join(t.TempDir(), "data")
	var job *engine.Job
	place := func(task uint32) int { return job.Placement(2)[taskid.ID{Processor: 1, Index: task}] }
	ckptDir := func(node int) string { return filepath.Join(dir, fmt.Sprintf("node%d", node), "checkpoints") }
	var failed, fired atomic.Bool
	var misses atomic.Int64 // stalls let go: the clock could not reach e
	copies := make([]atomic.Int64, 2)
	var stalled, other atomic.Value
	var c *engine.Coordinator
	stall := func(idx uint32) func() error {
		return func() error {
			// This task (on its node) holds checkpoints c and d; the
			// other task's node saves e > d while this one waits.
			me, them := place(idx), place(1-idx)
			mine := checkpointTimes(ckptDir(me), fmt.Sprintf("task-1.%d", idx))
			d := int64(-1)
			for _, ts := range mine {
				d = max(d, ts)
			}
			stalled.Store(fmt.Sprint(mine))
			// The held run keeps the global clock below it, and below e
			// if it reached e with messages before e too, or came in one
			// delivery with runs before e whose acknowledgement it holds
			// (a slow machine delivers many messages at a time). Then no
			// node saves e while the run is held; once the clock stands
			// still, e is saved at once or never. The run goes on, and
			// the next copy tries again.
			start := time.Now()
			guard := start.Add(time.Minute) // a hang guard
			for {
				theirs := checkpointTimes(ckptDir(them), fmt.Sprintf("task-1.%d", 1-idx))
				other.Store(fmt.Sprint(theirs))
				saved := false
				for _, ts := range theirs {
					saved = saved || ts > d
				}
				if saved {
					break
				}
				now := time.Now()
				if advanced := c.Stats().ClockAdvanced; now.Sub(start) > slow*time.Second && now.Sub(advanced) > slow*time.Second {
					misses.Add(1)
					return nil
				}
				if now.After(guard) {
					return fmt.Errorf("node %d did not save the checkpoint after %d", them, d)
				}
				time.Sleep(time.Millisecond)
			}
			fired.Store(true)
			if _, err := corruptNewestCheckpoint(ckptDir(me), fmt.Sprintf("task-1.%d", idx)); err != nil {
				return err
			}
			return errors.New("injected failure before checkpoint e")
		}
	}
	job = &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &singleSource{n: n}, nil }},
			{Name: "sum", Parallelism: 2, NewTask: func(i int) (engine.Task, error) {
				s := &stallingSum{countSum: &countSum{failAt: n, failed: &failed}, copies: &copies[i], fired: &fired}
				// The task on the source's node does not stall: held, it
				// would hold the source, and the other node would never
				// get to checkpoint e.
				if place(uint32(i)) != job.Placement(2)[taskid.ID{Processor: 0, Index: 0}] {
					s.stall = stall(uint32(i))
				}
				return s, nil
			}},
		},
		Edges: []engine.Edge{{From: "src", To: "sum", Partitioner: engine.RoundRobin}},
	}
	if place(0) == place(1) {
		t.Fatal("both summing tasks are on one node")
	}
	var err error
	c, err = engine.NewCoordinator(job, engine.Config{Dir: dir, Nodes: 2, NoSync: true,
		InitialInterval: 50, CheckpointEvery: 10 * time.Millisecond,
		Restart: engine.RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*slow*time.Second)
	defer cancel()
	res, err := c.Run(ctx)
	if !fired.Load() {
		t.Fatalf("no stall saw the other node save checkpoint e (%d let go: the clock could not reach e while they held their runs), and the failure was never injected (run: %v): the test proves nothing",
			misses.Load(), err)
	}
	if n := misses.Load(); n > 0 {
		t.Logf("%d stalls let go before one saw the other node save checkpoint e: the clock could not reach e while they held their runs", n)
	}
	if err != nil {
		t.Fatalf("the stalled task held checkpoints %v, the other %v; the run ended with %v", stalled.Load(), other.Load(), err)
	}
	var got countSum
	for _, id := range []string{"1.0", "1.1"} {
		var part countSum
		if err := part.Restore(res.Results[id]); err != nil {
			t.Fatal(err)
		}
		got.count += part.count
		got.sum += part.sum
	}
	if got.count != n || got.sum != n*(n-1)/2 {
		t.Errorf("count %d sum %d, want count %d sum %d", got.count, got.sum, n, n*(n-1)/2)
	}
	if res.Recoveries != 1 {
		t.Errorf("recoveries %d, want 1", res.Recoveries)
	}
	// Once committed, a task keeps the two checkpoints recovery may choose.
	for idx := range uint32(2) {
		if tss := checkpointTimes(ckptDir(place(idx)), fmt.Sprintf("task-1.%d", idx)); len(tss) > 2 {
			t.Errorf("task 1.%d holds checkpoints %v after the run, want the last two", idx, tss)
		}
	}
}
