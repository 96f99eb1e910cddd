package transport

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// hangGuard is how long a test waits for a call that deadlocks without
// the fix before it fails; generous, it only turns a hang into a failure.
const hangGuard = 10 * time.Second

// handlerKinds are the two ways a target's handler runs: on a goroutine
// of its own (Handle) or on the event loop (HandleInline).
var handlerKinds = []struct {
	name   string
	inline bool
}{{"goroutine", false}, {"inline", true}}

// unguardedNode is a node that the test aborts itself, once it knows that
// Abort returns: a cleanup's Abort after a deadlock would hang the test
// binary instead of failing the test. All its connections run on one gnet
// loop, so that an inline handler shares its loop with every connection.
func unguardedNode(t *testing.T, be []Option, opts ...Option) *Node {
	t.Helper()
	n, err := NewNode(append(append([]Option{WithEventLoops(1)}, opts...), be...)...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// abortWithin aborts n from the test's goroutine, failing the test if that
// does not return.
func abortWithin(t *testing.T, n *Node, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { n.Abort(); close(done) }()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("Abort of %s has not returned after %v", what, hangGuard)
	}
}

// A handler that meets a fatal error closes its node: Close and Abort,
// called from the handler, return instead of waiting for the handler that
// calls them, the node shuts down, and the handler is given nothing more
// once the call returned (but for Close from an inline handler, which
// goes on receiving while the node flushes in the background).
func TestAHandlerClosesItsNode(t *testing.T) {
	for _, b := range backends(t)[:2] {
		for _, k := range handlerKinds {
			for _, call := range []string{"Close", "Abort"} {
				t.Run(fmt.Sprintf("%s/%s/%s", b.name, k.name, call), func(t *testing.T) {
					testAHandlerClosesItsNode(t, b.opts, k.inline, call == "Abort")
				})
			}
		}
	}
}

func testAHandlerClosesItsNode(t *testing.T, be []Option, inline, abort bool) {
	baseline := runtime.NumGoroutine()
	rx := unguardedNode(t, be, WithListen("127.0.0.1:0"))
	tx := unguardedNode(t, be)
	target := taskid.ID{Processor: 1}
	var (
		called   atomic.Bool
		returned atomic.Bool
		after    atomic.Int64 // runs given to the handler after its call returned
		result   = make(chan error, 1)
	)
	h := func(taskid.Channel, uint64, []Message) {
		if returned.Load() {
			after.Add(1)
			return
		}
		if called.Swap(true) {
			return
		}
		var err error
		if abort {
			rx.Abort()
		} else {
			err = rx.Close(context.Background()) // no deadline: the call must not need one
		}
		returned.Store(true)
		result <- err
	}
	s := handleAndOpen(t, context.Background(), rx, tx, target, h, inline)
	for k := range 50 {
		if err := s.TrySend(int64(k), []byte("fatal")); err != nil {
			t.Fatal(err)
		}
	}
	if err := await(t, result, "the node's shutdown, called from its handler,"); err != nil {
		t.Errorf("Close from the handler: %v, want nil", err)
	}
	if !inline || abort {
		// The node is closed for its users once the call returned.
		if _, err := rx.Peer("127.0.0.1:1"); !errors.Is(err, ErrClosed) {
			t.Errorf("Node.Peer once the handler's call returned: %v, want ErrClosed", err)
		}
		select {
		case <-rx.Stopping():
		default:
			t.Error("Stopping is not closed once the handler's call returned")
		}
	}
	abortWithin(t, rx, "the node its handler closed")
	select {
	case <-rx.Stopping():
	default:
		t.Error("Stopping is not closed after Abort returned")
	}
	if n := after.Load(); n > 0 && (!inline || abort) {
		t.Errorf("the handler was given %d runs after its call returned", n)
	}
	abortWithin(t, tx, "the sending node")
	noGoroutinesOver(t, baseline)
}

// noGoroutinesOver fails the test unless the goroutines of the process
// come down to baseline, the number before its nodes started: a node's
// goroutines, the handler's that closed it among them, end.
func noGoroutinesOver(t *testing.T, baseline int) {
	t.Helper()
	for deadline := time.Now().Add(hangGuard); runtime.NumGoroutine() > baseline; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after the nodes closed, %d before they started\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
		}
	}
}

// A handler may close a peer its node sends to, one that is gone for good
// say, connected or still connecting: Peer.Close returns, its senders fail
// with ErrClosed, and the node makes a new peer for the address.
func TestAHandlerClosesAPeer(t *testing.T) {
	for _, b := range backends(t)[:2] {
		for _, k := range handlerKinds {
			for _, connecting := range []bool{false, true} {
				state := "connected"
				if connecting {
					state = "connecting"
				}
				t.Run(b.name+"/"+k.name+"/"+state, func(t *testing.T) { testAHandlerClosesAPeer(t, b.opts, k.inline, connecting) })
			}
		}
	}
}

// tracksConnOf reports whether n counts a connection of p among its own:
// p's dial loop is then giving the connection to the backend (on gnet,
// waiting for the loop to open it).
func tracksConnOf(n *Node, p *Peer) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.mu.conns {
		if c.peer == p {
			return true
		}
	}
	return false
}

