package transport

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// recLink is a link that records what the loop writes.
type recLink struct {
	wrote    []byte
	in       []byte // what Peek shows
	executed int
}

func (l *recLink) Peek(int) ([]byte, error)    { return l.in, nil }
func (l *recLink) Discard(int) (int, error)    { return 0, nil }
func (l *recLink) Write(b []byte) (int, error) { l.wrote = append(l.wrote, b...); return len(b), nil }
func (l *recLink) Writev(bs [][]byte) (int, error) {
	n := 0
	for _, b := range bs {
		l.wrote = append(l.wrote, b...)
		n += len(b)
	}
	return n, nil
}
func (l *recLink) OutboundBuffered() int  { return 0 }
func (l *recLink) Execute(loopFunc) error { l.executed++; return nil }
func (l *recLink) Close() error           { return errors.New("not closable") }

// socketConn returns a conn of a fresh node whose link records the loop's
// writes, and a connected pair of non-blocking sockets, closed at the end
// of the test (the conn's end is fds[0]).
func socketConn(t *testing.T) (*conn, *recLink, [2]int) {
	t.Helper()
	n := testNode(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	c := newConn(n, nil, 0)
	lk := &recLink{}
	c.lk = lk
	return c, lk, [2]int{fds[0], fds[1]}
}

// openDirectConn returns an open conn of node n that takes direct writes,
// to one end of a socket pair, and whose link records the loop's writes;
// the sockets and the conn close at the end of the test.
func openDirectConn(t *testing.T, n *Node) *conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	c := newConn(n, nil, 0)
	c.lk = &recLink{}
	c.setDirectFD(fds[0])
	c.state.Store(stOpen)
	t.Cleanup(func() { c.close(context.Canceled) })
	return c
}

// A direct write the kernel takes only in part leaves the rest in carry,
// schedules the loop, and the loop writes the rest before anything newer:
// the byte stream is exactly what was written, in order.
func TestADirectWriteTakenInPartIsFinishedByTheLoopFirst(t *testing.T) {
	c, lk, fds := socketConn(t)
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 4096)
	c.setDirectFD(fds[0])
	c.state.Store(stOpen)
	defer c.close(context.Canceled)

	first := bytes.Repeat([]byte("0123456789abcdef"), 1<<14) // 256 KiB: more than the socket holds
	c.wmu.Lock()
	if _, ok := c.writeDirect([][]byte{first[:1000], first[1000:]}, len(first)); !ok {
		t.Fatal("the direct write failed")
	}
	c.wmu.Unlock()
	if len(c.carry) == 0 || len(c.carry) >= len(first) {
		t.Fatalf("carry holds %d of %d bytes, want a proper tail", len(c.carry), len(first))
	}
	if c.stats.direct.Load() != 1 || c.stats.carried.Load() != 1 {
		t.Errorf("direct %d, carried %d, want 1 and 1", c.stats.direct.Load(), c.stats.carried.Load())
	}
	if lk.executed == 0 {
		t.Error("the loop was not scheduled to write the rest")
	}
	// Something newer is queued behind it: a control frame.
	c.sendCtrl(func(b []byte) []byte { return append(b, "NEWER"...) })

	// A direct writer must now leave the writing to the loop.
	c.wmu.Lock()
	c.flushLocked(true)
	c.wmu.Unlock()
	if len(lk.wrote) != 0 || c.stats.direct.Load() != 1 {
		t.Fatal("a direct write went ahead of the carried bytes")
	}

	got := make([]byte, 0, len(first))
	buf := make([]byte, 64<<10)
	for {
		k, err := unix.Read(fds[1], buf)
		if k <= 0 || err != nil {
			break
		}
		got = append(got, buf[:k]...)
	}
	c.flush() // the loop
	got = append(got, lk.wrote...)
	want := append(append([]byte(nil), first...), "NEWER"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream has %d bytes, want %d, or differs in content", len(got), len(want))
	}
	if len(c.carry) != 0 {
		t.Error("carry was not emptied")
	}
}

// Closing the connection closes the duplicate descriptor of direct writes,
// so a later direct write fails cleanly instead of reaching whatever socket
// reuses the number.
func TestClosingAConnectionEndsItsDirectWrites(t *testing.T) {
	c, _, fds := socketConn(t)
	c.setDirectFD(fds[0])
	if c.fd < 0 || c.fd == fds[0] {
		t.Fatalf("direct fd %d, want a duplicate of %d", c.fd, fds[0])
	}
	dup := c.fd
	c.state.Store(stOpen)
	c.close(context.Canceled)
	if c.fd != -1 {
		t.Fatal("the duplicate was not released")
	}
	if _, err := unix.FcntlInt(uintptr(dup), unix.F_GETFD, 0); err == nil {
		t.Error("the duplicate descriptor is still open")
	}
	c.wmu.Lock()
	_, ok := c.writeDirect([][]byte{[]byte("late")}, 4)
	c.wmu.Unlock()
	if ok {
		t.Error("a direct write after close succeeded")
	}
}

