package transport

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

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
// and acks out.
//
// Fields under "loop" are touched only on the connection's event loop. The mu
// fields are shared with senders, inbox goroutines and the node's timer.
// Lock order: Peer.mu, then channel.mu, then conn.mu.
type conn struct {
	node   *Node
	peer   *Peer // nil for an accepted connection
	slot   int   // the peer's connection slot
	stream uint64
	lk     link
	faults *faultLink // lk, when the node injects faults; nil otherwise
	remote string
	// addrKey is the remote host this accepted connection counts against
	// in the per-address limit; empty if it does not count.
	addrKey string

	state    atomic.Int32
	openedAt int64
	lastRecv atomic.Int64
	remoteID atomic.Uint64
	compress bool // both sides offered compression; set at handshake

	flushTask loopFunc

	// wmu is held while an outgoing batch is built and written: by the
	// loop, or by a sender writing directly (see [conn.enqueue]). The out
	// fields and carry are under it.
	wmu sync.Mutex
	// carry is the tail of a direct write that the kernel did not take; the
	// loop writes it before anything else.
	carry []byte
	// fd is a duplicate of the socket's descriptor, for direct writes; -1
	// where the link has its own buffering (net, TLS) and once the
	// connection closed. It is a duplicate so that gnet closing its own
	// descriptor (it may, on its loop, at any time) can never let a direct
	// write reach a socket that reused the number. Set under mu and fdMu;
	// direct writes use it under fdMu.
	fd   int
	fdMu sync.Mutex
	// linkBuffered says the link held unwritten bytes when the loop last
	// looked. It is stale only towards true (the link drains on the loop,
	// and only grows under wmu), so false means a direct write cannot
	// overtake bytes the link holds.
	linkBuffered atomic.Bool
	lastWrite    atomic.Int64 // when the last batch had been handed to the kernel
	writeCost    atomic.Int64 // how long a direct write takes, a moving average (ns)

	// loop
	hs *handshake.Machine // nil once the handshake is done
	in struct {
		rd    wire.DataReader
		msgs  []Message
		table *taskid.Table
		byNum []*inChan
		dbuf  []byte // decompressed DATA body
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

	// inbound payload bytes not yet consumed by their target tasks
	inbound atomic.Int64
	// payload bytes of ready channels, an estimate for the batch policy
	pending atomic.Int64

	mu struct {
		sync.Mutex
		ready     []*channel // channels with something to send, FIFO
		readyHead int
		ctrl      []byte // control frames to send with the next batch
		scheduled bool
		closed    bool
		outTable  *taskid.Table
		outByNum  []*channel
		// retired are closed channels' numbers, held back from reuse until
		// a PONG to a PING sent after their CLOSE shows that no ack for
		// them can still be on its way.
		retired []retiredNum
	}

	done     chan struct{} // closed when the connection is gone
	closeErr error         // why; valid after done is closed
	goaway   *GoAwayError  // loop: the peer's GOAWAY, if any

	stats connCounters
}

// inChan is an inbound channel open on an accepted connection.
type inChan struct {
	key   taskid.Channel
	rs    *recvState
	stale bool // opened with an epoch older than the receiver's: all its frames are dropped
}

type connCounters struct {
	msgsOut, wireOut, batches atomic.Uint64
	direct, carried           atomic.Uint64
	msgsIn, bytesIn, wireIn   atomic.Uint64
	flushes                   [batch.NumCauses]atomic.Uint64
	stale, dupIn, gapIn       atomic.Uint64
}

func newConn(n *Node, p *Peer, slot int) *conn {
	c := &conn{node: n, peer: p, slot: slot, fd: -1, done: make(chan struct{})}
	c.stream = n.connSeq.Add(1)
	c.flushTask = c.flush
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
// closed the connection and ok is false.
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
	c.state.Store(stOpen)
	if c.faults != nil {
		c.faults.arm()
	}
	if c.peer != nil {
		c.peer.attach(c)
	}
	return s.Consumed, true, true
}

// onTraffic decodes everything buffered. It runs on the loop. It reports
// false when the connection is to be closed (it has recorded why).
func (c *conn) onTraffic() (keep bool) {
	if c.state.Load() == stClosed {
		return false
	}
	b, _ := c.lk.Peek(-1)
	if len(b) == 0 {
		return true
	}
	c.lastRecv.Store(c.node.now())
	off := 0
	if c.state.Load() == stHandshake {
		n, open, ok := c.handshake(b)
		if !ok {
			return false
		}
		if !open {
			if n > 0 {
				_, _ = c.lk.Discard(n)
			}
			return true
		}
		off = n
	}
	stats := &c.stats
	for off < len(b) {
		f, n, err := wire.DecodeFrame(b[off:], c.node.o.maxFrame)
		if errors.Is(err, wire.ErrNeedMore) {
			break
		}
		if err != nil {
			code := wire.GoAwayProtocolError
			if errors.Is(err, wire.ErrFrameTooLarge) {
				code = wire.GoAwayLimit
			}
			return c.fail(err, code)
		}
		stats.wireIn.Add(uint64(n))
		if err := c.handle(f); err != nil {
			if c.goaway != nil {
				c.close(err)
				return false
			}
			code := wire.GoAwayProtocolError
			if errors.Is(err, ErrInboundBudget) || errors.Is(err, taskid.ErrTooManyChannels) {
				code = wire.GoAwayLimit
			}
			return c.fail(err, code)
		}
		off += n
	}
	// What is left is less than one frame, whose header DecodeFrame has
	// checked against the max frame size: that bounds the inbound buffer.
	if off > 0 { // Discard(0) would drop everything buffered
		_, _ = c.lk.Discard(off)
	}
	c.flush()
	return true
}

// fail reports a fault of the peer's: it tells the peer why with a GOAWAY,
// logs, and closes this one connection. It returns false, for onTraffic.
func (c *conn) fail(err error, code wire.GoAwayCode) bool {
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512]
	}
	c.writeLast(wire.AppendGoAway(nil, wire.GoAway{Code: code, Message: msg}))
	c.close(err)
	return false
}

