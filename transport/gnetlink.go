package transport

import (
	"context"
	"net"

	"github.com/panjf2000/gnet/v2"
)

// gnetLink is a gnet connection as a link.
//
// A function Execute'd on the loop may run after gnet closed the
// connection (a fault link's release timer, the GOAWAY of a node shutting
// down whose peer closed first): gnet's loop runs it all the same, and a
// write then goes to the descriptor number gnet closed, which another
// socket or file of the process may have taken meanwhile. gnet drops a
// closed connection's context (its *conn), so a write without one is
// refused.
type gnetLink struct{ gc gnet.Conn }

func (l gnetLink) Peek(n int) ([]byte, error) { return l.gc.Peek(n) }
func (l gnetLink) Discard(n int) (int, error) { return l.gc.Discard(n) }
func (l gnetLink) Write(b []byte) (int, error) {
	if l.gc.Context() == nil {
		return 0, net.ErrClosed
	}
	return l.gc.Write(b)
}
func (l gnetLink) Writev(bs [][]byte) (int, error) {
	if l.gc.Context() == nil {
		return 0, net.ErrClosed
	}
	return l.gc.Writev(bs)
}
func (l gnetLink) OutboundBuffered() int { return l.gc.OutboundBuffered() }
func (l gnetLink) Close() error          { return l.gc.Close() }
func (l gnetLink) Execute(f loopFunc) error {
	return l.gc.EventLoop().Execute(context.Background(), f)
}

// Run makes a loopFunc a gnet.Runnable, so that gnetLink hands it to gnet
// as it is (a func converted to an interface allocates nothing).
func (f loopFunc) Run(context.Context) error { f(); return nil }
