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

// stepSource emits the record at 0, then, once the global clock has
// passed it, the record at 1, then nothing (its bound 3) until release is
// set, then ends.
type stepSource struct {
	c       func() int64
	release *atomic.Bool
	state   int
}

func (s *stepSource) Start(int64) error { return nil }

func (s *stepSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	switch s.state {
	case 0:
		s.state = 1
		return append(dst, engine.Record{Ts: 0, Payload: []byte("a")}), 1, nil
	case 1:
		if s.c() < 1 || limit <= 1 {
			time.Sleep(100 * time.Microsecond)
			return dst, 1, nil
		}
		s.state = 2
		return append(dst, engine.Record{Ts: 1, Payload: []byte("b")}), 3, nil
	}
	if !s.release.Load() {
		time.Sleep(100 * time.Microsecond)
		return dst, 3, nil
	}
	return dst, 3, io.EOF
}

// holdingSink counts what it processes; while it processes the message at
// 1 it waits up to hold for the global clock to pass 1, which it must not,
// and records the highest clock it saw meanwhile.
type holdingSink struct {
	c       func() int64
	hold    time.Duration
	seenMax *atomic.Int64
	n       uint64
}

func (h *holdingSink) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		h.n++
		if m.Ts != 1 || out.CheckpointCopy() {
			continue
		}
		for end := time.Now().Add(h.hold); time.Now().Before(end); time.Sleep(time.Millisecond) {
			g := h.c()
			if g > h.seenMax.Load() {
				h.seenMax.Store(g)
			}
			if g > 1 {
				break
			}
		}
	}
	return nil
}

func (h *holdingSink) Snapshot(dst []byte) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(dst, h.n), nil
}

func (h *holdingSink) Restore(b []byte) error {
	if len(b) != 8 {
		return errors.New("holdingSink: bad state")
	}
	h.n = binary.LittleEndian.Uint64(b)
	return nil
}

func (h *holdingSink) Finish() ([]byte, error) { return h.Snapshot(nil) }

// TestTwoEdgesBetweenTheSameTasksBothHoldTheClock: a job may join two
// processors by two edges (Validate accepts it, and chained it works). On
// the transport both edges of a source task to one target task are one
// channel, (source, target, generation); the clock bookkeeping must not
// count the other edge's acknowledged messages as its own. The source
// sends the record at 0 on both edges (two messages, acknowledged), then
// the record at 1 on both; while the sink processes the latter, the
// global clock must stay at or below 1, and no checkpoint at 2 may
// complete before it has arrived (Late).
func TestTwoEdgesBetweenTheSameTasksBothHoldTheClock(t *testing.T) {
	for _, noChain := range []bool{false, true} {
		name := "chained"
		if noChain {
			name = "on the transport"
		}
		t.Run(name, func(t *testing.T) {
			var c *engine.Coordinator
			clk := func() int64 { return c.Stats().GlobalClock }
			var release atomic.Bool
			var seenMax atomic.Int64
			job := &engine.Job{
				Procs: []engine.Proc{
					{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
						return &stepSource{c: clk, release: &release}, nil
					}},
					{Name: "sink", Parallelism: 1, NewTask: func(int) (engine.Task, error) {
						return &holdingSink{c: clk, hold: time.Second, seenMax: &seenMax}, nil
					}},
				},
				Edges: []engine.Edge{
					{From: "src", To: "sink", Partitioner: engine.Broadcast},
					{From: "src", To: "sink", Partitioner: engine.RoundRobin},
				},
			}
			var err error
			c, err = engine.NewCoordinator(job, engine.Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true, NoChain: noChain,
				InitialInterval: 2, Restart: engine.RestartPolicy{MaxRestarts: engine.NoRestarts}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			go func() {
				// The source ends once the sink has had both records twice.
				for c.Stats().Processed < 4 && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				release.Store(true)
			}()
			res, err := c.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if g := seenMax.Load(); g > 1 {
				t.Errorf("the global clock reached %d while the sink was still processing the message at 1", g)
			}
			if res.Late != 0 {
				t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
			}
			b := res.Results["1.0"]
			if len(b) != 8 || binary.LittleEndian.Uint64(b) != 4 {
				t.Errorf("the sink's result is %x, want 4 messages", b)
			}
		})
	}
}

// farSource is sparseSource with timestamps at the end of the int64 range:
// the first half of its n records at 0, 1, ..., the second half just below
// math.MaxInt64 (which is clock.Idle, the clock of a finished task).
type farSource struct{ n, next uint64 }

func (s *farSource) ts(i uint64) int64 {
	if i < s.n/2 {
		return int64(i)
	}
	return math.MaxInt64 - int64(s.n) + int64(i)
}

func (s *farSource) Start(next int64) error {
	for s.next = 0; s.next < s.n && s.ts(s.next) < next; s.next++ {
	}
	return nil
}

func (s *farSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	for k := 0; k < 16 && s.next < s.n && s.ts(s.next) < limit; k++ {
		p := make([]byte, 16)
		binary.LittleEndian.PutUint64(p[8:], s.next)
		dst = append(dst, engine.Record{Ts: s.ts(s.next), Payload: p})
		s.next++
	}
	if s.next >= s.n {
		return dst, math.MaxInt64, io.EOF
	}
	return dst, s.ts(s.next), nil
}

// TestTimestampsNearTheEndOfTheInt64RangeAreCheckpointedInOrder: the
// checkpoint schedule (target, horizon, interval, step) must not wrap
// round when the clock jumps close to math.MaxInt64: a horizon of next +
// step that wrapped negative became the next checkpoint time, below the
// one just taken ("journal: record out of order: checkpoint -75... after
// checkpoint 62..."), and the run failed. Without and with crashes, every
// record is summed once.
func TestTimestampsNearTheEndOfTheInt64RangeAreCheckpointedInOrder(t *testing.T) {
	// With limit 220 the sink fails once, after the clock's jump, and
	// the job recovers from a checkpoint near the end of the range.
	for _, limit := range []int{1 << 30, 220} {
		t.Run(fmt.Sprint("failing after ", limit, " messages"), func(t *testing.T) {
			const n = 400
			job := &engine.Job{
				Procs: []engine.Proc{
					{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &farSource{n: n}, nil }},
					{Name: "sum", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return &crashAfter{limit: limit}, nil }},
				},
				Edges: []engine.Edge{{From: "gen", To: "sum", Partitioner: engine.Hash}},
			}
			c, err := engine.NewCoordinator(job, engine.Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true,
				InitialInterval: 50, CheckpointEvery: 5 * time.Millisecond,
				Restart: engine.RestartPolicy{MaxRestarts: 5, Window: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			res := runSummed(t, c, n)
			if res.Checkpoints == 0 {
				t.Errorf("no checkpoint was taken")
			}
			if limit < n && res.Recoveries == 0 {
				t.Errorf("no recovery: the failure was not exercised")
			}
			t.Logf("checkpoints %d recoveries %d", res.Checkpoints, res.Recoveries)
		})
	}
}