// writeLast writes a final frame (a GOAWAY) after whatever a direct write
// left over. Loop only.
func (c *conn) writeLast(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.carry) > 0 {
		b = append(c.carry, b...)
		c.carry = nil
	}
	_, _ = c.lk.Write(b)
}

func (c *conn) handle(f wire.Frame) error {
	dialed := c.peer != nil
	switch f.Type {
	case wire.FrameData:
		if dialed {
			return c.unexpected(f.Type)
		}
		return c.onData(f)
	case wire.FrameOpen:
		if dialed {
			return c.unexpected(f.Type)
		}
		o, err := wire.ParseOpen(f.Body)
		if err != nil {
			return err
		}
		return c.onOpen(o)
	case wire.FrameClose:
		if dialed {
			return c.unexpected(f.Type)
		}
		cl, err := wire.ParseClose(f.Body)
		if err != nil {
			return err
		}
		if err := c.in.table.Remove(cl.Channel); err != nil {
			return err
		}
		if ic := c.in.byNum[cl.Channel]; ic != nil && !ic.stale {
			ic.rs.detach(c, cl.Channel)
		}
		c.in.byNum[cl.Channel] = nil
		return nil
	case wire.FrameAckRequest:
		if dialed {
			return c.unexpected(f.Type)
		}
		r, err := wire.ParseAckRequest(f.Body)
		if err != nil {
			return err
		}
		ic, err := c.inChan(r.Channel)
		if err != nil {
			return err
		}
		if ic.stale {
			c.stats.stale.Add(1)
			return nil
		}
		ic.rs.onAckRequest(c, r)
		return nil
	case wire.FrameAck:
		if !dialed {
			return c.unexpected(f.Type)
		}
		a, err := wire.ParseAck(f.Body)
		if err != nil {
			return err
		}
		c.mu.Lock()
		var ch *channel
		if int(a.Channel) < len(c.mu.outByNum) {
			ch = c.mu.outByNum[a.Channel]
		}
		c.mu.Unlock()
		if ch == nil {
			// An ack for a channel closed meanwhile is harmless; one for a
			// number never opened is a fault.
			if _, err := c.outLookup(a.Channel); err != nil {
				return err
			}
			return nil
		}
		ch.onAck(c, a)
		return nil
	case wire.FramePing:
		v, err := wire.ParsePing(f.Body)
		if err != nil {
			return err
		}
		c.sendCtrl(func(b []byte) []byte { return wire.AppendPong(b, v) })
		return nil
	case wire.FramePong:
		v, err := wire.ParsePing(f.Body)
		if err != nil {
			return err
		}
		c.releaseRetired(int64(v))
		return nil
	case wire.FrameGoAway:
		g, err := wire.ParseGoAway(f.Body)
		if err != nil {
			return err
		}
		c.goaway = &GoAwayError{g}
		return c.goaway
	}
	return fmt.Errorf("%w: %v", wire.ErrUnknownFrame, f.Type)
}

