package transport

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// streamPair opens a sender over a fresh pair (the default backend, whose
// connections take direct writes) and returns it with its connection and
// the receiver's collector, after a first message has gone through.
func streamPair(t *testing.T) (*Sender, *conn, *collector) {
	t.Helper()
	rx, _, p := newPair(t, nil, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 20*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{Index: 1}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 0, payload(s.Channel(), 0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	c := p.mu.conns[0]
	p.mu.Unlock()
	if !c.takesDirect() {
		t.Fatal("the connection takes no direct writes")
	}
	return s, c, col
}

// holdLoop keeps the connection's loop (in this process, both nodes') busy
// until the returned function is called: it writes and reads nothing
// meanwhile, and neither does the flush the node's timer schedules.
func holdLoop(t *testing.T, c *conn) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	if err := c.lk.Execute(func() { close(held); <-done }); err != nil {
		t.Fatal(err)
	}
	<-held
	return func() { close(done) }
}

func (c *conn) isStreaming() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.streaming
}

func unsentBytes(s *Sender) int {
	s.ch.mu.Lock()
	defer s.ch.mu.Unlock()
	return s.ch.mu.src.UnsentBytes()
}

// burst sends messages first..first+n-1 in one TrySendRun.
func burst(t *testing.T, s *Sender, first, n int) {
	t.Helper()
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i] = Message{Payload: payload(s.Channel(), uint64(first+i), 100)}
	}
	if k, err := s.TrySendRun(msgs); k != n || err != nil {
		t.Fatalf("TrySendRun sent %d of %d: %v", k, n, err)
	}
}

func waitDelivered(t *testing.T, col *collector, n int64) {
	t.Helper()
	waitFor(t, 10*time.Second, "every message", func() bool { return col.count.Load() >= n })
	col.check(t, n)
}

// A sender with more than a batch unsent writes its full batches itself
// while the loop can write nothing; once nothing more is sent, the
// stream-driven state ends (the node's timer) and every message arrives
// once, in order.
func TestAStreamingSenderWritesItsOwnFullBatches(t *testing.T) {
	s, c, col := streamPair(t)
	release := holdLoop(t, c)
	// A first burst, which the sender may write itself at once (an idle
	// connection) or leave to the loop: afterwards the channel streams
	// (more than 64 messages unacknowledged), and what it sends next is
	// neither written at once nor cut into partial batches.
	burst(t, s, 1, 100)
	directBefore := c.stats.direct.Load()
	burst(t, s, 101, 1500) // 150 KB of 100-byte messages: more than two batches
	direct := c.stats.direct.Load() - directBefore
	unsent := unsentBytes(s)
	release()
	if direct < 2 || unsent >= fullBatch(c.node.o.batch) {
		t.Fatalf("with the loop busy, the sender wrote %d batches of 150 KB itself and left %d bytes unsent", direct, unsent)
	}
	waitDelivered(t, col, 1601)
	waitFor(t, 10*time.Second, "the stream-driven state to end with nothing sent", func() bool { return !c.isStreaming() })
}

// A sender writes what it left unsent before it waits, for credit or in
// Flush: with the loop unable to write anything, nothing is left unsent
// once it waits.
func TestAStreamingSenderWritesItsTailBeforeItWaits(t *testing.T) {
	s, c, col := streamPair(t)
	release := holdLoop(t, c)
	defer func() {
		if release != nil {
			release()
		}
	}()
	burst(t, s, 1, 1500)
	sent := 1501

	// A tail shorter than a batch, then Flush, which cannot finish: no
	// ack can come back while the loop is held.
	burst(t, s, sent, 10)
	sent += 10
	if u := unsentBytes(s); u == 0 {
		t.Fatal("the tail went out before the sender waited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := s.Flush(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush with the loop held: %v, want the context's deadline", err)
	}
	if u := unsentBytes(s); u != 0 {
		t.Fatalf("Flush waited with %d bytes unsent", u)
	}

	// Send until the window is full and the sender waits for credit;
	// its wait ends the same way, and makes the connection stream-driven.
	waitStart := c.node.now()
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	for {
		if err := s.Send(ctx, 0, payload(s.Channel(), uint64(sent), 100)); err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Send: %v", err)
			}
			break
		}
		sent++
	}
	cancel()
	if at := c.streamAt.Load(); at < waitStart+int64(40*time.Millisecond) {
		t.Errorf("the wait for credit that ended at %d did not make the connection stream-driven (last at %d)", c.node.now(), at)
	}
	if u := unsentBytes(s); u != 0 {
		c.wmu.Lock()
		cl := len(c.carry)
		c.wmu.Unlock()
		t.Fatalf("the sender waited for credit with %d bytes unsent (carry %d, buffered %v, streaming %v, direct %d, carried %d, sent %d)", u, cl, c.linkBuffered.Load(), c.isStreaming(), c.stats.direct.Load(), c.stats.carried.Load(), sent)
	}
	release()
	release = nil
	waitDelivered(t, col, int64(sent))
}

