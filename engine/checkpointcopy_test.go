package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// singleSource emits records 0..n-1 at timestamps 0..n-1, one per Read,
// each payload the record's number. Its low is the timestamp of the record
// it just emitted, not the next one: the global clock reaches t only once
// the record at t has been handed on, so that the record at a checkpoint's
// own time always arrives, alone in its run, before that checkpoint is
// taken.
type singleSource struct{ n, next int64 }

func (s *singleSource) Start(next int64) error { s.next = max(next, 0); return nil }

func (s *singleSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	if s.next >= s.n {
		return dst, math.MaxInt64, io.EOF
	}
	if s.next >= limit {
		return dst, s.next - 1, nil
	}
	dst = append(dst, engine.Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
	s.next++
	return dst, s.next - 1, nil
}

// countSum is a stateful sink holding the count and the sum of the record
// numbers it got. It fails, once per test, at the record numbered failAt.
type countSum struct {
	count, sum uint64
	failAt     uint64
	failed     *atomic.Bool
}

func (c *countSum) Process(in []engine.Message, _ *engine.Emitter) error {
	for _, m := range in {
		v := binary.LittleEndian.Uint64(m.Payload)
		if v == c.failAt && c.failed.CompareAndSwap(false, true) {
			return errors.New("injected failure")
		}
		c.count++
		c.sum += v
	}
	return nil
}

func (c *countSum) Snapshot(dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, c.count)
	return binary.LittleEndian.AppendUint64(dst, c.sum), nil
}

func (c *countSum) Restore(b []byte) error {
	if len(b) != 16 {
		return fmt.Errorf("countSum: state of %d bytes", len(b))
	}
	c.count, c.sum = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	return nil
}

func (c *countSum) Finish() ([]byte, error) { return c.Snapshot(nil) }

// TestTheRecordAtACheckpointsTimeStaysOutOfThatCheckpoint: a checkpoint
// at Tc holds exactly the messages below Tc, and recovery replays from Tc
// on. The record at Tc arrives alone in its run, before the checkpoint at
// Tc is taken (see singleSource), so the checkpoint copy must be made
// before that run is processed; if it is made only by a later run, every
// checkpoint holds its own record at Tc, which the replay after the
// failure delivers a second time.
func TestTheRecordAtACheckpointsTimeStaysOutOfThatCheckpoint(t *testing.T) {
	const n = 3000
	var failed atomic.Bool
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &singleSource{n: n}, nil }},
			{Name: "sum", Parallelism: 1, NewTask: func(int) (engine.Task, error) {
				return &countSum{failAt: n / 2, failed: &failed}, nil
			}},
		},
		Edges: []engine.Edge{{From: "src", To: "sum", Partitioner: engine.Hash}},
	}
	// The source reads only below the horizon, 2*InitialInterval at first,
	// so checkpoints have completed before it reaches the failure.
	res, err := runQuickRestarts(t, job, filepath.Join(t.TempDir(), "data"), 50, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	wantCountSum(t, res, n)
	if res.Recoveries != 1 || res.Checkpoints == 0 {
		t.Errorf("recoveries %d checkpoints %d, want one recovery after a checkpoint", res.Recoveries, res.Checkpoints)
	}
	if res.Late != 0 {
		t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
	}
}

// runQuickRestarts runs job in dir without fsyncs, its first checkpoint
// interval interval timestamp units and one due every every of wall time,
// restarting up to 10 times a minute with no backoff to speak of; a run
// that has not ended within a minute (times slow) fails the test.
func runQuickRestarts(t *testing.T, job *engine.Job, dir string, interval int64, every time.Duration) (*engine.Result, error) {
	t.Helper()
	c, err := engine.NewCoordinator(job, engine.Config{Dir: dir, NoSync: true,
		InitialInterval: interval, CheckpointEvery: every,
		Restart: engine.RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*slow*time.Second)
	defer cancel()
	return c.Run(ctx)
}

// wantCountSum fails t unless the summing task 1.0 counted the n values
// 0 to n-1 once each: n of them, summing to n(n-1)/2.
func wantCountSum(t *testing.T, res *engine.Result, n uint64) {
	t.Helper()
	var got countSum
	if err := got.Restore(res.Results["1.0"]); err != nil {
		t.Fatal(err)
	}
	if got.count != n || got.sum != n*(n-1)/2 {
		t.Errorf("count %d sum %d, want count %d sum %d", got.count, got.sum, n, n*(n-1)/2)
	}
}