func (c *conn) outLookup(num uint32) (taskid.Channel, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.outTable.Retired(num) {
		return taskid.Channel{}, nil // an ack of a closed channel
	}
	ch, err := c.mu.outTable.Lookup(num)
	if err != nil {
		return ch, fmt.Errorf("%w (in an ACK)", err)
	}
	return ch, nil
}

func (c *conn) unexpected(t wire.FrameType) error {
	side := "accepting"
	if c.peer == nil {
		side = "dialing"
	}
	return &wire.FrameError{Type: t, Err: fmt.Errorf("%w: a %v frame may not come from the %s side", wire.ErrUnknownFrame, t, side)}
}

func (c *conn) inChan(num uint32) (*inChan, error) {
	if ic := c.openIn(num); ic != nil {
		return ic, nil
	}
	return nil, fmt.Errorf("%w: %d", wire.ErrUnknownChannel, num)
}

// openIn returns the inbound channel open under num, or nil.
func (c *conn) openIn(num uint32) *inChan {
	if int(num) < len(c.in.byNum) {
		return c.in.byNum[num]
	}
	return nil
}

func (c *conn) onOpen(o wire.Open) error {
	key := taskid.Channel{Source: o.Source, Target: o.Target, Epoch: o.Epoch}
	if ic := c.openIn(o.Channel); ic != nil && ic.key == key {
		// A duplicated OPEN: the channel is open already; answer again.
		ic.rs.onOpen(c, o, ic)
		return nil
	}
	if err := c.in.table.Bind(o.Channel, key); err != nil {
		return err
	}
	for int(o.Channel) >= len(c.in.byNum) {
		c.in.byNum = append(c.in.byNum, nil)
	}
	ic := &inChan{key: key, rs: c.node.recvState(o.Source, o.Target)}
	c.in.byNum[o.Channel] = ic
	ic.rs.onOpen(c, o, ic)
	return nil
}

func (c *conn) onData(f wire.Frame) error {
	body := f.Body
	if f.Flags&wire.DataCompressed != 0 {
		var err error
		c.in.dbuf, err = batch.Decompress(c.in.dbuf[:0], body, c.node.o.maxFrame)
		if err != nil {
			return &wire.FrameError{Type: wire.FrameData, Err: err}
		}
		body = c.in.dbuf
	}
	rd := &c.in.rd
	rd.Reset(body)
	for {
		h, err := rd.NextRun()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		msgs := c.in.msgs[:0]
		for range h.Count {
			m, err := rd.NextMessage()
			if err != nil {
				return err
			}
			msgs = append(msgs, Message{Ts: m.Ts, Payload: m.Payload})
		}
		c.in.msgs = msgs[:0]
		ic, err := c.inChan(h.Channel)
		if err != nil {
			return err
		}
		c.stats.msgsIn.Add(uint64(len(msgs)))
		if ic.stale {
			c.stats.stale.Add(uint64(len(msgs)))
			continue
		}
		if err := ic.rs.onRun(c, ic, h.FirstSeq, msgs); err != nil {
			return err
		}
	}
}

// sendCtrl queues a control frame for the next batch and schedules a flush.
// Safe for concurrent use.
func (c *conn) sendCtrl(appendFrame func([]byte) []byte) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.ctrl = appendFrame(c.mu.ctrl)
	c.scheduleLocked()
	c.mu.Unlock()
}

// directGap is how long a connection must at least have been without
// writes for a sender to write to the socket itself instead of waking the
// loop; the gap must also be as long as a direct write takes, so that
// direct writes take at most half of a sender's time. A sender that
// finds the connection idle saves the loop's wake-up (an eventfd write and a
// thread switch, tens of microseconds on an idle virtual CPU); one that
// sends faster leaves the writing to the loop, which gathers what arrives
// meanwhile into one batch, so a fast producer never spends its time in one
// system call per message.
const directGap = int64(5 * time.Microsecond)

// directMaxUnacked is the most messages a channel may have unacknowledged
// (this one included) for its sender to write directly.
const directMaxUnacked = 64

