package transport

import (
	"errors"
	"testing"

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
