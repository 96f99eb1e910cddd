package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

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
	// Execute runs r on the connection's loop, soon. Safe for concurrent use.
	Execute(r gnet.Runnable) error
	// Close closes the connection after the functions Execute'd before it
	// ran; the conn's close callback follows. Safe for concurrent use.
	Close() error
}

// gnetLink is a gnet connection as a link.
type gnetLink struct{ gc gnet.Conn }

func (l gnetLink) Peek(n int) ([]byte, error)      { return l.gc.Peek(n) }
func (l gnetLink) Discard(n int) (int, error)      { return l.gc.Discard(n) }
func (l gnetLink) Write(b []byte) (int, error)     { return l.gc.Write(b) }
func (l gnetLink) Writev(bs [][]byte) (int, error) { return l.gc.Writev(bs) }
func (l gnetLink) OutboundBuffered() int           { return l.gc.OutboundBuffered() }
func (l gnetLink) Close() error                    { return l.gc.Close() }
func (l gnetLink) Execute(r gnet.Runnable) error {
	return l.gc.EventLoop().Execute(context.Background(), r)
}

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

const (
	// netReadMin and netReadMax bound a netLink's read buffer: it starts
	// small, so that idle and handshaking connections cost little, and
	// doubles while reads fill it.
	netReadMin = 1 << 10
	netReadMax = 64 << 10
	// netKeepCap is the inbound buffer capacity kept once it empties; a
	// larger one (after a large frame) is released.
	netKeepCap = 256 << 10
	// netCloseGrace is how long Close waits for the loop (busy in a write
	// to a peer that does not read) before closing the socket under it.
	netCloseGrace = 500 * time.Millisecond
)

var errLinkClosed = errors.New("transport: connection closed")

type readResult struct {
	n   int
	err error
}

// netLink is a connection of the net backend. Its loop goroutine owns the
// inbound buffer and does every write synchronously, so its outbound buffer
// is the kernel's; its reader goroutine reads into a buffer of its own and
// hands each read over, waiting until the loop has copied it. The inbound
// buffer therefore holds at most what the conn has not consumed (less than
// one frame, whose length the conn has checked against the max frame size)
// plus one read.
type netLink struct {
	nc   net.Conn
	tls  bool
	c    *conn
	wg   *sync.WaitGroup
	data chan readResult
	ack  chan struct{}
	wake chan struct{}
	done chan struct{} // closed when the loop ends

	opened atomic.Bool

	// loop
	in   []byte
	off  int
	wbuf []byte

	// reader
	rbuf []byte

	mu struct {
		sync.Mutex
		tasks  []gnet.Runnable
		closed bool // Close was called or the loop ended
	}
	hardClose sync.Once
}

func newNetLink(nc net.Conn, c *conn, wg *sync.WaitGroup) *netLink {
	_, isTLS := nc.(*tls.Conn)
	return &netLink{
		nc: nc, tls: isTLS, c: c, wg: wg,
		data: make(chan readResult),
		ack:  make(chan struct{}, 1),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// start runs the link: first is what to write before anything else (the
// conn's opening bytes).
func (l *netLink) start(first []byte) {
	l.wg.Add(2)
	go l.loop(first)
	go l.read()
}

func (l *netLink) loop(first []byte) {
	defer l.wg.Done()
	err := l.open(first)
	for err == nil {
		select {
		case r := <-l.data:
			if r.n > 0 {
				l.in = append(l.in, l.rbuf[:r.n]...)
				l.ack <- struct{}{}
				if l.c.onTraffic() == gnet.Close {
					err = errLinkClosed
					break
				}
			}
			if r.err != nil {
				err = r.err
			}
		case <-l.wake:
			err = l.runTasks()
		}
	}
	l.mu.Lock()
	l.mu.closed = true
	l.mu.tasks = nil
	l.mu.Unlock()
	close(l.done)
	l.closeSocket()
	if errors.Is(err, errLinkClosed) {
		err = nil
	}
	if err == nil {
		err = errors.New("closed")
	}
	l.c.close(err)
}

func (l *netLink) open(first []byte) error {
	if t, ok := l.nc.(*tls.Conn); ok {
		if err := t.Handshake(); err != nil { // Close ends it by closing the socket
			return err
		}
	}
	l.opened.Store(true)
	if l.isClosed() {
		return errLinkClosed
	}
	_, err := l.Write(first)
	return err
}

func (l *netLink) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.closed
}

// closeTask is the marker Close queues: the loop ends when it reaches it.
var closeTask = gnet.RunnableFunc(func(context.Context) error { return errLinkClosed })

func (l *netLink) runTasks() error {
	l.mu.Lock()
	tasks := l.mu.tasks
	l.mu.tasks = nil
	l.mu.Unlock()
	for i, t := range tasks {
		tasks[i] = nil
		if err := t.Run(context.Background()); errors.Is(err, errLinkClosed) {
			return err
		}
	}
	return nil
}

func (l *netLink) read() {
	defer l.wg.Done()
	l.rbuf = make([]byte, netReadMin)
	for {
		n, err := l.nc.Read(l.rbuf)
		select {
		case l.data <- readResult{n, err}:
		case <-l.done:
			return
		}
		if err != nil {
			return
		}
		if n > 0 {
			select {
			case <-l.ack:
			case <-l.done:
				return
			}
		}
		if n == len(l.rbuf) && len(l.rbuf) < netReadMax {
			l.rbuf = make([]byte, 2*len(l.rbuf))
		}
	}
}

func (l *netLink) closeSocket() { l.hardClose.Do(func() { _ = l.nc.Close() }) }

func (l *netLink) Peek(n int) ([]byte, error) {
	b := l.in[l.off:]
	if n >= 0 && n < len(b) {
		b = b[:n]
	}
	return b, nil
}

func (l *netLink) Discard(n int) (int, error) {
	left := len(l.in) - l.off
	if n <= 0 || n >= left {
		if cap(l.in) > netKeepCap {
			l.in = nil
		} else {
			l.in = l.in[:0]
		}
		l.off = 0
		return left, nil
	}
	l.off += n
	if l.off > len(l.in)/2 {
		l.in = l.in[:copy(l.in, l.in[l.off:])]
		l.off = 0
	}
	return n, nil
}

func (l *netLink) Write(b []byte) (int, error) { return l.nc.Write(b) }

func (l *netLink) Writev(bs [][]byte) (int, error) {
	if l.tls || len(bs) == 1 {
		// One TLS record stream instead of a record per slice.
		l.wbuf = l.wbuf[:0]
		for _, b := range bs {
			l.wbuf = append(l.wbuf, b...)
		}
		n, err := l.nc.Write(l.wbuf)
		if cap(l.wbuf) > netKeepCap {
			l.wbuf = nil
		}
		return n, err
	}
	nb := net.Buffers(bs)
	n, err := nb.WriteTo(l.nc)
	return int(n), err
}

func (l *netLink) OutboundBuffered() int { return 0 }

func (l *netLink) Execute(r gnet.Runnable) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return errLinkClosed
	}
	l.mu.tasks = append(l.mu.tasks, r)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

func (l *netLink) Close() error {
	if !l.opened.Load() {
		// The loop may be inside a TLS handshake that only a closed
		// socket ends.
		l.closeSocket()
	}
	if err := l.Execute(closeTask); err != nil {
		return nil // closed already
	}
	time.AfterFunc(netCloseGrace, func() {
		select {
		case <-l.done:
		default:
			l.closeSocket()
		}
	})
	return nil
}
