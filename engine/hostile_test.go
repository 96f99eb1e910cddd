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
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return idleSource{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return keepTask{got}, nil }},
		},
		Edges: []engine.Edge{{From: "src", To: "sink", Partitioner: engine.RoundRobin}},
	}
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
