package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

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
// hands each read over, waiting until the loop has copied it.
//
// While the loop is inside a socket write, though, the reader does not wait
// for it: it copies each read to the link's pending bytes and reads on,
// and the loop takes them (ahead of any later read) once it is back. A
// reader that waited would stop draining the socket, and two nodes whose
// loops both write to a peer with a full kernel buffer would then wait for
// each other for good (3,000 channels opening at once between two nodes
// with 8 KiB socket buffers did; 30,000 with the default 1 MiB). What is
// pending is what the peer wrote and this side has not consumed, which for
// an honest peer stays under what a connection may hold for its peer
// (conn.backlogLimit): a peer that makes it pass that writes without
// reading what it is sent, and its connection is closed with
// ErrPeerNotReading, by closing the socket, since the blocked write leaves
// no way to send it a GOAWAY.
//
// The inbound buffer therefore holds what the conn has not consumed (less
// than one frame, whose length the conn has checked against the max frame
// size) plus one read, and, after the loop's writes blocked, what the
// reader read meanwhile: at most conn.backlogLimit (49 MiB with the
// defaults), that many again in the pending bytes while the loop writes.
type netLink struct {
	nc   net.Conn
	tls  bool
	c    *conn
	wg   *sync.WaitGroup
	data chan readResult
	ack  chan struct{}
	wake chan struct{}
	done chan struct{} // closed when the loop ends
	// writeBegins tells the reader, waiting to hand a read over, that the
	// loop has begun a write: it stops waiting and keeps the read pending.
	writeBegins chan struct{}
	// spilled wakes the loop to take the pending bytes.
	spilled chan struct{}

	opened atomic.Bool
	// writing is set while the loop is inside a socket write.
	writing atomic.Bool
	// hasPending saves the loop the lock of pend on every read while
	// nothing is pending.
	hasPending atomic.Bool

	// pend is what the reader read while the loop wrote, in the order
	// read, and the read error that ended it, for the loop to take.
	pend struct {
		sync.Mutex
		b   []byte
		err error
	}

	// loop
	in   []byte
	off  int
	wbuf []byte
	// spare is the task list runTasks ran last, emptied, for queue to
	// append to next: the two lists take turns, so that queuing a task
	// allocates nothing.
	spare []loopFunc

	// reader
	rbuf []byte

	mu struct {
		sync.Mutex
		tasks  []loopFunc // nil: Close's marker
		closed bool       // Close was called or the loop ended
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

		writeBegins: make(chan struct{}, 1),
		spilled:     make(chan struct{}, 1),
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
	g := goid()
	loopGoroutines.Store(g, struct{}{})
	defer loopGoroutines.Delete(g)
	err := l.open(first)
	for err == nil {
		select {
		case r := <-l.data:
			// What the reader kept pending came before this read.
			took, perr := l.takePending()
			if r.n > 0 {
				l.in = append(l.in, l.rbuf[:r.n]...)
				l.ack <- struct{}{}
			}
			if (took || r.n > 0) && !l.c.onTraffic(l.c.node.now()) {
				err = errLinkClosed
				break
			}
			if perr != nil {
				err = perr
			} else if r.err != nil {
				err = r.err
			}
		case <-l.spilled:
			took, perr := l.takePending()
			if took && !l.c.onTraffic(l.c.node.now()) {
				err = errLinkClosed
				break
			}
			err = perr
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

func (l *netLink) runTasks() error {
	l.mu.Lock()
	tasks := l.mu.tasks
	l.mu.tasks, l.spare = l.spare, nil
	l.mu.Unlock()
	for i, f := range tasks {
		tasks[i] = nil
		if f == nil { // Close's marker: the loop ends here
			return errLinkClosed
		}
		f()
	}
	if cap(tasks) <= maxSpareTasks {
		l.spare = tasks[:0]
	}
	return nil
}

// takePending appends to the inbound buffer what the reader kept pending
// while the loop wrote, and returns the read error that followed it. Loop
// only.
func (l *netLink) takePending() (took bool, err error) {
	if !l.hasPending.Load() {
		return false, nil
	}
	l.pend.Lock()
	took = len(l.pend.b) > 0
	l.in = append(l.in, l.pend.b...)
	if cap(l.pend.b) > netKeepCap {
		l.pend.b = nil
	} else {
		l.pend.b = l.pend.b[:0]
	}
	err, l.pend.err = l.pend.err, nil
	l.hasPending.Store(false)
	l.pend.Unlock()
	return took, err
}

// maxSpareTasks bounds the task list runTasks keeps for reuse: a burst of
// more leaves its list to the garbage collector.
const maxSpareTasks = 256

func (l *netLink) read() {
	defer l.wg.Done()
	l.rbuf = make([]byte, netReadMin)
	limit := l.c.backlogLimit()
	for {
		n, err := l.nc.Read(l.rbuf)
		handed := false
		for !handed {
			if l.writing.Load() {
				if !l.keep(l.rbuf[:n], err, limit) {
					return
				}
				if err != nil {
					return
				}
				break // rbuf is free: keep copied it
			}
			select {
			case l.data <- readResult{n, err}:
				handed = true
			case <-l.writeBegins:
				// The loop may be in a write now: look again.
			case <-l.done:
				return
			}
		}
		if err != nil {
			return
		}
		if handed && n > 0 {
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

// keep adds a read (b and err) to the pending bytes for the loop, which is
// writing, and wakes it to take them. Past limit it closes the connection
// and reports false. Reader only.
func (l *netLink) keep(b []byte, err error, limit int) bool {
	l.pend.Lock()
	over := len(l.pend.b)+len(b) > limit
	if over {
		// The peer writes on without reading what it is sent: what it
		// has written and this side not consumed passed what an honest
		// peer may have unread.
		err = fmt.Errorf("%w: %d bytes arrived while a write to it stayed blocked, over the limit of %d", ErrPeerNotReading, len(l.pend.b)+len(b), limit)
		l.pend.b = nil
	} else {
		l.pend.b = append(l.pend.b, b...)
	}
	if err != nil {
		l.pend.err = err
	}
	l.hasPending.Store(true)
	l.pend.Unlock()
	if over {
		l.c.close(err)
		l.closeSocket() // ends the loop's write
	}
	select {
	case l.spilled <- struct{}{}:
	default:
	}
	return !over
}

// beginWrite and endWrite bracket the loop's socket writes, so that the
// reader goes on reading while one blocks. Loop only.
func (l *netLink) beginWrite() {
	l.writing.Store(true)
	select {
	case l.writeBegins <- struct{}{}:
	default:
	}
}

func (l *netLink) endWrite() { l.writing.Store(false) }

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

func (l *netLink) Write(b []byte) (int, error) {
	l.beginWrite()
	defer l.endWrite()
	return l.nc.Write(b)
}

func (l *netLink) Writev(bs [][]byte) (int, error) {
	l.beginWrite()
	defer l.endWrite()
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

func (l *netLink) Execute(f loopFunc) error {
	if f == nil {
		return errors.New("transport: nil loop function")
	}
	return l.queue(f)
}

// queue appends f (nil: the close marker) to the loop's tasks and wakes it.
func (l *netLink) queue(f loopFunc) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return errLinkClosed
	}
	l.mu.tasks = append(l.mu.tasks, f)
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
	if err := l.queue(nil); err != nil {
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