// enqueue marks ch ready to send on c. The caller holds ch.mu and has
// checked that ch is not queued already. It reports whether the caller,
// once it has released ch.mu, should write the batch itself with
// flushDirect; otherwise the loop has been scheduled. mayDirect is false
// on the loop, which flushes anyway.
func (c *conn) enqueue(ch *channel, bytes int, mayDirect bool) (direct bool) {
	c.pending.Add(int64(bytes))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false
	}
	c.addReadyLocked(ch)
	if c.mu.scheduled {
		return false
	}
	if mayDirect && c.fd >= 0 && !c.linkBuffered.Load() && c.state.Load() == stOpen &&
		c.node.now()-c.lastWrite.Load() >= max(directGap, c.writeCost.Load()) {
		// Claimed: nobody schedules the loop while the caller writes.
		c.mu.scheduled = true
		return true
	}
	c.scheduleLocked()
	return false
}

// flushDirect writes what is ready from the calling goroutine, after
// enqueue said so. If the loop or another sender is writing, the loop is
// scheduled instead.
func (c *conn) flushDirect() {
	if !c.wmu.TryLock() {
		c.mu.Lock()
		c.mu.scheduled = false
		c.scheduleLocked()
		c.mu.Unlock()
		return
	}
	c.flushLocked(true)
	c.wmu.Unlock()
}

func (c *conn) scheduleLocked() {
	if c.mu.scheduled || c.state.Load() != stOpen {
		return
	}
	c.mu.scheduled = true
	if err := c.lk.Execute(c.flushTask); err != nil {
		c.mu.scheduled = false
	}
}

// addReadyLocked appends chs to the ready list, reusing the slots of
// channels already popped before the list would grow. The caller holds mu.
func (c *conn) addReadyLocked(chs ...*channel) {
	c.mu.ready, c.mu.readyHead = appendQueue(c.mu.ready, c.mu.readyHead, chs...)
}

func (c *conn) popReady() *channel {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.readyHead == len(c.mu.ready) {
		c.mu.ready = c.mu.ready[:0]
		c.mu.readyHead = 0
		return nil
	}
	ch := c.mu.ready[c.mu.readyHead]
	c.mu.ready[c.mu.readyHead] = nil
	c.mu.readyHead++
	return ch
}

func (c *conn) hasWork() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.ctrl) > 0 || c.mu.readyHead < len(c.mu.ready)
}

// syncInflight tells the batch policy which writes completed: gnet gives no
// callback when its outbound buffer drains, so the buffered byte count is
// read instead (on the loop; a direct writer knows only that the link held
// nothing when the loop last looked). The caller holds wmu.
func (c *conn) syncInflight(direct bool) {
	p := c.out.policy
	want := 0
	if direct {
		if c.linkBuffered.Load() || len(c.carry) > 0 {
			return
		}
	} else {
		buffered := c.lk.OutboundBuffered()
		c.linkBuffered.Store(buffered > 0)
		max := c.node.o.batch.MaxBatchBytes
		want = (buffered + len(c.carry) + max - 1) / max
	}
	for p.Inflight() > want {
		p.WriteDone(c.node.now())
	}
}

// flush writes batches while the policy allows. It runs on the loop.
func (c *conn) flush() {
	c.wmu.Lock()
	c.flushLocked(false)
	c.wmu.Unlock()
}

// flushLocked writes batches while the policy says so: on the loop, or,
// when direct, from a sender's goroutine straight to the socket. The caller
// holds wmu.
func (c *conn) flushLocked(direct bool) {
	c.mu.Lock()
	c.mu.scheduled = false
	c.mu.Unlock()
	if c.state.Load() != stOpen {
		return
	}
	for {
		c.syncInflight(direct)
		if !c.hasWork() && (direct || len(c.carry) == 0) {
			return
		}
		if direct && (len(c.carry) > 0 || c.linkBuffered.Load()) {
			// Bytes are waiting in front: only the loop may write now.
			c.mu.Lock()
			c.scheduleLocked()
			c.mu.Unlock()
			return
		}
		now := c.node.now()
		d := c.out.policy.Decide(now, int(max(c.pending.Load(), 1)))
		if !d.Flush {
			if d.WakeAt != 0 || c.out.policy.Inflight() > 0 {
				c.node.timers.wakeConn(c, d.WakeAt)
			}
			return
		}
		if n := c.writeBatch(now, d.Cause, direct); n == 0 {
			return
		}
		if c.state.Load() != stOpen {
			return
		}
	}
}

