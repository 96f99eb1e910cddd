package transport

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

func TestInlineHandlersGetEveryMessageOnceInOrderUnderFaults(t *testing.T) {
	forEachBackend(t, testInlineHandlersGetEveryMessageOnceInOrderUnderFaults)
}

func testInlineHandlersGetEveryMessageOnceInOrderUnderFaults(t *testing.T, be []Option) {
	f := Faults{Drop: 0.05, CtrlDrop: 0.05, Dup: 0.02, Reset: 5 * time.Millisecond, Seed: 21}
	rx, tx, p := newPairOn(t, be, []Option{WithFaults(Faults{CtrlDrop: 0.05, Dup: 0.02, Seed: 22})},
		[]Option{WithFaults(f), WithReconnectBackoff(time.Millisecond, 10*time.Millisecond)})
	col := newCollector()
	rx.HandleAllInline(col.handler)
	sendAll(t, ctxT(t, 60*time.Second), p, 8, 30000, 100)
	col.check(t, 8*30000)
	fs := tx.Stats(false).Faults
	if fs.DataDropped == 0 || fs.Duplicated == 0 || fs.Resets == 0 {
		t.Errorf("faults injected %+v; want drops, duplicates and resets", fs)
	}
}

// Runs for one target that arrive on two connections reach its inline
// handler one at a time, each channel in order.
func TestInlineHandlerRunsOneRunAtATimeAcrossConnections(t *testing.T) {
	forEachBackend(t, testInlineHandlerRunsOneRunAtATimeAcrossConnections)
}

func testInlineHandlerRunsOneRunAtATimeAcrossConnections(t *testing.T, be []Option) {
	// Two event loops, so that the two connections are read concurrently.
	rx, txA, pA := newPairOn(t, be, []Option{WithEventLoops(2)}, nil)
	txB, err := NewNode(be...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txB.Abort)
	pB, err := txB.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if txA.ID() == txB.ID() {
		t.Fatal("two nodes with one id")
	}
	col := newCollector()
	inner := col.handler(taskid.ID{})
	var inside, overlaps atomic.Int32
	target := taskid.ID{Processor: 1}
	if err := rx.HandleInline(target, func(ch taskid.Channel, first uint64, msgs []wire.Message) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		inner(ch, first, msgs)
		for i := 0; i < 2000; i++ { // widen the window for an overlap
			_ = i * i
		}
		inside.Add(-1)
	}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	for k, p := range []*Peer{pA, pB} {
		for i := range 4 {
			s, err := p.OpenSender(ctx, taskid.ID{Index: uint32(100*k + i)}, target)
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range 5000 {
					if err := s.Send(ctx, 0, payload(uint64(n), 64)); err != nil {
						t.Error(err)
						return
					}
				}
				if err := s.Flush(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	col.check(t, 8*5000)
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("the inline handler ran %d times while another call was running", n)
	}
}

// Runs that wait in the inbox before HandleInline are delivered first, in
// order, and later ones inline after them.
func TestHandleInlineDeliversWhatArrivedBeforeFirst(t *testing.T) {
	rx, _, p := newPair(t, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 300 {
		if err := s.Send(ctx, 0, payload(uint64(k), 16)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	col := newCollector()
	if err := rx.HandleInline(taskid.ID{Processor: 1}, col.handler(taskid.ID{})); err != nil {
		t.Fatal(err)
	}
	for k := 300; k < 3000; k++ {
		if err := s.Send(ctx, 0, payload(uint64(k), 16)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	col.check(t, 3000)
}

func TestATargetTakesOneHandlerOfEitherKind(t *testing.T) {
	n, err := NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Abort()
	h := func(taskid.Channel, uint64, []wire.Message) {}
	a, b := taskid.ID{Index: 1}, taskid.ID{Index: 2}
	if err := n.Handle(a, h); err != nil {
		t.Fatal(err)
	}
	if err := n.HandleInline(a, h); err == nil {
		t.Error("HandleInline after Handle for one target succeeded")
	}
	if err := n.HandleInline(b, h); err != nil {
		t.Fatal(err)
	}
	if err := n.Handle(b, h); err == nil {
		t.Error("Handle after HandleInline for one target succeeded")
	}
	if err := n.HandleInline(b, nil); err == nil {
		t.Error("a nil inline handler was accepted")
	}
}
