package transport

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

var errTestReset = errors.New("test: connection reset by the test")

// A reconnect that comes while Sender.Close is under way must find the
// channel closed: were it still open, the new connection would give it a
// number that Close, which retires the number on the old connection,
// never retires.
func TestAReconnectDuringSenderCloseGivesTheChannelNoNumber(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx, tx, p := newPairOn(t, be, nil, []Option{WithReconnectBackoff(time.Millisecond, 2*time.Millisecond)})
		rx.HandleAll(newCollector().handler)
		ctx := ctxT(t, 10*time.Second) // hang guard
		s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, 0, payload(s.Channel(), 0, 100)); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		slotConn := func() *conn {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.mu.conns[s.ch.slot]
		}
		old := slotConn()
		var reconnected *conn
		testHookClosed = func(ch *channel) {
			if ch != s.ch {
				return
			}
			tx.abort(old, errTestReset)
			// attach sets the slot's connection and attaches its channels
			// under one hold of p.mu.
			for reconnected = slotConn(); reconnected == nil || reconnected == old; reconnected = slotConn() {
				if ctx.Err() != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
		t.Cleanup(func() { testHookClosed = nil })
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if reconnected == nil || reconnected == old {
			t.Fatalf("the peer did not reconnect while Close was under way: %v", ctx.Err())
		}
		c := reconnected
		c.mu.Lock()
		defer c.mu.Unlock()
		if slices.Contains(c.mu.outByNum, s.ch) {
			t.Error("the closed channel is carried by the connection that came up while it closed")
		}
		if num, ok := c.mu.outTable.Number(s.Channel()); ok {
			t.Errorf("the closed channel holds number %d, never to be retired, on the connection that came up while it closed", num)
		}
	})
}

// A sender closed and opened again with the same key (and so the same
// epoch) goes on where the closed one left off: every message of the
// second one arrives, in order, whether the first was flushed before it
// closed or closed with messages still unacknowledged, which it dropped.
// The receiver keeps the pair's state across the two; had the second
// started again at sequence number 0, its first messages would have been
// taken for duplicates of the first one's and dropped, and Flush would
// have said nothing.
func TestASenderOpenedAgainAfterCloseLosesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		for _, flushFirst := range []bool{true, false} {
			rx, _, p := newPairOn(t, be, nil, nil)
			received := recordNumbers(rx)
			ctx := ctxT(t, 20*time.Second) // hang guard
			src, dst := taskid.ID{Index: 1}, taskid.ID{Processor: 1, Index: 1}
			send := func(from, n uint64, flush bool) *Sender {
				t.Helper()
				s, err := p.OpenSender(ctx, src, dst)
				if err != nil {
					t.Fatal(err)
				}
				for k := from; k < from+n; k++ {
					if err := s.Send(ctx, int64(k), payload(s.Channel(), k, 100)); err != nil {
						t.Fatal(err)
					}
				}
				if flush {
					if err := s.Flush(ctx); err != nil {
						t.Fatal(err)
					}
				}
				return s
			}
			first := send(0, 10, flushFirst)
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			second := send(1000, 200, true)
			got := received()
			var again []uint64
			for _, k := range got {
				if k >= 1000 {
					again = append(again, k)
				}
			}
			n := len(got)
			if len(again) != 200 || again[0] != 1000 || !slices.IsSorted(again) {
				t.Errorf("flushed first %v: the second sender's messages arrived as %d of 200, from %v", flushFirst, len(again), again[:min(len(again), 3)])
			}
			if flushFirst && n != 210 {
				t.Errorf("%d messages arrived, want the 10 flushed and the 200 after", n)
			}
			if err := second.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// recordNumbers makes every task of rx record the number each payload
// starts with (little-endian, as payload writes it), in arrival order;
// received returns them so far.
func recordNumbers(rx *Node) (received func() []uint64) {
	var mu sync.Mutex
	var got []uint64
	rx.HandleAll(func(taskid.ID) Handler {
		return func(_ taskid.Channel, _ uint64, msgs []Message) {
			mu.Lock()
			for _, m := range msgs {
				got = append(got, binary.LittleEndian.Uint64(m.Payload))
			}
			mu.Unlock()
		}
	})
	return func() []uint64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// A channel closed while the node's timer is ticking it, between the
// timer's look at its connection and number and the ACKREQUEST (or OPEN)
// the tick sends there, does not have that frame follow its CLOSE: the
// receiver, which forgot the number at the CLOSE, took it for a protocol
// error and closed the connection, and every channel on it had to
// reconnect.
func TestAChannelClosedAsItTicksSendsNothingAfterItsClose(t *testing.T) {
	rx, tx, p := newPair(t, nil, nil)
	ctx := ctxT(t, 20*time.Second)
	src, quiet, busy := taskid.ID{Index: 1}, taskid.ID{Processor: 1, Index: 1}, taskid.ID{Processor: 1, Index: 2}
	// quiet has no handler: its message is never consumed, nor acknowledged.
	if err := rx.Handle(busy, func(taskid.Channel, uint64, []Message) {}); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := p.OpenSender(ctx, src, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 0, []byte("unacknowledged")); err != nil {
		t.Fatal(err)
	}
	for {
		s.ch.mu.Lock()
		sent := s.ch.mu.src.UnsentBytes() == 0
		s.ch.mu.Unlock()
		if sent {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the message was never sent")
		}
		time.Sleep(time.Millisecond)
	}
	p.mu.Lock()
	c := p.mu.conns[0]
	p.mu.Unlock()

	var closed atomic.Bool
	hook := func(ch *channel, reqs int) {
		if ch == s.ch && reqs > 0 && !closed.Swap(true) {
			_ = s.Close()
		}
	}
	testHookTicked.Store(&hook)
	t.Cleanup(func() { testHookTicked.Store(nil) })
	s.ch.tick(tx.now() + int64(time.Hour)) // long quiet: an ACKREQUEST is due
	if !closed.Load() {
		t.Fatal("no tick had a request to send")
	}

	// What follows on the connection: the receiver reads it after the
	// CLOSE and whatever the tick sent.
	s2, err := p.OpenSender(ctx, src, busy)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Send(ctx, 0, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := s2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rx.Stats().Refused.ProtocolErrors; n != 0 {
		t.Errorf("the receiver counts %d protocol errors", n)
	}
	select {
	case <-c.done:
		t.Errorf("the connection closed: %v", c.closeErr)
	default:
	}
}
