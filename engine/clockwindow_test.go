package engine

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldSource reports low x until release is closed, then reads its one
// record, at x, and reports x+1 until done says the record was consumed;
// then it ends.
type heldSource struct {
	x       int64
	release <-chan struct{}
	done    *atomic.Bool
	read    bool
}

func (s *heldSource) Start(int64) error { return nil }

func (s *heldSource) Read(dst []Record, _ int64) ([]Record, int64, error) {
	if s.done.Load() {
		return dst, math.MaxInt64, io.EOF
	}
	select {
	case <-s.release:
	default:
		return dst, s.x, nil
	}
	if !s.read {
		s.read = true
		dst = append(dst, Record{Ts: s.x, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.x))})
	}
	return dst, s.x + 1, nil
}

// passTask hands every message on unchanged.
type passTask struct{}

func (passTask) Process(in []Message, out *Emitter) error {
	for _, m := range in {
		out.Emit(m.Ts, m.Key, m.Payload)
	}
	return nil
}

// funcTask processes every message with f.
type funcTask func(Message)

func (f funcTask) Process(in []Message, _ *Emitter) error {
	for _, m := range in {
		f(m)
	}
	return nil
}

// TestTheMultiNodeClockCoversAMessageThatSlipsPastEveryEdge: src (node 0)
// -> mid (node 1) -> sink (node 0), depth 2. In one round the record at x
// slips past the edge src -> mid: node 1 answers before it reaches mid,
// node 0 only once src has its acknowledgement, so that round reads x on
// neither node, while mid's output at x is still on its way to the sink.
// The next round's node 0 reading comes in before node 1's, so the global
// minimum, published at every reading, has to look back past the round
// of the slip to a reading that still held x: the last depth+1 rounds.
// The sink, holding that output until the round after, finds the global
// minimum above x: no checkpoint at the global minimum would hold it.
func TestTheMultiNodeClockCoversAMessageThatSlipsPastEveryEdge(t *testing.T) {
	const x, slipRound = 5, 6
	release, proceed := make(chan struct{}), make(chan struct{})
	var done atomic.Bool
	var c *Coordinator
	var sunk atomic.Int64
	sink := funcTask(func(m Message) {
		select {
		case <-proceed:
		case <-time.After(time.Minute): // a hang guard
			t.Errorf("the round after the slip's next never came")
		}
		if g := c.Stats().GlobalClock; g > m.Ts {
			t.Errorf("the global clock is %d while the message at %d is still on its way to the sink", g, m.Ts)
		}
		sunk.Add(1)
		done.Store(true)
	})
	job := &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) {
				return &heldSource{x: x, release: release, done: &done}, nil
			}},
			{Name: "mid", Parallelism: 1, NewTask: func(int) (Task, error) { return passTask{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return sink, nil }},
		},
		Edges: []Edge{{From: "src", To: "mid", Partitioner: Hash}, {From: "mid", To: "sink", Partitioner: Hash}},
	}
	var err error
	c, err = NewCoordinator(job, Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true, Nodes: 2,
		InitialInterval: 1 << 40, Restart: RestartPolicy{MaxRestarts: NoRestarts}})
	if err != nil {
		t.Fatal(err)
	}
	if p := job.Placement(2); p[job.tasks()[1]] != 1 || p[job.tasks()[0]] != 0 || p[job.tasks()[2]] != 0 {
		t.Fatalf("placement %v, want src and sink on node 0, mid on node 1", p)
	}
	var rounds [2]atomic.Int64
	node1Read := make(chan struct{})
	var once sync.Once
	c.clockCall = func(i int, call func() (Response, error)) (Response, error) {
		switch round := rounds[i].Add(1); {
		case round == slipRound && i == 1:
			defer close(node1Read)
			return call()
		case round == slipRound && i == 0:
			<-node1Read
			close(release)
			deadline := time.Now().Add(time.Minute) // a hang guard
			for {
				r, err := call()
				if err != nil || r.Clock.Min > x || time.Now().After(deadline) {
					return r, err
				}
				time.Sleep(time.Millisecond)
			}
		case round == slipRound+2:
			// The slip's next round is reported, and its global minimum
			// in Stats.
			once.Do(func() { close(proceed) })
		}
		return call()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	if _, err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := sunk.Load(); n != 1 {
		t.Errorf("the sink got %d messages, want 1", n)
	}
}
