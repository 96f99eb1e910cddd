package transport

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport/internal/handshake"
	"github.com/sluicehq/sluice/wire"
)

// compressThreshold is the smallest batch compressed when compression is
// on.
const compressThreshold = 8 << 10

const (
	stHandshake int32 = iota
	stOpen
	stClosed
)

// conn is one TCP connection. A dialed conn (peer != nil) carries the data of
// its peer's channels out and their acks in; an accepted conn carries data in
// and acks out. Its parts, each in its own file:
//
//   - reading and dispatch (read.go): the loop decodes the handshake and
//     then frames, and hands each to the part it is for;
//   - the inbound demux (inbound.go), accepting side: channel numbers to
//     receiving states; loop only;
//   - the outbound mux (outbound.go), dialing side: channel numbers and
//     their retirement, the ready queue, the control frames waiting, and the
//     batch builder that channels fill;
//   - the direct writer (direct.go): a duplicate of the socket for senders
//     that write themselves, the carry of what the kernel did not take, and
//     what such a write costs.
//
// Lock order, outer first: Peer.mu, conn.wmu, channel.mu, conn.mu,
// conn.fdMu; on the receiving side inbox.order (held while an inline
// handler runs), recvState.mu, conn.mu. The locks of the node's timers, of
// the notifiers and a channel's parkMu are taken last and hold nothing
// else.
type conn struct {
	node   *Node
	peer   *Peer // nil for an accepted connection
	slot   int   // the peer's connection slot
	stream uint64
	// lk and faults are set once, under mu, by the loop that opens the
	// connection (setLink); the loop, and anyone who saw the connection
	// open (state), read them without mu, others (Node.abort) with it.
	lk     link
	faults *faultLink // lk, when the node injects faults; nil otherwise
	remote string
	// addrKey is the remote host this accepted connection counts against
	// in the per-address limit; empty if it does not count.
	addrKey string

	state    atomic.Int32
	openedAt int64
	lastRecv atomic.Int64
	lastPing atomic.Int64 // when the last PING was queued
	clock    clockEstimator
	remoteID atomic.Uint64
	compress bool // both sides offered compression; set at handshake

	done     chan struct{} // closed when the connection is gone
	closeErr error         // why; valid after done is closed
	stats    connCounters

	// Reading and dispatch; loop only.
	hs     *handshake.Machine // nil once the handshake is done
	goaway *GoAwayError       // the peer's GOAWAY, if any

	// The inbound demux; loop only.
	in struct {
		rd    wire.DataReader
		msgs  []Message
		table *taskid.Table
		byNum []*inChan
		dbuf  []byte // decompressed DATA body
		// counts is what the read callback under way has read, added to
		// the connection's counters as it ends (conn.countIn)
		counts inCounts
		// parked are the channels whose acks the read under way parked,
		// their senders holding their locks (channel.onAck): the read
		// applies them as it ends if the senders have let go by then.
		parked []*channel
	}
	// inbound payload bytes not yet consumed by their target tasks
	inbound atomic.Int64

	// The outbound mux. mu is shared with senders, inbox goroutines (acks
	// go out through sendCtrl) and the node's timer; out is the batch
	// being built, under wmu.
	mu struct {
		sync.Mutex
		ready     []*channel // channels with something to send, FIFO
		readyHead int
		ctrl      []byte // control frames to send with the next batch
		scheduled bool   // the loop will flush, or a sender writes directly
		// reading is set while the loop decodes what arrived (onTraffic),
		// which flushes when it is done: a flush scheduled meanwhile needs
		// no wake-up of the loop.
		reading bool
		// streaming is set while the connection is stream-driven: its
		// senders write their full batches themselves (writeStreaming).
		streaming bool
		// streamer is the channel whose sender last made the connection
		// stream-driven: while the state lasts its pushes wake no loop
		// and write no message alone, however few of its messages are
		// unacknowledged.
		streamer *channel
		closed   bool
		outTable *taskid.Table
		outByNum []*channel
		// retired are closed channels' numbers, held back from reuse until
		// a PONG to a PING sent after their CLOSE shows that no ack for
		// them can still be on its way.
		retired []retiredNum
	}
	out struct {
		policy  *batch.Policy
		comp    *batch.Compressor
		ctrl    []byte // control frames queued before this batch
		b       outBatch
		cdata   []byte // compressed DATA frame
		iov     [][]byte
		requeue []*channel // channels with more to send after this batch
	}
	// payload bytes of ready channels, an estimate for the batch policy
	pending   atomic.Int64
	flushTask loopFunc
	// load is how busy the gnet loop that runs the connection is; nil on
	// the net backend, and until a gnet loop took the connection: its open
	// callback sets it, before the loop runs anything else of the
	// connection and before the enrolling goroutine looks (Node.run).
	load atomic.Pointer[loopLoad]

	// The writer. wmu is held while an outgoing batch is built and
	// written: by the loop, or by a sender writing directly (see
	// [conn.enqueue]). out and carry are under it.
	wmu sync.Mutex
	// carry is the tail of a direct write that the kernel did not take; the
	// loop writes it before anything else.
	carry []byte
	// fd is a duplicate of the socket's descriptor, for direct writes; -1
	// where the link has its own buffering (net, TLS), with faults, and
	// once the connection closed. It is a duplicate so that gnet closing its
	// own descriptor (it may, on its loop, at any time) can never let a
	// direct write reach a socket that reused the number. Set under mu and
	// fdMu; direct writes use it under fdMu.
	fd   int
	fdMu sync.Mutex
	// linkBuffered says the link held unwritten bytes when the loop last
	// looked. It is stale only towards true (the link drains on the loop,
	// and only grows under wmu), so false means a direct write cannot
	// overtake bytes the link holds.
	linkBuffered atomic.Bool
	lastWrite    atomic.Int64 // when the last batch had been handed to the kernel
	streamAt     atomic.Int64 // when a sender last wrote a full batch itself (writeStreaming)
	writeCost    atomic.Int64 // how long a direct write takes, a moving average (ns)
}

