package transport

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// A message goes in one DATA frame, so the largest payload a node takes
// (MaxPayload) is bounded by the frames it and its peers accept
// (WithMaxFrame) as well as by its window: a payload of MaxPayload bytes
// arrives, and a larger one is refused with ErrTooLarge, instead of being
// taken and then never delivered, its connection closed as too large and
// redialed for ever.
func TestTheLargestPayloadFitsAFrame(t *testing.T) {
	opts := []Option{WithMaxBatch(16 << 10), WithMaxFrame(32 << 10)} // the default window: 1 MiB
	rx, tx, p := newPair(t, opts, opts)
	got := make(chan int, 1)
	rx.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) {
			for _, m := range msgs {
				got <- len(m.Payload)
			}
		}
	})
	ctx := ctxT(t, 20*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	most := tx.MaxPayload()
	if err := s.Send(ctx, 0, make([]byte, most)); err != nil {
		t.Fatalf("Send of MaxPayload (%d) bytes: %v", most, err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush of a message of MaxPayload (%d) bytes: %v (the receiver refused %d connections over a limit)",
			most, err, rx.Stats().Refused.Limits)
	}
	if n := <-got; n != most {
		t.Fatalf("delivered %d bytes, want %d", n, most)
	}
	if err := s.TrySend(0, make([]byte, most+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("TrySend of MaxPayload+1 bytes: %v, want ErrTooLarge", err)
	}
}

// WithLogger(nil) leaves the node's log lines nowhere, as the default does,
// instead of panicking at the first line (here on the dial loop, when the
// peer refuses this node, and on the event loop as the connection closes).
func TestANilLoggerDiscards(t *testing.T) {
	rx := listeningNode(t, nil, WithKey([]byte("0123456789abcdef")))
	tx := testNode(t, WithLogger(nil))
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	if err := p.WaitConnected(ctx); !errors.Is(err, ErrRejected) {
		t.Fatalf("WaitConnected to a node with a key: %v, want ErrRejected", err)
	}
	// Close waits for the dial loop, which logs the refusal before it ends.
	if err := tx.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// HandleAll(nil) supplies no handler, whether or not a target is already
// waiting for one, instead of calling the nil function for the waiting
// targets (a panic); such a target still takes its handler from Handle.
func TestHandleAllWithNilSuppliesNoHandler(t *testing.T) {
	for _, inline := range []bool{false, true} {
		rx, _, p := newPair(t, nil, nil)
		ctx := ctxT(t, 20*time.Second)
		target := taskid.ID{Processor: 1}
		s, err := p.OpenSender(ctx, taskid.ID{}, target)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, 0, []byte("waiting")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, "the message to arrive", func() bool { return rx.Stats().Totals().MessagesIn > 0 })
		if inline {
			rx.HandleAllInline(nil)
		} else {
			rx.HandleAll(nil)
		}
		got := make(chan string, 1)
		if err := rx.Handle(target, func(_ taskid.Channel, _ uint64, msgs []Message) { got <- string(msgs[0].Payload) }); err != nil {
			t.Fatalf("Handle after HandleAll(nil): %v", err)
		}
		if m := <-got; m != "waiting" {
			t.Fatalf("got %q, want the message that waited", m)
		}
	}
}

// HandleAll supplies the handler of a target that has none when its first
// channel opens: a target given its own handler with Handle before that,
// after HandleAll, keeps it, rather than being refused as already handled
// by a handler HandleAll's function made for it on the spot.
func TestHandleAfterHandleAllGivesTheTargetItsOwnHandler(t *testing.T) {
	for _, inline := range []bool{false, true} {
		rx, _, p := newPair(t, nil, nil)
		own, other := taskid.ID{Processor: 1}, taskid.ID{Processor: 2}
		supplied := make(chan taskid.ID, 4)
		got := make(chan string, 4)
		newHandler := func(target taskid.ID) Handler {
			supplied <- target
			return func(_ taskid.Channel, _ uint64, msgs []Message) { got <- "supplied " + string(msgs[0].Payload) }
		}
		if inline {
			rx.HandleAllInline(newHandler)
		} else {
			rx.HandleAll(newHandler)
		}
		if err := rx.Handle(own, func(_ taskid.Channel, _ uint64, msgs []Message) { got <- "own " + string(msgs[0].Payload) }); err != nil {
			t.Fatalf("Handle of a target no channel opened to yet, after HandleAll: %v", err)
		}
		ctx := ctxT(t, 20*time.Second)
		for _, target := range []taskid.ID{own, other} {
			s, err := p.OpenSender(ctx, taskid.ID{}, target)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(ctx, 0, []byte(target.String())); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if a, b := <-got, <-got; a != "own "+own.String() || b != "supplied "+other.String() {
			t.Errorf("delivered %q and %q, want %q and %q", a, b, "own "+own.String(), "supplied "+other.String())
		}
		if s := <-supplied; s != other || len(supplied) != 0 {
			t.Errorf("HandleAll's function was asked for %v (and %d more), want %v only", s, len(supplied), other)
		}
	}
}

// HandleAll's function may call the node, as a task set up on its first
// message opens its outputs with Node.Peer: it runs without the node's
// lock, both for a target whose first channel opens (on the event loop)
// and for a target already waiting when HandleAll is called, instead of
// deadlocking the node (and the event loop) on that lock.
func TestHandleAllsFunctionMayCallTheNode(t *testing.T) {
	for _, waiting := range []bool{false, true} {
		rx, _, p := newPair(t, nil, nil)
		var stuck atomic.Bool
		got := make(chan string, 1)
		newHandler := func(target taskid.ID) Handler {
			done := make(chan struct{})
			go func() {
				defer close(done)
				if _, err := rx.Peer("127.0.0.1:9"); err != nil { // an output of the task
					t.Errorf("Peer: %v", err)
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				stuck.Store(true) // return, so that the node's lock is released and the test ends
			}
			return func(_ taskid.Channel, _ uint64, msgs []Message) { got <- string(msgs[0].Payload) }
		}
		if !waiting {
			rx.HandleAll(newHandler)
		}
		ctx := ctxT(t, 30*time.Second)
		s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, 0, []byte("first")); err != nil {
			t.Fatal(err)
		}
		if waiting {
			waitFor(t, 20*time.Second, "the message to arrive", func() bool { return rx.Stats().Totals().MessagesIn > 0 })
			rx.HandleAll(newHandler)
		}
		if m := <-got; m != "first" {
			t.Fatalf("got %q, want %q", m, "first")
		}
		if stuck.Load() {
			t.Fatalf("Node.Peer called from HandleAll's function (waiting target: %v) waited 10 s for the node's lock", waiting)
		}
	}
}
