package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// collector checks that each channel's messages arrive once, in order and
// as they were sent: every payload is [payload]'s for its channel and its
// per-channel sequence number, which the collector reads from bytes 0-7
// and rebuilds the rest from, so a byte changed anywhere, a message cut
// short or a message of another channel is an error.
type collector struct {
	mu    sync.Mutex
	next  map[taskid.ID]uint64
	want  []byte // scratch: the payload rebuilt
	count atomic.Int64
	errs  []string
}

func newCollector() *collector { return &collector{next: map[taskid.ID]uint64{}} }

func (c *collector) handler(taskid.ID) Handler {
	return func(ch taskid.Channel, first uint64, msgs []Message) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, m := range msgs {
			if len(m.Payload) < 8 {
				c.errorf("channel %v: a message of %d bytes, too short for a sequence number", ch, len(m.Payload))
				continue
			}
			seq := binary.LittleEndian.Uint64(m.Payload)
			if want := c.next[ch.Source]; seq != want {
				c.errorf("channel %v: got message %d, want %d", ch, seq, want)
			}
			c.next[ch.Source] = seq + 1
			c.want = fillPayload(slices.Grow(c.want[:0], len(m.Payload))[:len(m.Payload)], ch, seq)
			if !bytes.Equal(m.Payload, c.want) {
				i := 0
				for m.Payload[i] == c.want[i] {
					i++
				}
				c.errorf("channel %v: message %d (%d bytes) differs from what was sent from byte %d on", ch, seq, len(m.Payload), i)
			}
		}
		c.count.Add(int64(len(msgs)))
	}
}

// errorf records an error, up to 10. Call with c.mu held.
func (c *collector) errorf(format string, args ...any) {
	if len(c.errs) < 10 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

func (c *collector) check(t *testing.T, want int64) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
	if got := c.count.Load(); got != want {
		t.Errorf("delivered %d messages, want %d", got, want)
	}
}

// holdFirstRunUntilReset is col's handlers, but the first run of all
// waits (up to 10 s) until tx has injected a reset: resets come with the
// node's housekeeping, every 20 ms, and a fast machine sends a test's
// messages in less.
func holdFirstRunUntilReset(col *collector, tx *Node) func(taskid.ID) Handler {
	var once sync.Once
	return func(target taskid.ID) Handler {
		h := col.handler(target)
		return func(ch taskid.Channel, first uint64, msgs []Message) {
			once.Do(func() {
				for deadline := time.Now().Add(10 * time.Second); tx.Stats().Faults.Resets == 0 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			})
			h(ch, first, msgs)
		}
	}
}

// payload returns message seq of channel ch, size bytes (at least 8) long:
// seq in bytes 0-7, little-endian, then filler drawn from a generator
// seeded with ch's source and target, seq and size (ch's epoch is left
// out: a channel reopened keeps its payloads), which the collector rebuilds
// to compare the whole message.
func payload(ch taskid.Channel, seq uint64, size int) []byte {
	return fillPayload(make([]byte, size), ch, seq)
}

// fillPayload writes payload(ch, seq, len(b)) into b and returns it.
func fillPayload(b []byte, ch taskid.Channel, seq uint64) []byte {
	binary.LittleEndian.PutUint64(b, seq)
	x := mix64(mix64(mix64(seq)^(uint64(ch.Source.Processor)<<32|uint64(ch.Source.Index))) ^
		(uint64(ch.Target.Processor)<<32 | uint64(ch.Target.Index)) ^ uint64(len(b))<<40)
	for i := 8; i < len(b); i += 8 {
		x = mix64(x)
		if len(b)-i >= 8 {
			binary.LittleEndian.PutUint64(b[i:], x)
		} else {
			for k := i; k < len(b); k, x = k+1, x>>8 {
				b[k] = byte(x)
			}
		}
	}
	return b
}

