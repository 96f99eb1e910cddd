package engine_test

import (
	"encoding/binary"
	"io"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/clock"
)

// stoppingSource emits records 0..n-1 at timestamps 0..n-1, up to 8 per
// Read, each payload the record's number. While stopAt is above 0 it reads
// nothing at or beyond it (its low stays there). A Start at gateAt, the
// first in the test, sends gateAt on started and waits for release before
// it returns.
type stoppingSource struct {
	n, next, gateAt int64
	stopAt          *atomic.Int64
	gated           *atomic.Bool
	started         chan<- int64
	release         <-chan struct{}
}

func (s *stoppingSource) Start(next int64) error {
	s.next = max(next, 0)
	if next == s.gateAt && s.gated.CompareAndSwap(false, true) {
		s.started <- next
		<-s.release
	}
	return nil
}

func (s *stoppingSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	end := min(s.n, limit, s.next+8)
	if stop := s.stopAt.Load(); stop > 0 {
		end = min(end, stop)
	}
	for ; s.next < end; s.next++ {
		dst = append(dst, engine.Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
	}
	if s.next >= s.n {
		return dst, math.MaxInt64, io.EOF
	}
	return dst, s.next, nil
}

// TestAReplayingSourceReportsTheTimeOfItsNextRecord: after a recovery a
// source replays its log, and once the last record replayed, at last, is
// handed on, its clock must be last+1, the time of the next record it may
// read, not beyond. The worker is driven here as the coordinator drives it
// (a checkpoint at Tc once the clock reaches Tc), with the clock read while
// the source is in Source.Start, right after its replay: a clock of last+2
// there takes the checkpoint at last+2 without the record at last+1, which
// then arrives below it (late), and a recovery to that checkpoint loses it.
func TestAReplayingSourceReportsTheTimeOfItsNextRecord(t *testing.T) {
	const n, restore, last = 100, 20, 59
	var stopAt atomic.Int64
	var gated atomic.Bool
	stopAt.Store(last + 1)
	started := make(chan int64, 1)
	release := make(chan struct{})
	var sinkFailed atomic.Bool
	sinkFailed.Store(true) // the sink never fails
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &stoppingSource{n: n, gateAt: last + 1, stopAt: &stopAt, gated: &gated, started: started, release: release}, nil
			}},
			{Name: "sum", Parallelism: 1, NewTask: func(int) (engine.Task, error) {
				return &countSum{failAt: math.MaxUint64, failed: &sinkFailed}, nil
			}},
		},
		Edges: []engine.Edge{{From: "src", To: "sum", Partitioner: engine.Hash}},
	}
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: filepath.Join(t.TempDir(), "node"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	run := func(gen uint64, restore int64, has bool, target int64) {
		t.Helper()
		if err := w.Start(engine.StartCmd{Gen: gen, Node: 0, Addrs: []string{w.Addr()}, Placement: []int{0, 0},
			Restore: restore, HasRestore: has, Target: target, Horizon: n + 1}); err != nil {
			t.Fatal(err)
		}
		if err := w.Run(gen); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(gen uint64, tc int64) {
		t.Helper()
		if err := w.Checkpoint(gen, true, tc, n+1); err != nil {
			t.Fatal(err)
		}
	}

	// Generation 1 reads 0..last into the log and checkpoints at restore.
	run(1, 0, false, restore)
	awaitWorkerClock(t, w, 1, last+1)
	checkpoint(1, restore)

	// Generation 2 replays restore..last, then the source waits in Start.
	w.Stop()
	stopAt.Store(0)
	run(2, restore, true, last+2)
	select {
	case next := <-started:
		if next != last+1 {
			t.Fatalf("after replaying up to %d the source was started at %d, want %d", last, next, last+1)
		}
	case <-time.After(10 * slow * time.Second): // a hang guard
		t.Fatal("the source was never started after its replay")
	}
	r, err := w.Clock(2)
	if err != nil {
		t.Fatal(err)
	}
	early := r.Min >= last+2
	if early {
		t.Errorf("after replaying up to %d, with the record at %d not yet read, the worker's clock is %d, want %d",
			last, last+1, r.Min, last+1)
		checkpoint(2, last+2) // what the coordinator does with that clock
	}
	close(release)
	awaitWorkerClock(t, w, 2, clock.Idle)
	if !early {
		checkpoint(2, last+2)
	}
	if r, err := w.Clock(2); err != nil || r.Late != 0 {
		t.Errorf("%d messages arrived below a completed checkpoint (%v), want none", r.Late, err)
	}

	// Generation 3 recovers from the checkpoint at last+2.
	run(3, last+2, true, n+1)
	awaitWorkerClock(t, w, 3, clock.Idle)
	res, err := w.Finish(3)
	if err != nil {
		t.Fatal(err)
	}
	wantCountSum(t, &engine.Result{Results: res}, n)
}

// awaitWorkerClock waits until w's clock in generation gen is at least
// want; a hang guard fails t after 10 seconds (times slow).
func awaitWorkerClock(t *testing.T, w *engine.Worker, gen uint64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * slow * time.Second)
	for {
		r, err := w.Clock(gen)
		if err != nil {
			t.Fatal(err)
		}
		if r.Min >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clock of generation %d stayed at %d, below %d", gen, r.Min, want)
		}
		time.Sleep(time.Millisecond)
	}
}