type connCounters struct {
	msgsOut, wireOut, batches atomic.Uint64
	dataFrames, ctrlFrames    atomic.Uint64
	direct, carried           atomic.Uint64
	msgsIn, bytesIn, wireIn   atomic.Uint64
	flushes                   [batch.NumCauses]atomic.Uint64
	stale, dupIn, gapIn       atomic.Uint64
}

func newConn(n *Node, p *Peer, slot int) *conn {
	c := &conn{node: n, peer: p, slot: slot, fd: -1, done: make(chan struct{})}
	c.stream = n.connSeq.Add(1)
	c.flushTask = c.loopFlush
	c.in.table = taskid.NewTable(n.o.maxChannels)
	c.out.policy = batch.New(n.o.batch)
	if n.o.compress {
		c.out.comp = batch.NewCompressor(compressThreshold)
	}
	c.mu.outTable = taskid.NewTable(0)
	c.openedAt = n.now()
	c.lastRecv.Store(c.openedAt)
	hc := handshake.Config{NodeID: n.id, Key: n.o.key, Dialer: p != nil}
	if n.o.compress {
		hc.Flags |= wire.FlagCompression
	}
	if hc.Key != nil {
		_, _ = rand.Read(hc.Nonce[:]) // crypto/rand.Read never fails
	}
	c.hs = handshake.New(hc)
	return c
}

// opening returns the bytes the connection starts with: the preface and,
// with a key, the challenge.
func (c *conn) opening() []byte { return c.hs.Start() }

// handshake feeds the handshake machine the inbound bytes b. It returns how
// many it consumed and whether the connection is open; on a fault it has
// closed the connection and ok is false, as it is for a connection closed
// meanwhile.
func (c *conn) handshake(b []byte) (off int, open, ok bool) {
	s, err := c.hs.Feed(b)
	if id := c.hs.Peer().NodeID; id != 0 {
		c.remoteID.Store(id) // for errors and logs, even if the handshake fails
	}
	if s.Out != nil {
		if _, werr := c.lk.Write(s.Out); werr != nil && err == nil {
			c.close(werr)
			return 0, false, false
		}
	}
	if err != nil {
		return 0, false, c.fail(err, handshake.Code(err))
	}
	if s.GoAway != nil {
		c.goaway = &GoAwayError{*s.GoAway}
		c.close(c.goaway)
		return 0, false, false
	}
	if !s.Done {
		return s.Consumed, false, true
	}
	p := c.hs.Peer()
	c.hs = nil
	c.remoteID.Store(p.NodeID)
	c.compress = c.node.o.compress && p.Flags&wire.FlagCompression != 0
	// Only a connection still shaking hands opens: its node, shutting down
	// on another goroutine (Node.abort), may have closed it meanwhile, and
	// a plain store would open it again for a second close to find.
	if !c.state.CompareAndSwap(stHandshake, stOpen) {
		return 0, false, false
	}
	if c.faults != nil {
		c.faults.arm()
	}
	if hook := testHookHandshakeOpened.Load(); hook != nil {
		(*hook)(c)
	}
	if c.peer != nil {
		c.peer.attach(c)
	}
	c.ping(c.node.now()) // a first clock sample, and a round trip
	return s.Consumed, true, true
}

