package engine_test

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// pausingSource emits records 0..n-1 at timestamps 0..n-1. Before its
// record at pauseAt it waits, reporting pauseAt as its low, until its
// limit rises above firstLimit (the coordinator raises it only after it
// journaled the checkpoint at pauseAt), and then fails once per test.
type pausingSource struct {
	n, next             int64
	pauseAt, firstLimit int64
	failed              *atomic.Bool
}

func (s *pausingSource) Start(next int64) error { s.next = max(next, 0); return nil }

func (s *pausingSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	if s.next == s.pauseAt && !s.failed.Load() {
		if limit <= s.firstLimit {
			return dst, s.pauseAt, nil
		}
		s.failed.Store(true)
		return dst, s.pauseAt, errors.New("injected failure right after the checkpoint")
	}
	for k := 0; k < 32 && s.next < s.n && s.next < limit && (s.next != s.pauseAt || s.failed.Load()); k++ {
		dst = append(dst, engine.Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
		s.next++
	}
	if s.next >= s.n {
		return dst, math.MaxInt64, io.EOF
	}
	return dst, s.next, nil
}

// TestASourceWhoseLogEndsBelowTheRestoredCheckpointRestartsAtIt: the
// first checkpoint comes at InitialInterval, and the source fails right
// after it, before reading the record at that time, so that its log holds
// nothing to replay from the checkpoint on. It must then start reading at
// the checkpoint's time itself, or that record is lost.
func TestASourceWhoseLogEndsBelowTheRestoredCheckpointRestartsAtIt(t *testing.T) {
	const n, interval = 500, 50
	var failed, sinkFailed atomic.Bool
	sinkFailed.Store(true) // the sink never fails
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				// The first target is interval, the first horizon twice it.
				return &pausingSource{n: n, pauseAt: interval, firstLimit: 2 * interval, failed: &failed}, nil
			}},
			{Name: "sum", Parallelism: 1, NewTask: func(int) (engine.Task, error) {
				return &countSum{failAt: math.MaxUint64, failed: &sinkFailed}, nil
			}},
		},
		Edges: []engine.Edge{{From: "src", To: "sum", Partitioner: engine.Hash}},
	}
	res, err := runQuickRestarts(t, job, filepath.Join(t.TempDir(), "data"), interval, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wantCountSum(t, res, n)
	if !failed.Load() || res.Recoveries != 1 {
		t.Errorf("failed %v, recoveries %d: want one failure and one recovery", failed.Load(), res.Recoveries)
	}
}
