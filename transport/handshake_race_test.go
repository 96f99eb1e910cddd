package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/transport/internal/handshake"
)

// A connection its node closes (Node.abort, on the node's goroutine) while
// its loop is finishing the handshake stays closed: the handshake does not
// open it again, and the loop's own close that follows (gnet's OnClose)
// finds it closed, where it once closed its done channel a second time
// (a panic in CI's engine tests).
func TestAConnectionClosedDuringItsHandshakeStaysClosed(t *testing.T) {
	n := testNode(t)
	c := newConn(n, nil, 0) // an accepted connection
	lk := &recLink{}
	c.lk = lk
	_ = c.opening()
	dialer := handshake.New(handshake.Config{NodeID: 42, Dialer: true})
	preface := dialer.Start()

	c.close(ErrClosed) // the node shuts down first
	off, open, ok := c.handshake(preface)
	if open || ok || off != 0 {
		t.Errorf("handshake after close = %d, open %v, ok %v; want 0, false, false", off, open, ok)
	}
	if c.state.Load() != stClosed {
		t.Fatalf("state %d after the handshake, want closed (%d)", c.state.Load(), stClosed)
	}
	c.close(errors.New("closed by peer")) // gnet's OnClose: must not close done again
	if !errors.Is(c.closeErr, ErrClosed) {
		t.Errorf("closed with %v, want the first reason, %v", c.closeErr, ErrClosed)
	}

	// The same preface opens a connection nobody closed: the handshake
	// itself is not what refused.
	c2 := newConn(n, nil, 0)
	c2.lk = &recLink{}
	_ = c2.opening()
	if _, open, ok := c2.handshake(preface); !open || !ok || c2.state.Load() != stOpen {
		t.Fatalf("a fresh connection's handshake: open %v, ok %v, state %d", open, ok, c2.state.Load())
	}
	c2.close(ErrClosed)
}

// A connection the timer finds past its handshake timeout times out only
// if it is still shaking hands when the timer closes it: its loop may
// finish the handshake, or close it for a fault, between the timer's look
// and its close. Timed out anyway, an opened connection was closed as
// though it never opened (a dialed one after its peer took it for up),
// and one closed for a fault was counted a second time, as a timeout too.
func TestAHandshakeThatEndsAsItTimesOutIsNotATimeout(t *testing.T) {
	preface := handshake.New(handshake.Config{NodeID: 42, Dialer: true}).Start()
	for _, tc := range []struct {
		name  string
		ends  func(t *testing.T, c *conn) // on the loop, after the timer's look
		state int32
	}{
		{"one its loop opens stays open", func(t *testing.T, c *conn) {
			if _, open, ok := c.handshake(preface); !open || !ok {
				t.Errorf("handshake: open %v, ok %v", open, ok)
			}
		}, stOpen},
		{"one its loop closes is not counted a timeout too", func(t *testing.T, c *conn) {
			c.close(ErrAuthFailed)
		}, stClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testNode(t)
			// Accepted connections, not tracked by the node (nothing
			// would give back their count in its links), each long past
			// the handshake timeout; next expires at the timer's next
			// look, which tells that it is done with late.
			late, next := newConn(n, nil, 0), newConn(n, nil, 0)
			for _, c := range []*conn{late, next} {
				c.lk = &recLink{}
				_ = c.opening()
				c.openedAt -= int64(time.Hour)
			}
			seen := make(chan *conn, 2)
			hook := func(c *conn) {
				if c != late && c != next {
					return
				}
				if c == late {
					tc.ends(t, c)
					n.timers.watchHandshake(next)
				}
				seen <- c
			}
			testHookHandshakeExpired.Store(&hook)
			t.Cleanup(func() { testHookHandshakeExpired.Store(nil) })
			n.timers.watchHandshake(late)
			for _, want := range []*conn{late, next} {
				select {
				case c := <-seen:
					if c != want {
						t.Fatal("the timer expired the connections out of order")
					}
				case <-ctxT(t, 20*time.Second).Done():
					t.Fatal("the timer did not expire the connections")
				}
			}
			<-next.done
			if got := late.state.Load(); got != tc.state {
				t.Errorf("state %d, want %d", got, tc.state)
			}
			if got := n.Stats().Refused.HandshakeTimeouts; got != 1 {
				t.Errorf("%d handshake timeouts, want 1 (the next connection's)", got)
			}
		})
	}
}