// ping queues a PING whose token is token (a time of the node's now scale)
// asking for the peer's clock. Safe for concurrent use.
func (c *conn) ping(token int64) {
	c.lastPing.Store(token)
	v := uint64(token)
	c.sendCtrl(func(b []byte) []byte { return wire.AppendPing(b, v, wire.PingClock) })
}

// setLink gives c its link. With faults configured it is wrapped in a
// faultLink, and c makes no direct writes, which would bypass it; otherwise
// fd >= 0 enables direct writes on a duplicate of it. It runs before the
// link delivers any event. It reports false if c was closed meanwhile (a
// node shutting down closes its connections from its own goroutine,
// Node.abort, which found no link to close): the caller then closes the
// link and does not run it.
func (c *conn) setLink(lk link, fd int) bool {
	if hook := testHookSetLink.Load(); hook != nil {
		(*hook)(c)
	}
	var faults *faultLink
	if m := newFaultModel(c.node.o.faults, c.stream, &c.node.faultN, &c.node.faultSched); m != nil {
		heal := func() {
			if !c.onTraffic(c.node.now()) {
				_ = c.lk.Close()
			}
		}
		faults = newFaultLink(lk, m, c.node.now, heal, c.flush)
		lk = faults
	}
	// Under c.mu: close marks c closed before it takes c.mu, and Node.abort
	// reads lk under it once close returned, so either c is seen closed
	// here or the link set here is closed there.
	c.mu.Lock()
	c.lk, c.faults = lk, faults
	open := c.state.Load() != stClosed
	c.mu.Unlock()
	if !open {
		return false
	}
	if faults == nil && fd >= 0 { // no direct writes past injected faults
		c.setDirectFD(fd)
	}
	return true
}

// testHookSetLink, set only by tests, runs as setLink begins.
var testHookSetLink atomic.Pointer[func(*conn)]

// testHookHandshakeOpened, set only by tests, runs in handshake between
// opening the connection and attaching it to its peer.
var testHookHandshakeOpened atomic.Pointer[func(*conn)]

// close records why the connection ends and detaches it; the caller makes
// the link close the socket (onTraffic returning false, or lk.Close).
// Safe to call more than once; the first reason wins, and close reports
// whether it was this call's.
func (c *conn) close(err error) bool {
	if c.state.Swap(stClosed) == stClosed {
		return false
	}
	c.closeMarked(err)
	return true
}

// closeMarked is close for the one caller that marked c closed.
func (c *conn) closeMarked(err error) {
	c.mu.Lock()
	c.fdMu.Lock() // waits for a direct write in progress
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	c.fdMu.Unlock()
	faults := c.faults // set by the loop (setLink); this may be another goroutine
	c.mu.Unlock()
	if faults != nil {
		faults.stop()
	}
	if err == nil {
		err = io.EOF
	}
	c.closeErr = &ConnError{Remote: c.remote, NodeID: c.remoteID.Load(), Err: err}
	c.mu.Lock()
	c.mu.closed = true
	for i := c.mu.readyHead; i < len(c.mu.ready); i++ {
		c.mu.ready[i] = nil
	}
	c.mu.ready, c.mu.readyHead = nil, 0
	c.mu.Unlock()
	if c.peer != nil {
		c.peer.detach(c)
	}
	c.node.forget(c)
	c.node.countClose(err)
	var ga *GoAwayError
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, ErrClosed):
	case errors.As(err, &ga) && (ga.Code == wire.GoAwayNormal || ga.Code == wire.GoAwayShutdown):
		// The peer said goodbye: routine, not a warning.
		c.node.log.Info("sluice: connection closed by the peer", "remote", c.remote, "node", fmt.Sprintf("%x", c.remoteID.Load()), "reason", ga.Code)
	default:
		c.node.log.Warn("sluice: connection closed", "remote", c.remote, "node", fmt.Sprintf("%x", c.remoteID.Load()), "err", err)
	}
	close(c.done)
}
