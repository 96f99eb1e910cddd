package transport

// link is what a conn needs from its connection backend: gnet's event loops
// (gnetLink) or the standard net package, with or without TLS (netLink).
// Both run the conn's callbacks — open, traffic, close — and every Execute'd
// function on one goroutine at a time per connection, the connection's
// "loop", so the conn's loop state needs no lock under either.
type link interface {
	// Peek returns the inbound bytes buffered so far (n < 0: all of them).
	// Loop only; the slice is valid until the next Discard.
	Peek(n int) ([]byte, error)
	// Discard drops the first n inbound bytes (n <= 0: all). Loop only.
	Discard(n int) (int, error)
	// Write and Writev send bytes; the link does not keep them. Loop only.
	Write(b []byte) (int, error)
	Writev(bs [][]byte) (int, error)
	// OutboundBuffered is how many written bytes the link holds, not yet
	// handed to the kernel. Loop only.
	OutboundBuffered() int
	// Execute runs f on the connection's loop, soon. Safe for concurrent
	// use.
	Execute(f loopFunc) error
	// Close closes the connection after the functions Execute'd before it
	// ran; the conn's close callback follows. Safe for concurrent use.
	Close() error
}

// loopFunc is a function a link runs on a connection's loop.
type loopFunc func()

// Backend selects how a node's connections do their I/O.
type Backend uint8

const (
	// BackendGnet runs connections on gnet event loops (epoll/kqueue,
	// non-blocking, few goroutines). The default; it has no TLS.
	BackendGnet Backend = iota
	// BackendNet runs each connection on two goroutines of the standard net
	// package: one reads, one runs the connection's callbacks and writes.
	// It is the backend of TLS, and of platforms where gnet is not
	// production-ready.
	BackendNet
)

// String returns "gnet" or "net".
func (b Backend) String() string {
	if b == BackendNet {
		return "net"
	}
	return "gnet"
}