// A sender whose window never fills halfway, however many messages it has
// unacknowledged, leaves its connection as it was: never stream-driven,
// its messages written by itself on an idle connection or by the loop.
func TestAModerateSenderDoesNotMakeItsConnectionStreamDriven(t *testing.T) {
	s, c, col := streamPair(t)
	ctx := ctxT(t, 20*time.Second)
	sent := 1
	for range 30 {
		for range 100 { // 100 unacknowledged at most: streaming, far from half the window
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(sent), 100)); err != nil {
				t.Fatal(err)
			}
			sent++
			if c.isStreaming() {
				t.Fatalf("stream-driven after %d messages, at most 100 unacknowledged", sent)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	col.check(t, int64(sent))
}

// The stream-driven state, step by step: without direct writes it never
// begins; a sender's full batch starts it; while it lasts, a streaming
// channel queued on the connection wakes nobody, where otherwise it wakes
// the loop; the node's timer ends it once nothing has kept it going for
// streamHold, and not before; a queued channel that finds it stale ends it
// too, and wakes the loop, and so does a read.
func TestTheStreamDrivenStateOfAConnection(t *testing.T) {
	c, lk, fds := socketConn(t)
	c.state.Store(stOpen)
	defer c.close(context.Canceled)
	enqueue := func(ch *channel, mayDirect bool) (direct, wake bool) {
		direct, wake = c.enqueue(ch, 100, mayDirect)
		c.mu.Lock()
		c.mu.ready, c.mu.readyHead = c.mu.ready[:0], 0
		c.mu.scheduled = false
		c.mu.Unlock()
		return direct, wake
	}
	queue := func() (wake bool) { // a streaming channel (many unacknowledged)
		_, wake = enqueue(&channel{}, false)
		return wake
	}

	c.markStreaming(c.node.now(), nil)
	if c.isStreaming() {
		t.Fatal("a connection without direct writes became stream-driven")
	}
	c.setDirectFD(fds[0])
	if !queue() {
		t.Fatal("a streaming channel on a connection not stream-driven did not wake the loop")
	}

	// Times in the future: the state cannot go stale while the test looks.
	t0 := c.node.now() + int64(time.Hour)
	c.markStreaming(t0, nil)
	if !c.isStreaming() {
		t.Fatal("a sender's full batch did not make the connection stream-driven")
	}
	before := lk.executed
	if queue() || lk.executed != before {
		t.Error("a streaming channel queued on a stream-driven connection woke the loop")
	}
	if at, later := c.streamDeadline(t0 + streamHold/2); !later || at != t0+streamHold {
		t.Errorf("half a hold after the last full batch: look again at %d (%v), want %d", at, later, t0+streamHold)
	}
	if _, later := c.streamDeadline(t0 + streamHold); later || c.isStreaming() {
		t.Error("a hold after the last full batch the connection is still stream-driven")
	}
	if !queue() {
		t.Error("once the state ended, a streaming channel did not wake the loop")
	}

	// The channel whose sender made the connection stream-driven counts as
	// streaming however few of its messages are unacknowledged: it neither
	// writes one message alone nor wakes the loop. Another channel with few
	// does, as on any connection.
	streamer := &channel{}
	c.markStreaming(t0, streamer)
	if direct, wake := enqueue(streamer, true); direct || wake {
		t.Errorf("the streamer's channel with few unacknowledged, queued on its stream-driven connection: direct %v, wake %v; want neither", direct, wake)
	}
	if direct, wake := enqueue(&channel{}, true); !direct && !wake {
		t.Error("another channel with few unacknowledged, queued on a stream-driven connection, neither wrote nor woke the loop")
	}
	c.mu.Lock()
	c.streamingLocked(t0 + streamHold) // ends the state
	kept := c.mu.streamer
	c.mu.Unlock()
	if kept != nil {
		t.Error("the state ended and the connection still holds its streamer")
	}

	// Gone stale before the timer looked: the next channel queued ends it.
	c.markStreaming(c.node.now()-2*streamHold, nil)
	if !c.isStreaming() {
		t.Fatal("the state did not begin")
	}
	if !queue() || c.isStreaming() {
		t.Error("a streaming channel queued on a stale stream-driven connection did not wake the loop and end the state")
	}
	// So does a read.
	c.markStreaming(c.node.now()-2*streamHold, nil)
	lk.in = wire.AppendPing(nil, 1, 0)
	if !c.onTraffic(c.node.now()) {
		t.Fatal("the connection closed on a PING")
	}
	if c.isStreaming() {
		t.Error("a read on a stale stream-driven connection did not end the state")
	}
}
