package transport

import (
	"errors"
	"slices"
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
		if err := s.Send(ctx, 0, payload(0, 100)); err != nil {
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