// writeBatch builds one batch from the queued control frames and the ready
// channels and writes it: through the link on the loop, or straight to the
// socket when direct. It returns the bytes written (or, when direct, taken
// on: a tail the kernel refused waits in carry for the loop).
func (c *conn) writeBatch(now int64, cause batch.Cause, direct bool) int {
	o := &c.out
	c.mu.Lock()
	o.ctrl = append(o.ctrl[:0], c.mu.ctrl...)
	c.mu.ctrl = c.mu.ctrl[:0]
	c.mu.Unlock()

	b := &o.b
	b.begin(c.node.o.batch.MaxBatchBytes)
	requeue := o.requeue[:0]
	for b.room() > 0 {
		ch := c.popReady()
		if ch == nil {
			break
		}
		if ch.fill(c, b, now) {
			requeue = append(requeue, ch) // it has more: the batch is full
			break
		}
	}
	c.pending.Add(-int64(b.bytes))
	c.mu.Lock()
	c.addReadyLocked(requeue...)
	drained := c.mu.readyHead == len(c.mu.ready)
	c.mu.Unlock()
	if drained {
		c.pending.Store(0)
	}
	clear(requeue)
	o.requeue = requeue[:0]

	iov := o.iov[:0]
	carried := len(c.carry) > 0 && !direct
	if carried {
		iov = append(iov, c.carry)
	}
	if len(o.ctrl) > 0 {
		iov = append(iov, o.ctrl)
	}
	if len(b.opens) > 0 {
		iov = append(iov, b.opens)
	}
	if !b.empty() {
		frame := b.finish()
		if c.compress && o.comp != nil {
			body := frame[wire.HeaderLen:]
			var cstart int
			o.cdata, cstart = wire.BeginFrame(o.cdata[:0], wire.FrameData, wire.DataCompressed)
			if out, ok := o.comp.Compress(o.cdata, body); ok {
				o.cdata = wire.FinishFrame(out, cstart)
				frame = o.cdata
			}
		}
		iov = append(iov, frame)
		c.stats.msgsOut.Add(uint64(b.msgs))
	}
	if len(b.reqs) > 0 {
		iov = append(iov, b.reqs)
	}
	o.iov = iov
	total := 0
	for _, b := range iov {
		total += len(b)
	}
	if total == 0 {
		return 0
	}
	if direct {
		if !c.writeDirect(iov, total) {
			return 0
		}
	} else {
		if _, err := c.lk.Writev(iov); err != nil {
			c.close(err)
			return 0
		}
		c.linkBuffered.Store(c.lk.OutboundBuffered() > 0)
		if carried {
			c.carry = nil
		}
	}
	c.lastWrite.Store(c.node.now())
	clear(o.iov[:cap(o.iov)])
	o.policy.Flushed(now, total, cause)
	c.stats.wireOut.Add(uint64(total))
	c.stats.batches.Add(1)
	c.stats.flushes[cause].Add(1)
	return total
}

// outBatch is the batch a connection builds: its OPEN frames, one DATA
// frame of runs, its ACKREQUEST frames. Channels fill it (channel.fill)
// knowing only how much room is left and whether it is empty, as quic-go's
// framer pulls frames from its streams; it knows nothing of windows.
type outBatch struct {
	opens, data, reqs []byte
	limit             int // the DATA frame may grow to this length
	msgs, bytes       int // messages and payload bytes in it
}

// begin starts an empty batch whose DATA body may take maxBody bytes.
func (b *outBatch) begin(maxBody int) {
	b.opens, b.reqs = b.opens[:0], b.reqs[:0]
	b.data, _ = wire.BeginFrame(b.data[:0], wire.FrameData, 0)
	b.limit = wire.HeaderLen + maxBody
	b.msgs, b.bytes = 0, 0
}

// room is how many more bytes the DATA body may take.
func (b *outBatch) room() int { return b.limit - len(b.data) }

// empty reports whether the DATA frame has no run yet: the next run may
// then be larger than room (a message larger than a batch goes alone).
func (b *outBatch) empty() bool { return len(b.data) == wire.HeaderLen }

// finish completes the DATA frame and returns it.
func (b *outBatch) finish() []byte {
	b.data = wire.FinishFrame(b.data, 0)
	return b.data
}