// mix64 is SplitMix64's step: a different x gives a different result.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// testNode returns a new node with opts, aborted when the test ends.
func testNode(t testing.TB, opts ...Option) *Node {
	t.Helper()
	n, err := NewNode(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Abort)
	return n
}

// listeningNode is testNode listening on a loopback port, with opts and then
// the backend's options be.
func listeningNode(t testing.TB, be []Option, opts ...Option) *Node {
	t.Helper()
	return testNode(t, append(append([]Option{WithListen("127.0.0.1:0")}, opts...), be...)...)
}

func newPair(t testing.TB, rxOpts, txOpts []Option) (rx, tx *Node, p *Peer) {
	t.Helper()
	rx = listeningNode(t, nil, rxOpts...)
	tx = testNode(t, txOpts...)
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return rx, tx, p
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sendAll sends n messages on each of channels channels, concurrently, and
// waits until all are acknowledged.
func sendAll(t *testing.T, ctx context.Context, p *Peer, channels, n, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, channels)
	for i := range channels {
		s, err := p.OpenSender(ctx, taskid.ID{Processor: 0, Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i % 4)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range n {
				if err := s.Send(ctx, int64(k), payload(s.Channel(), uint64(k), size)); err != nil {
					errs <- err
					return
				}
			}
			if err := s.Flush(ctx); err != nil {
				errs <- fmt.Errorf("flush: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestMessagesArriveOnceAndInOrder(t *testing.T) {
	forEachBackend(t, testMessagesArriveOnceAndInOrder)
}

func testMessagesArriveOnceAndInOrder(t *testing.T, be []Option) {
	rx, _, p := newPairOn(t, be, nil, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	sendAll(t, ctxT(t, 20*time.Second), p, 1, 20000, 100)
	col.check(t, 20000)
}

func TestManyChannelsShareOneConnection(t *testing.T) {
	forEachBackend(t, testManyChannelsShareOneConnection)
}

func testManyChannelsShareOneConnection(t *testing.T, be []Option) {
	rx, tx, p := newPairOn(t, be, nil, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	sendAll(t, ctxT(t, 20*time.Second), p, 200, 300, 64)
	col.check(t, 200*300)
	if conns := tx.Stats().Conns; len(conns) != 1 {
		t.Errorf("%d connections, want 1", len(conns))
	}
}

// Send, TrySend, SendRun and Flush are safe for concurrent use on one
// Sender: goroutines sharing it at full speed, each with its own mix of
// single messages and runs, deliver every message once, and each
// goroutine's in the order it sent them, while the channel's senders write
// full batches themselves and the loop writes the rest (on gnet).
func TestGoroutinesSharingASenderEachKeepTheirOrder(t *testing.T) {
	forEachBackend(t, testGoroutinesSharingASender)
}

func testGoroutinesSharingASender(t *testing.T, be []Option) {
	const goroutines, n, size = 4, 40000, 100
	rx, tx, p := newPairOn(t, be, nil, nil)
	var (
		mu      sync.Mutex
		next    [goroutines]uint32
		got     int
		badSeen []string
	)
	delivered := make(chan struct{})
	rx.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range msgs {
				g, k := binary.LittleEndian.Uint32(m.Payload), binary.LittleEndian.Uint32(m.Payload[4:])
				switch {
				case g >= goroutines:
					badSeen = append(badSeen, fmt.Sprintf("message from goroutine %d", g))
				case k != next[g]:
					badSeen = append(badSeen, fmt.Sprintf("goroutine %d: got its message %d, want %d", g, k, next[g]))
				}
				if g < goroutines {
					next[g] = k + 1
				}
			}
			if got += len(msgs); got == goroutines*n {
				close(delivered)
			}
		}
	})
	ctx := ctxT(t, 60*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{Processor: 0}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	msg := func(g, k int) []byte {
		b := make([]byte, size)
		binary.LittleEndian.PutUint32(b, uint32(g))
		binary.LittleEndian.PutUint32(b[4:], uint32(k))
		return b
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			run := make([]Message, 0, 64)
			for k := 0; k < n; {
				var err error
				switch (g + k/97) % 3 { // each goroutine changes its way every 97 messages
				case 0: // one Send
					err = s.Send(ctx, int64(k), msg(g, k))
					k++
				case 1: // a run of 1 to 64
					run = run[:0]
					for len(run) < 1+k%64 && k+len(run) < n {
						run = append(run, Message{Ts: int64(k + len(run)), Payload: msg(g, k+len(run))})
					}
					var sent int
					sent, err = s.SendRun(ctx, run)
					k += sent
				default: // TrySend, and Send where it finds no credit
					if err = s.TrySend(int64(k), msg(g, k)); errors.Is(err, ErrNoCredit) {
						err = s.Send(ctx, int64(k), msg(g, k))
					}
					k++
				}
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, message %d: %w", g, k, err)
					return
				}
			}
			if err := s.Flush(ctx); err != nil {
				errs <- fmt.Errorf("goroutine %d: flush: %w", g, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range badSeen[:min(len(badSeen), 10)] {
		t.Error(e)
	}
	if got != goroutines*n {
		t.Errorf("delivered %d messages, want %d", got, goroutines*n)
	}
	if be != nil {
		return
	}
	// The gnet backend: the paths this test is about both ran.
	var st ConnStats
	for _, c := range tx.Stats().Conns {
		st.add(c)
	}
	if st.DirectWrites == 0 || st.Batches <= st.DirectWrites {
		t.Errorf("%d batches, %d of them written by senders: want both senders and the loop writing", st.Batches, st.DirectWrites)
	}
}

func TestSeveralConnectionsPerPeer(t *testing.T) { forEachBackend(t, testSeveralConnectionsPerPeer) }

func testSeveralConnectionsPerPeer(t *testing.T, be []Option) {
	rx, tx, p := newPairOn(t, be, nil, []Option{WithConnectionsPerPeer(3)})
	col := newCollector()
	rx.HandleAll(col.handler)
	sendAll(t, ctxT(t, 20*time.Second), p, 12, 500, 64)
	col.check(t, 12*500)
	if conns := tx.Stats().Conns; len(conns) != 3 {
		t.Errorf("%d connections, want 3", len(conns))
	}
}

func TestMessagesSentBeforeTheHandlerRegistersWait(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) { testMessagesSentBeforeTheHandlerRegistersWait(t, be, false) })
}

// Runs that wait in the inbox before HandleInline are delivered first, in
// order, and later ones inline after them.
func TestHandleInlineDeliversWhatArrivedBeforeFirst(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) { testMessagesSentBeforeTheHandlerRegistersWait(t, be, true) })
}

func testMessagesSentBeforeTheHandlerRegistersWait(t *testing.T, be []Option, inline bool) {
	rx, _, p := newPairOn(t, be, nil, nil)
	ctx := ctxT(t, 10*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{Processor: 0}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	send := func(from, to int) {
		for k := from; k < to; k++ {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 16)); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 300)
	time.Sleep(20 * time.Millisecond)
	col := newCollector()
	handle := rx.Handle
	if inline {
		handle = rx.HandleInline
	}
	if err := handle(taskid.ID{Processor: 1}, col.handler(taskid.ID{})); err != nil {
		t.Fatal(err)
	}
	send(300, 3000)
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	col.check(t, 3000)
}

func TestTrySendSaysWhenTheWindowIsFull(t *testing.T) {
	forEachBackend(t, testTrySendSaysWhenTheWindowIsFull)
}

func testTrySendSaysWhenTheWindowIsFull(t *testing.T, be []Option) {
	_, _, p := newPairOn(t, be, nil, nil) // no handler: nothing is consumed, so nothing is acknowledged
	ctx := ctxT(t, 10*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	var sent int
	for ; sent < 1<<20; sent++ {
		if err := s.TrySend(0, payload(s.Channel(), uint64(sent), 100)); err != nil {
			if !errors.Is(err, ErrNoCredit) {
				t.Fatalf("TrySend: %v, want ErrNoCredit", err)
			}
			break
		}
	}
	if sent == 0 || sent == 1<<20 {
		t.Fatalf("window took %d messages before refusing", sent)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Send(short, 0, payload(s.Channel(), 0, 100)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send on a full window: %v, want the context's deadline", err)
	}
	if err := s.TrySend(0, make([]byte, 64<<20)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("TrySend of 64 MiB: %v, want ErrTooLarge", err)
	}
}

func TestChannelsSurviveConnectionResets(t *testing.T) {
	forEachBackend(t, testChannelsSurviveConnectionResets)
}

func testChannelsSurviveConnectionResets(t *testing.T, be []Option) {
	f := Faults{Reset: 5 * time.Millisecond, Seed: 3}
	rx, tx, p := newPairOn(t, be, nil, []Option{WithFaults(f), WithReconnectBackoff(time.Millisecond, 10*time.Millisecond)})
	col := newCollector()
	// The first run waits for a reset, so that one happens however fast
	// the rest goes.
	rx.HandleAll(holdFirstRunUntilReset(col, tx))
	sendAll(t, ctxT(t, 60*time.Second), p, 8, 30000, 100)
	col.check(t, 8*30000)
	if r := tx.Stats().Faults.Resets; r == 0 {
		t.Error("no reset was injected; the test proves nothing")
	}
}

func TestLossDuplicationAndAckLossAreRepaired(t *testing.T) {
	forEachBackend(t, testLossDuplicationAndAckLossAreRepaired)
}

func testLossDuplicationAndAckLossAreRepaired(t *testing.T, be []Option) {
	f := Faults{Drop: 0.1, CtrlDrop: 0.1, Dup: 0.05, Seed: 11}
	rx, tx, p := newPairOn(t, be, []Option{WithFaults(Faults{CtrlDrop: 0.1, Dup: 0.05, Seed: 12})}, []Option{WithFaults(f)})
	col := newCollector()
	rx.HandleAll(col.handler)
	sendAll(t, ctxT(t, 60*time.Second), p, 16, 3000, 100)
	col.check(t, 16*3000)
	// Both nodes inject: the source drops data and ack requests, the target
	// acks. Frames are few (4.8 MB in 64 KiB batches; a request per quarter
	// window or drained burst), so the rates are high enough that each kind
	// of fault is all but certain to happen.
	fs, rs := tx.Stats().Faults, rx.Stats().Faults
	if fs.DataDropped == 0 || fs.CtrlDropped+rs.CtrlDropped == 0 || fs.Duplicated+rs.Duplicated == 0 {
		t.Errorf("faults injected %+v at the source, %+v at the target; want some of each", fs, rs)
	}
}

func TestASlowPeerDoesNotHoldBackAFastOne(t *testing.T) {
	slow, err := NewNode(WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Abort()
	slow.HandleAll(func(taskid.ID) Handler {
		return func(taskid.Channel, uint64, []Message) { time.Sleep(50 * time.Millisecond) }
	})
	fast, err := NewNode(WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Abort()
	col := newCollector()
	fast.HandleAll(col.handler)
	tx, err := NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	ctx := ctxT(t, 20*time.Second)
	ps, _ := tx.Peer(slow.Addr())
	s, err := ps.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for k := 0; ctx.Err() == nil; k++ {
			if s.Send(ctx, 0, payload(s.Channel(), uint64(k), 1000)) != nil {
				return
			}
		}
	}()
	pf, _ := tx.Peer(fast.Addr())
	sendAll(t, ctx, pf, 2, 20000, 100)
	col.check(t, 2*20000)
}

func TestAReceiverRestartedOnTheSameAddressGetsEverythingUnacknowledged(t *testing.T) {
	rx, err := NewNode(WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := rx.Addr()
	var first atomic.Int64
	rx.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) { first.Add(int64(len(msgs))) }
	})
	tx, err := NewNode(WithReconnectBackoff(time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	ctx := ctxT(t, 30*time.Second)
	p, _ := tx.Peer(addr)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50000
	done := make(chan error, 1)
	go func() {
		for k := range n {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 100)); err != nil {
				done <- err
				return
			}
			if k == n/4 {
				rx.Abort() // killed mid-stream, mid-batch
			}
		}
		done <- nil
	}()
	for first.Load() < n/8 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	var rx2 *Node
	for ctx.Err() == nil { // the port is free again once the old listener is gone
		if rx2, err = NewNode(WithListen(addr)); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rx2 == nil {
		t.Fatal(err)
	}
	defer rx2.Abort()
	var maxSeq atomic.Uint64
	var second atomic.Int64
	rx2.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) {
			second.Add(int64(len(msgs)))
			maxSeq.Store(binary.LittleEndian.Uint64(msgs[len(msgs)-1].Payload))
		}
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if maxSeq.Load() != n-1 {
		t.Errorf("the new receiver's last message is %d, want %d", maxSeq.Load(), n-1)
	}
	// Whatever the first receiver consumed but did not acknowledge is sent
	// again: the new node never saw it. Nothing is lost.
	if got := first.Load() + second.Load(); got < n {
		t.Errorf("the two receivers got %d messages in all, fewer than the %d sent", got, n)
	}
}

// rawConn dials addr with a plain socket, for tests that play a hostile peer.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readGoAway reads until the node closes the connection and returns the
// GOAWAY it sent, if any.
func readGoAway(t *testing.T, c net.Conn) (wire.GoAway, bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang guard
	all, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the node did not close the connection")
		}
	}
	if len(all) < wire.PrefaceLen {
		return wire.GoAway{}, false
	}
	b := all[wire.PrefaceLen:]
	for len(b) > 0 {
		f, n, err := wire.DecodeFrame(b, wire.DefaultMaxFrame)
		if err != nil {
			return wire.GoAway{}, false
		}
		if f.Type == wire.FrameGoAway {
			g, err := wire.ParseGoAway(f.Body)
			return g, err == nil
		}
		b = b[n:]
	}
	return wire.GoAway{}, false
}

func goodPreface() []byte {
	return wire.AppendPreface(nil, wire.Preface{Version: wire.Version, NodeID: 42})
}

func TestHostilePeersLoseOnlyTheirOwnConnection(t *testing.T) {
	forPlainBackends(t, testHostilePeersLoseOnlyTheirOwnConnection)
}

func testHostilePeersLoseOnlyTheirOwnConnection(t *testing.T, be []Option) {
	// A handshake timeout that closes the peer stopping mid-frame soon,
	// and gives a loop busy with the legitimate flow time to read the
	// other peers' input: at 300 ms, under -race on a core shared with two
	// CPU-bound processes, the timeout closed the endless varint's
	// connection before the loop read it ("no GOAWAY before the close").
	rx, _, p := newPairOn(t, be, []Option{WithHandshakeTimeout(2 * time.Second)}, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 30*time.Second)
	var legit sync.WaitGroup
	legit.Add(1)
	go func() { defer legit.Done(); sendAll(t, ctx, p, 4, 20000, 100) }()

	bigLen := func() []byte {
		b := append(goodPreface(), byte(wire.FrameData), 0)
		b = binary.BigEndian.AppendUint32(b, 1<<30)
		return binary.BigEndian.AppendUint32(b, 0)
	}
	endlessVarint := func() []byte {
		body := bytes.Repeat([]byte{0xff}, 64)
		b := append(goodPreface(), byte(wire.FrameOpen), 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = binary.BigEndian.AppendUint32(b, crc32c(body))
		return append(b, body...)
	}
	unknownChannel := func() []byte {
		f, start := wire.BeginFrame(goodPreface(), wire.FrameData, 0)
		f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 7, FirstSeq: 0, Count: 1})
		f = wire.AppendMessage(f, 0, 0, []byte("hi"))
		return wire.FinishFrame(f, start)
	}
	badCRC := func() []byte {
		b := wire.AppendPing(goodPreface(), 1, 0)
		b[len(b)-1] ^= 0xff
		return b
	}
	cases := []struct {
		name  string
		input []byte
		code  wire.GoAwayCode
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), wire.GoAwayProtocolError},
		{"the wrong magic", append([]byte("SLCX"), goodPreface()[4:]...), wire.GoAwayProtocolError},
		{"another protocol version", func() []byte { b := goodPreface(); b[4] = 9; return b }(), wire.GoAwayVersionMismatch},
		{"an oversized length", bigLen(), wire.GoAwayLimit},
		{"an endless varint", endlessVarint(), wire.GoAwayProtocolError},
		{"a channel never opened", unknownChannel(), wire.GoAwayProtocolError},
		{"a checksum mismatch", badCRC(), wire.GoAwayProtocolError},
	}
	for _, tc := range cases {
		t.Run(tc.name+" closes the connection with a GOAWAY", func(t *testing.T) {
			c := rawConn(t, rx.Addr())
			if _, err := c.Write(tc.input); err != nil {
				t.Fatal(err)
			}
			g, ok := readGoAway(t, c)
			if !ok {
				t.Fatal("no GOAWAY before the close")
			}
			if g.Code != tc.code {
				t.Errorf("GOAWAY %v (%s), want %v", g.Code, g.Message, tc.code)
			}
		})
	}
	t.Run("a peer that stops mid-frame is closed at the handshake timeout or kept harmlessly", func(t *testing.T) {
		c := rawConn(t, rx.Addr())
		_, _ = c.Write(goodPreface()[:7])
		if _, ok := readGoAway(t, c); ok {
			t.Error("unexpected GOAWAY")
		}
	})
	legit.Wait()
	col.check(t, 4*20000)
}

