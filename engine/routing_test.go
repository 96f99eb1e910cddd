package engine_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
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