func testAHandlerClosesAPeer(t *testing.T, be []Option, inline, connecting bool) {
	baseline := runtime.NumGoroutine()
	rx := unguardedNode(t, be, WithListen("127.0.0.1:0"))
	tx := unguardedNode(t, be)
	out := unguardedNode(t, be, WithListen("127.0.0.1:0")) // where rx sends
	ctx := ctxT(t, hangGuard)
	var po *Peer
	if !connecting {
		var err error
		if po, err = rx.Peer(out.Addr()); err != nil {
			t.Fatal(err)
		}
		if err := po.WaitConnected(ctx); err != nil {
			t.Fatal(err)
		}
	}
	target := taskid.ID{Processor: 1}
	var (
		called   atomic.Bool
		returned = make(chan error, 1)
	)
	h := func(taskid.Channel, uint64, []Message) {
		if called.Swap(true) {
			return
		}
		if connecting {
			// The handler opens the peer and closes it before it is
			// up: on gnet its dial loop then waits for this loop.
			var err error
			if po, err = rx.Peer(out.Addr()); err != nil {
				returned <- err
				return
			}
			for deadline := time.Now().Add(hangGuard); !tracksConnOf(rx, po) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		}
		returned <- po.Close()
	}
	s := handleAndOpen(t, ctx, rx, tx, target, h, inline)
	if err := s.TrySend(0, []byte("the peer is gone")); err != nil {
		t.Fatal(err)
	}
	if err := await(t, returned, "Peer.Close, called from a handler,"); err != nil {
		t.Fatalf("Peer.Close from the handler: %v, want nil", err)
	}
	if _, err := po.OpenSender(ctx, taskid.ID{Processor: 1}, taskid.ID{Processor: 3}); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenSender on the closed peer: %v, want ErrClosed", err)
	}
	if again, err := rx.Peer(out.Addr()); err != nil || again == po {
		t.Errorf("Node.Peer after the peer closed: %p, %v; want a new peer", again, err)
	}
	// The node still receives.
	if err := s.Flush(ctx); err != nil {
		t.Errorf("Flush to the node whose handler closed a peer: %v", err)
	}
	abortWithin(t, rx, "the node whose handler closed a peer")
	abortWithin(t, tx, "the sending node")
	abortWithin(t, out, "the closed peer's node")
	noGoroutinesOver(t, baseline)
}

// queuedRuns is how many runs wait in target's inbox on n.
func queuedRuns(n *Node, target taskid.ID) int {
	n.mu.Lock()
	in := n.mu.inboxes[target]
	n.mu.Unlock()
	if in == nil {
		return 0
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.mu.q) - in.mu.head
}

// An inline handler registered while runs wait for it is given them first,
// and may call the node from those calls as from any other: open an output
// with Node.Peer, or close the node.
func TestAnInlineHandlerGivenWhatWaitedMayCallTheNode(t *testing.T) {
	for _, b := range backends(t)[:2] {
		for _, reg := range []string{"HandleInline", "HandleAllInline"} {
			for _, call := range []string{"Peer", "Close"} {
				t.Run(b.name+"/"+reg+"/"+call, func(t *testing.T) {
					testAnInlineHandlerGivenWhatWaitedMayCallTheNode(t, b.opts, reg == "HandleAllInline", call == "Close")
				})
			}
		}
	}
}

func testAnInlineHandlerGivenWhatWaitedMayCallTheNode(t *testing.T, be []Option, all, closeNode bool) {
	baseline := runtime.NumGoroutine()
	rx := unguardedNode(t, be, WithListen("127.0.0.1:0"))
	tx := unguardedNode(t, be)
	out := unguardedNode(t, be, WithListen("127.0.0.1:0"))
	ctx := ctxT(t, hangGuard)
	target := taskid.ID{Processor: 1}
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.OpenSender(ctx, taskid.ID{}, target)
	if err != nil {
		t.Fatal(err)
	}
	const sent = 20
	for k := range sent {
		if err := s.Send(ctx, int64(k), payload(s.Channel(), uint64(k), 16)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(hangGuard); queuedRuns(rx, target) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("nothing waits in the target's inbox")
		}
	}
	col := newCollector()
	collect := col.handler(target)
	var (
		called   atomic.Bool
		returned = make(chan error, 1)
	)
	h := func(ch taskid.Channel, first uint64, msgs []Message) {
		collect(ch, first, msgs)
		if called.Swap(true) {
			return
		}
		if closeNode {
			returned <- rx.Close(context.Background())
			return
		}
		_, err := rx.Peer(out.Addr()) // a task opening its outputs
		returned <- err
	}
	registered := make(chan error, 1)
	go func() {
		if all {
			rx.HandleAllInline(func(taskid.ID) Handler { return h })
			registered <- nil
			return
		}
		registered <- rx.HandleInline(target, h)
	}()
	if err := await(t, returned, "the handler's call of the node, given a run that waited,"); err != nil {
		t.Errorf("the handler's call: %v", err)
	}
	if err := await(t, registered, "registering the inline handler"); err != nil {
		t.Fatal(err)
	}
	if !closeNode {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		col.check(t, sent)
	}
	abortWithin(t, rx, "the receiving node")
	abortWithin(t, tx, "the sending node")
	abortWithin(t, out, "the node the handler dials")
	noGoroutinesOver(t, baseline)
}

// handleAndOpen registers h as rx's handler of target (inline or on a
// goroutine of its own) and returns a sender from tx to it.
func handleAndOpen(t *testing.T, ctx context.Context, rx, tx *Node, target taskid.ID, h Handler, inline bool) *Sender {
	t.Helper()
	handle := rx.Handle
	if inline {
		handle = rx.HandleInline
	}
	if err := handle(target, h); err != nil {
		t.Fatal(err)
	}
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.OpenSender(ctx, taskid.ID{}, target)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// await returns what ch gives, failing the test if it gives nothing
// within hangGuard: what (the call that should have sent it) hangs.
func await(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(hangGuard):
		t.Fatalf("%s has not returned after %v", what, hangGuard)
		return nil
	}
}