func TestAVersionMismatchIsAClearErrorOnTheDialingSide(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b := goodPreface()
			b[4] = 9
			_, _ = c.Write(b)
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	tx, err := NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	p, _ := tx.Peer(ln.Addr().String())
	err = p.WaitConnected(ctxT(t, 5*time.Second))
	if !errors.Is(err, ErrRejected) && !errors.Is(err, wire.ErrVersion) {
		t.Fatalf("WaitConnected: %v, want a version error", err)
	}
	if !errors.Is(err, wire.ErrVersion) {
		t.Errorf("error %q does not say the version differs", err)
	}
}

func TestCloseWaitsForAcknowledgements(t *testing.T) {
	forEachBackend(t, testCloseWaitsForAcknowledgements)
}

func testCloseWaitsForAcknowledgements(t *testing.T, be []Option) {
	rx, tx, p := newPairOn(t, be, nil, nil)
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 10*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 5000 {
		if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Close(ctx); err != nil {
		t.Fatal(err)
	}
	col.check(t, 5000)
	if err := s.TrySend(0, payload(s.Channel(), 0, 100)); !errors.Is(err, ErrClosed) {
		t.Errorf("TrySend after Close: %v, want ErrClosed", err)
	}
}

func TestCompressedBatchesArriveIntactAndSmaller(t *testing.T) {
	rx, tx, p := newPair(t, []Option{WithCompression(true)}, []Option{WithCompression(true)})
	var got atomic.Int64
	var bad atomic.Int64
	rx.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) {
			for _, m := range msgs {
				if !bytes.Equal(m.Payload[8:], bytes.Repeat([]byte("sluice "), 128)[:len(m.Payload)-8]) {
					bad.Add(1)
				}
			}
			got.Add(int64(len(msgs)))
		}
	})
	ctx := ctxT(t, 20*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	text := bytes.Repeat([]byte("sluice "), 128)
	const n, size = 20000, 200
	for k := range n {
		b := append(binary.LittleEndian.AppendUint64(nil, uint64(k)), text[:size-8]...)
		if err := s.Send(ctx, int64(k), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got.Load() != n || bad.Load() != 0 {
		t.Fatalf("delivered %d of %d, %d damaged", got.Load(), n, bad.Load())
	}
	if wireOut := tx.Stats().Totals().WireOut; wireOut >= n*size/2 {
		t.Errorf("%d bytes on the wire for %d bytes of repetitive payload: not compressed", wireOut, n*size)
	}
}

func TestCompressionNeedsBothSides(t *testing.T) {
	rx, tx, p := newPair(t, nil, []Option{WithCompression(true)})
	col := newCollector()
	rx.HandleAll(col.handler)
	sendAll(t, ctxT(t, 20*time.Second), p, 1, 5000, 200)
	col.check(t, 5000)
	if wireOut := tx.Stats().Totals().WireOut; wireOut < 5000*200 {
		t.Errorf("%d bytes on the wire for 1,000,000 bytes of payload: compressed for a peer that did not offer it", wireOut)
	}
}

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
	fs := tx.Stats().Faults
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
	txB := testNode(t, be...)
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
	if err := rx.HandleInline(target, func(ch taskid.Channel, first uint64, msgs []Message) {
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
					if err := s.Send(ctx, 0, payload(s.Channel(), uint64(n), 64)); err != nil {
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

func TestATargetTakesOneHandlerOfEitherKind(t *testing.T) {
	n, err := NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Abort()
	h := func(taskid.Channel, uint64, []Message) {}
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

// A handler blocked on work of its own (an application that has not taken
// its message) returns when Stopping is closed, so that Abort does not wait
// for it forever; what it returns then is not acknowledged: the source still
// holds every message.
func TestStoppingReleasesABlockedHandlerWithoutAcknowledging(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx, _, p := newPairOn(t, be, nil, nil)
		entered := make(chan struct{}, 1)
		err := rx.Handle(taskid.ID{Processor: 1}, func(_ taskid.Channel, _ uint64, msgs []Message) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-rx.Stopping()
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxT(t, 10*time.Second)
		s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		const n = 3
		for k := range n {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 100)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the handler was never called")
		}
		aborted := make(chan struct{})
		go func() { rx.Abort(); close(aborted) }()
		select {
		case <-aborted:
		case <-ctx.Done():
			t.Fatal("Abort waits for a handler blocked until Stopping")
		}
		if got := s.Stats().Unacked; got != n {
			t.Fatalf("the source holds %d messages unacknowledged, want all %d: a handler cut short by the shutdown acknowledged what it never took", got, n)
		}
	})
}

// The collector compares whole payloads: a message with one byte changed
// past its sequence number, one cut short, or one of another channel with
// the expected sequence number is an error, and the messages as sent are
// not.
func TestCollectorRejectsAChangedByteAShortMessageAndAnotherChannels(t *testing.T) {
	a := taskid.Channel{Source: taskid.ID{Index: 1}, Target: taskid.ID{Processor: 1}}
	b := taskid.Channel{Source: taskid.ID{Index: 2}, Target: taskid.ID{Processor: 1}}
	flipped := payload(a, 1, 100)
	flipped[57] ^= 0x10
	for _, tc := range []struct {
		name string
		msg  []byte
		ok   bool
	}{
		{"the message as sent", payload(a, 1, 100), true},
		{"a byte changed", flipped, false},
		{"the message cut short", payload(a, 1, 100)[:99], false},
		{"another channel's message", payload(b, 1, 100), false},
		{"another target's message", payload(taskid.Channel{Source: a.Source, Target: taskid.ID{Processor: 2}}, 1, 100), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := newCollector()
			h := col.handler(a.Target)
			h(a, 0, []Message{{Payload: payload(a, 0, 100)}})
			h(a, 1, []Message{{Payload: tc.msg}})
			if ok := len(col.errs) == 0; ok != tc.ok {
				t.Errorf("collector errors %q, want none: %v", col.errs, tc.ok)
			}
			if col.count.Load() != 2 {
				t.Errorf("counted %d messages, want 2", col.count.Load())
			}
		})
	}
}
