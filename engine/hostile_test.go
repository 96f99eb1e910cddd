package engine_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// idleSource reads nothing until the input ends; the test below never runs
// it (its task is placed on a node that does not exist).
type idleSource struct{}

func (idleSource) Start(int64) error { return nil }
func (idleSource) Read(dst []engine.Record, _ int64) ([]engine.Record, int64, error) {
	return dst, 0, io.EOF
}

// srcSinkJob is an idle source feeding a keepTask that hands what it
// processes to got.
func srcSinkJob(got chan<- string) *engine.Job {
	return &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return idleSource{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return keepTask{got}, nil }},
		},
		Edges: []engine.Edge{{From: "src", To: "sink", Partitioner: engine.RoundRobin}},
	}
}

// keepTask hands every payload it processes to got.
type keepTask struct{ got chan<- string }

func (k keepTask) Process(in []engine.Message, _ *engine.Emitter) error {
	for _, m := range in {
		k.got <- string(m.Key) + "=" + string(m.Payload)
	}
	return nil
}

// TestAMalformedMessageFromAForeignPeerFailsTheTaskClearly: a node that is
// not an engine opens a channel to a worker's task with the generation's
// epoch and sends one message the engine can decode and one it cannot. The
// first reaches the task; the second fails the task with ErrMalformed,
// reported to the coordinator as a task failure of that generation, and
// nothing after it is processed.
func TestAMalformedMessageFromAForeignPeerFailsTheTaskClearly(t *testing.T) {
	got := make(chan string, 16)
	job := srcSinkJob(got)
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const gen = 3
	// The source is placed on a second node that nobody runs, the sink here.
	if err := w.Start(engine.StartCmd{Gen: gen, Node: 0, Addrs: []string{w.Addr(), "127.0.0.1:1"}, Placement: []int{1, 0}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(gen); err != nil {
		t.Fatal(err)
	}

	rogue, err := transport.NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Abort()
	peer, err := rogue.Peer(w.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, sink := taskid.ID{Processor: 0, Index: 0}, taskid.ID{Processor: 1, Index: 0}
	s, err := peer.OpenSenderEpoch(ctx, src, sink, gen)
	if err != nil {
		t.Fatal(err)
	}
	// The engine's encoding is a uvarint key length, the key, the payload.
	if err := s.Send(ctx, 1, []byte("\x01kgood")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "k=good" {
			t.Fatalf("the task got %q, want k=good", m)
		}
	case <-ctx.Done():
		t.Fatal("the well-formed message never reached the task")
	}

	// A key length of 9 in a message of 3 bytes, then a good one.
	if err := s.Send(ctx, 2, []byte("\x09ab")); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 3, []byte("\x00after")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.Events():
		if ev.Gen != gen || ev.Task != sink.String() || !strings.Contains(ev.Err, engine.ErrMalformed.Error()) {
			t.Fatalf("event %+v, want task %v of generation %d failed with %q", ev, sink, gen, engine.ErrMalformed)
		}
	case <-ctx.Done():
		t.Fatal("no failure was reported for the malformed message")
	}
	// The failed task takes nothing more: the message after the bad one is
	// acknowledged (the channel does not stall) but never processed.
	if err := s.Flush(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		t.Fatalf("the failed task processed %q", m)
	default:
	}
}

// TestAStartCommandThatDoesNotFitTheJobIsRefused: a start command from the
// network whose node or placement names a node its addresses do not, or
// whose placement does not place every task, is refused with an error
// saying so, and the generation that runs goes on. (A task placed on a
// node beyond the addresses used to panic the worker's process.)
func TestAStartCommandThatDoesNotFitTheJobIsRefused(t *testing.T) {
	job := srcSinkJob(make(chan string, 1))
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	two := []string{w.Addr(), "127.0.0.1:1"}
	// Generation 1 runs the sink here; its source is on a node nobody runs.
	if err := w.Start(engine.StartCmd{Gen: 1, Node: 0, Addrs: two, Placement: []int{1, 0}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cmd  engine.StartCmd
		says string
	}{
		{"a task placed on a node beyond the addresses",
			engine.StartCmd{Gen: 2, Node: 0, Addrs: two, Placement: []int{0, 2}}, "puts task 1.0 on node 2; the command's Addrs name nodes 0 to 1"},
		{"a task placed on a negative node",
			engine.StartCmd{Gen: 2, Node: 0, Addrs: two, Placement: []int{0, -1}}, "puts task 1.0 on node -1"},
		{"fewer addresses than the nodes placed",
			engine.StartCmd{Gen: 2, Node: 0, Addrs: two[:1], Placement: []int{0, 1}}, "puts task 1.0 on node 1; the command's Addrs name nodes 0 to 0"},
		{"no addresses",
			engine.StartCmd{Gen: 2, Node: 0, Placement: []int{0, 0}}, "Addrs name no node"},
		{"a node beyond the addresses",
			engine.StartCmd{Gen: 2, Node: 2, Addrs: two, Placement: []int{0, 0}}, "is for node 2; its Addrs name nodes 0 to 1"},
		{"a negative node",
			engine.StartCmd{Gen: 2, Node: -1, Addrs: two, Placement: []int{0, 0}}, "is for node -1"},
		{"a placement of another job",
			engine.StartCmd{Gen: 2, Node: 0, Addrs: two, Placement: []int{0}}, "placement names 1 tasks, the job has 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := w.Start(tc.cmd); err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Start(%+v) returned %v, want an error saying %q", tc.cmd, err, tc.says)
			}
			if _, err := w.Clock(1); err != nil {
				t.Fatalf("generation 1 no longer runs after the refused start: %v", err)
			}
		})
	}
}