// A closed channel's number is not given to a new channel until the
// receiver has answered a PING sent after the CLOSE: an ack of the old
// channel still on its way must never be taken for the new one's. Acks that
// arrive for the closed number meanwhile are dropped without a protocol
// error.
func TestAClosedChannelsNumberWaitsForAPongBeforeReuse(t *testing.T) {
	rx, _, p := newPair(t, nil, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 20*time.Second)
	a, err := p.OpenSender(ctx, taskid.ID{Index: 1}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := a.Send(ctx, 0, payload(a.Channel(), uint64(i), 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	c := p.mu.conns[0]
	p.mu.Unlock()
	num := func(s *Sender) uint32 {
		s.ch.mu.Lock()
		defer s.ch.mu.Unlock()
		return s.ch.mu.num
	}
	old := num(a)
	c.mu.Lock()
	held := c.retireLocked(old) // as Close does, but without its PING: nothing releases it
	c.mu.Unlock()
	if held == 0 {
		t.Fatal("the number was not retired")
	}
	// A late ack under the retired number is harmless.
	if err := c.handle(wire.Frame{Type: wire.FrameAck, Body: wire.AppendAck(nil, wire.Ack{Channel: old, Epoch: 0, Next: 100})[wire.HeaderLen:]}); err != nil {
		t.Fatalf("a late ack of a closed channel: %v", err)
	}
	b, err := p.OpenSender(ctx, taskid.ID{Index: 2}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if num(b) == old {
		t.Fatalf("channel number %d reused before the PONG", old)
	}
	c.releaseRetired(held) // the PONG
	d, err := p.OpenSender(ctx, taskid.ID{Index: 3}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if num(d) != old {
		t.Errorf("after the PONG the freed number %d was not reused (got %d)", old, num(d))
	}
	for _, s := range []*Sender{b, d} {
		for i := range 100 {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(i), 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	col.check(t, 300)
	// Close sends CLOSE and a PING; the PONG frees the number.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.hasRetired() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c.hasRetired() {
		t.Error("the PONG never freed the closed channel's number")
	}
}

// A write descheduled now and then barely moves the average that decides
// whether senders may write directly; writes that really take longer
// raise it within a dozen writes.
func TestWriteCostIgnoresStallsAndFollowsRealChanges(t *testing.T) {
	const us = int64(time.Microsecond)
	avg := int64(0)
	for range 100 {
		avg = nextWriteCost(avg, 5*us)
	}
	if avg < 4*us || avg > 5*us {
		t.Fatalf("after steady 5µs writes the average is %v", time.Duration(avg))
	}
	avg = nextWriteCost(avg, 800*us) // one write that lost its thread
	if avg > 7*us {
		t.Errorf("one 800µs stall raised the average to %v, want <= 7µs", time.Duration(avg))
	}
	for range 3 {
		avg = nextWriteCost(avg, 5*us)
	}
	n := 0
	for ; avg < 40*us && n < 100; n++ {
		avg = nextWriteCost(avg, 50*us)
	}
	if n > 20 {
		t.Errorf("writes of 50µs took %d writes to raise the average past 40µs, want <= 20", n)
	}
}

// What the loop schedules while it reads (here, the PONG that answers a
// PING) goes out when the read is done, without a wake-up of the loop
// (Execute: a write to gnet's eventfd and one more turn of the loop); what
// another goroutine schedules afterwards wakes it as before.
func TestWhatTheLoopSchedulesWhileReadingGoesOutWithoutAWakeUp(t *testing.T) {
	c, lk, _ := socketConn(t)
	c.state.Store(stOpen)
	defer c.close(context.Canceled)
	lk.in = wire.AppendPing(nil, 42, 0)
	if !c.onTraffic(c.node.now()) {
		t.Fatal("the connection closed on a PING")
	}
	if lk.executed != 0 {
		t.Errorf("reading a PING woke the loop %d times", lk.executed)
	}
	want := wire.AppendPong(nil, wire.Pong{Value: 42})
	if !bytes.Equal(lk.wrote, want) {
		t.Fatalf("the loop wrote %x, want the PONG %x", lk.wrote, want)
	}

	lk.in, lk.wrote = nil, nil
	c.sendCtrl(func(b []byte) []byte { return wire.AppendPong(b, wire.Pong{Value: 7}) })
	if lk.executed != 1 || len(lk.wrote) != 0 {
		t.Fatalf("a frame queued outside a read: %d wake-ups and %d bytes written, want 1 and none yet", lk.executed, len(lk.wrote))
	}
	c.flush() // the woken loop
	if want := wire.AppendPong(nil, wire.Pong{Value: 7}); !bytes.Equal(lk.wrote, want) {
		t.Fatalf("the woken loop wrote %x, want %x", lk.wrote, want)
	}
}

// A direct write on one of a node's connections holds off direct writes on
// its others for the gap (directGap, or the write's cost if longer): a
// producer that sends to many peers in turn, each connection idle by
// itself, leaves the writing to the loop instead of making a system call
// for each message. Past the gap a sender writes directly again.
func TestADirectWriteHoldsOffTheNodesOtherConnections(t *testing.T) {
	n := testNode(t)
	a, b := openDirectConn(t, n), openDirectConn(t, n)
	// b has not been written for ten seconds and takes 100 ms a write: by
	// its own gap alone it is idle.
	const cost = int64(100 * time.Millisecond)
	b.lastWrite.Store(n.now() - int64(10*time.Second))
	b.writeCost.Store(cost)

	a.wmu.Lock()
	if _, ok := a.writeDirect([][]byte{[]byte("a frame")}, len("a frame")); !ok {
		t.Fatal("the direct write on the first connection failed")
	}
	a.wmu.Unlock()
	if last := n.lastDirect.Load(); last == 0 || n.now()-last >= cost {
		t.Fatalf("the node's last direct write is at %d, now %d: not recorded", last, n.now())
	}
	if direct, _ := b.enqueue(&channel{}, 100, true); direct {
		t.Fatal("a sender wrote directly to a second connection right after a direct write to the first")
	}
	b.mu.Lock()
	b.mu.scheduled = false
	b.mu.Unlock()

	n.lastDirect.Store(n.now() - 2*cost)
	if direct, _ := b.enqueue(&channel{}, 100, true); !direct {
		t.Error("past the gap a sender does not write directly to an idle connection")
	}
}