// writeDirect writes iov (total bytes) to the socket from a sender's
// goroutine. What the kernel does not take goes to carry, and the loop is
// scheduled to write it (gnet then buffers it and waits for the socket). It
// reports false if the connection failed. The caller holds wmu.
func (c *conn) writeDirect(iov [][]byte, total int) bool {
	start := c.node.now()
	c.fdMu.Lock()
	n, err := -1, error(net.ErrClosed)
	if c.fd >= 0 {
		n, err = unix.Writev(c.fd, iov)
	}
	c.fdMu.Unlock()
	c.writeCost.Store(nextWriteCost(c.writeCost.Load(), c.node.now()-start))
	if err == unix.EAGAIN || err == unix.EINTR {
		n, err = 0, nil
	}
	if err != nil {
		c.close(err)
		_ = c.lk.Close()
		return false
	}
	c.stats.direct.Add(1)
	if n == total {
		return true
	}
	c.stats.carried.Add(1)
	for _, b := range iov {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		c.carry = append(c.carry, b[n:]...)
		n = 0
	}
	c.mu.Lock()
	c.scheduleLocked()
	c.mu.Unlock()
	return true
}

// nextWriteCost returns the moving average of what direct writes take
// (ns), avg, updated with one write that took took. Each sample is capped at
// twice the average plus 2µs: a write whose thread was descheduled for a
// while (hundreds of microseconds, now and then, on a busy or virtual
// machine) would otherwise raise the average for dozens of writes and keep
// the senders of a request-response flow off the socket, each then paying
// the loop's wake-up instead. Writes that really take longer still double
// the average within a dozen writes.
func nextWriteCost(avg, took int64) int64 {
	sample := min(took, 2*avg+int64(2*time.Microsecond))
	return avg + (sample-avg)/8
}

// setLink gives c its link. With faults configured it is wrapped in a
// faultLink, and c makes no direct writes, which would bypass it; otherwise
// fd >= 0 enables direct writes on a duplicate of it. It runs before the
// link delivers any event.
func (c *conn) setLink(lk link, fd int) {
	if m := newFaultModel(c.node.o.faults, c.stream, &c.node.faultN); m != nil {
		c.faults = &faultLink{link: lk, model: m, now: c.node.now}
		c.lk = c.faults
		return
	}
	c.lk = lk
	if fd >= 0 {
		c.setDirectFD(fd)
	}
}

// setDirectFD enables direct writes on a duplicate of fd. Without one
// (the duplication failed) every write goes through the loop.
func (c *conn) setDirectFD(fd int) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.fdMu.Lock()
	c.fd = dup
	c.fdMu.Unlock()
	c.mu.Unlock()
}

// close records why the connection ends and detaches it; the caller makes
// the link close the socket (onTraffic returning false, or lk.Close).
// Safe to call more than once; the first reason wins.
func (c *conn) close(err error) {
	if c.state.Swap(stClosed) == stClosed {
		return
	}
	c.mu.Lock()
	c.fdMu.Lock() // waits for a direct write in progress
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
		c.fd = -1
	}
	c.fdMu.Unlock()
	c.mu.Unlock()
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

type retiredNum struct {
	num   uint32
	token int64 // the PING sent after its CLOSE
}

// retire closes channel number num on c (the caller sends the CLOSE) and
// holds the number back until a PONG answers a PING sent after it. The
// caller holds c.mu.
func (c *conn) retireLocked(num uint32) (ping int64) {
	if c.mu.outTable == nil || c.mu.outTable.Retire(num) != nil {
		return 0
	}
	if int(num) < len(c.mu.outByNum) {
		c.mu.outByNum[num] = nil
	}
	ping = c.node.now()
	c.mu.retired = append(c.mu.retired, retiredNum{num: num, token: ping})
	return ping
}

// releaseRetired frees the numbers retired before the PING that PONG v
// answers: the receiver sent the PONG after it had read their CLOSEs, after
// which it acks them no more, and TCP delivers in order.
func (c *conn) releaseRetired(v int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.mu.retired[:0]
	for _, r := range c.mu.retired {
		if r.token <= v {
			_ = c.mu.outTable.Remove(r.num)
		} else {
			keep = append(keep, r)
		}
	}
	clear(c.mu.retired[len(keep):])
	c.mu.retired = keep
}

// hasRetired reports whether numbers wait for a PONG.
func (c *conn) hasRetired() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.retired) > 0
}
