package transport

import (
	"context"

	"github.com/panjf2000/gnet/v2"
)

// gnetLink is a gnet connection as a link.
type gnetLink struct{ gc gnet.Conn }

func (l gnetLink) Peek(n int) ([]byte, error)      { return l.gc.Peek(n) }
func (l gnetLink) Discard(n int) (int, error)      { return l.gc.Discard(n) }
func (l gnetLink) Write(b []byte) (int, error)     { return l.gc.Write(b) }
func (l gnetLink) Writev(bs [][]byte) (int, error) { return l.gc.Writev(bs) }
func (l gnetLink) OutboundBuffered() int           { return l.gc.OutboundBuffered() }
func (l gnetLink) Close() error                    { return l.gc.Close() }
func (l gnetLink) Execute(f loopFunc) error {
	return l.gc.EventLoop().Execute(context.Background(), f)
}

// Run makes a loopFunc a gnet.Runnable, so that gnetLink hands it to gnet
// as it is (a func converted to an interface allocates nothing).
func (f loopFunc) Run(context.Context) error { f(); return nil }
