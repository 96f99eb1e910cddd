package transport

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// pollingLoops counts the goroutines running a gnet event loop (parked in,
// or about to enter, epoll_wait), from a dump of every goroutine's stack.
func pollingLoops(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range bytes.Split(b.Bytes(), []byte("\n\n")) {
		if bytes.Contains(g, []byte("gnet/v2/pkg/netpoll.(*Poller).Polling")) {
			n++
		}
	}
	return n
}

// loopsSettle waits until pollingLoops reports want (a group's loops start
// asynchronously and stop after their node closes), and returns the last
// count it saw.
func loopsSettle(t *testing.T, want int) int {
	t.Helper()
	n := pollingLoops(t)
	for deadline := time.Now().Add(5 * time.Second); n != want && time.Now().Before(deadline); n = pollingLoops(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// The threading model of the gnet backend: every node of a process runs
// its connections on one group of GOMAXPROCS-1 loops (at least one), so
// that loops blocked in epoll_wait can never hold every P. Listening and
// dialing park in Go's netpoller and add no loops.
func TestNodesOfAProcessShareOneGroupOfLoops(t *testing.T) {
	if n := pollingLoops(t); n != 0 {
		t.Fatalf("%d gnet loops running before any node", n)
	}
	want := max(1, runtime.GOMAXPROCS(0)-1)
	a, b, c := listeningNode(t, nil), listeningNode(t, nil), listeningNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan struct{}, 2)
	for _, rx := range []*Node{b, c} {
		if err := rx.HandleInline(taskid.ID{Processor: 1}, func(taskid.Channel, uint64, []Message) { got <- struct{}{} }); err != nil {
			t.Fatal(err)
		}
	}
	for _, pair := range [][2]*Node{{a, b}, {b, c}} {
		p, err := pair[0].Peer(pair[1].Addr())
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, 1, []byte("hello")); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		select {
		case <-got:
		case <-ctx.Done():
			t.Fatal("a message did not arrive")
		}
	}
	if n := loopsSettle(t, want); n != want {
		t.Errorf("three nodes with four connections run %d gnet loops, want the shared group's %d", n, want)
	}

	// A node that asks for its own number of loops gets a group of that
	// size, shared only with nodes asking the same.
	own := want + 2
	d := testNode(t, WithEventLoops(own))
	e := testNode(t, WithEventLoops(own))
	if n := loopsSettle(t, want+own); n != want+own {
		t.Errorf("with two nodes of %d loops: %d gnet loops, want %d", own, n, want+own)
	}

	// The last node of a group to close stops its loops.
	for _, n := range []*Node{a, b, c, d, e} {
		n.Abort()
	}
	if n := loopsSettle(t, 0); n != 0 {
		t.Errorf("%d gnet loops still running after every node closed", n)
	}
}

// A task running inline that sends on another connection of its loop (an
// echo answering on its own channel) does not wake the loop it runs on:
// the loop flushes that connection when the callback ends
// (loopLoad.deferFlush). Before, every such send that was not written
// directly wrote to the loop's eventfd, and the loop took one more turn
// to write it.
func TestInlineTasksSendsAreFlushedWhenTheirCallbackEnds(t *testing.T) {
	const rounds = 300
	var selfWakes, wakes atomic.Int64
	hook := func(*conn) {
		wakes.Add(1)
		if onLoop(goid()) {
			selfWakes.Add(1)
		}
	}
	testHookWake.Store(&hook)
	defer testHookWake.Store(nil)

	ctx := ctxT(t, 30*time.Second)
	a, z, there, back := pingPair(t, ctx, WithEventLoops(1))
	if err := z.HandleInline(taskid.ID{Processor: 1}, func(_ taskid.Channel, _ uint64, msgs []Message) {
		for _, m := range msgs {
			if err := back.TrySend(m.Ts, m.Payload); err != nil {
				t.Errorf("echo: %v", err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var pongs int64 // the pinger's handler's only
	if err := a.HandleInline(taskid.ID{}, func(_ taskid.Channel, _ uint64, msgs []Message) {
		for _, m := range msgs {
			if m.Ts != pongs {
				t.Errorf("pong %d for ping %d", m.Ts, pongs)
			}
			if pongs++; pongs == rounds {
				close(done)
				return
			}
			if err := there.TrySend(pongs, []byte("ping")); err != nil {
				t.Errorf("ping %d: %v", pongs, err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := there.Send(ctx, 0, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d round trips of %d", pongs, rounds)
	}
	if n := selfWakes.Load(); n != 0 {
		t.Errorf("the loop woke itself %d times in %d round trips between inline tasks (%d wake-ups in all)", n, rounds, wakes.Load())
	}
}
