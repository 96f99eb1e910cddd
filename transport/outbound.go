// The outbound mux of a dialing connection: channel numbers with their
// retirement, the queue of channels ready to send, control frames waiting
// for the next batch, and the batch builder that channels fill
// (channel.fill) and that is then written through the link or directly
// (direct.go).

package transport

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// onAck hands an ACK to the channel it is for.
func (c *conn) onAck(a wire.Ack) error {
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

// sendCtrl queues a control frame for the next batch and schedules a flush.
// Safe for concurrent use.
func (c *conn) sendCtrl(appendFrame func([]byte) []byte) {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.ctrl = appendFrame(c.mu.ctrl)
	wake := c.scheduleLocked()
	c.mu.Unlock()
	if wake {
		c.wake()
	}
}

// enqueue marks ch ready to send on c. The caller holds ch.mu and has
// checked that ch is not queued already. It reports whether the caller,
// once it has released ch.mu, should write the batch itself with
// flushDirect, or else wake the loop with wake; or neither, when the loop
// is already scheduled or the connection is stream-driven. mayDirect is
// false on the loop, which flushes anyway, and for a streaming channel.
func (c *conn) enqueue(ch *channel, bytes int, mayDirect bool) (direct, wake bool) {
	c.pending.Add(int64(bytes))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return false, false
	}
	c.addReadyLocked(ch)
	if c.mu.scheduled {
		return false, false
	}
	if c.mu.streaming && (!mayDirect || ch == c.mu.streamer) && c.streamingLocked(c.node.now()) {
		// Stream-driven (see writeStreaming): the streaming senders write
		// the batches, and the loop flushes what they leave once the
		// state ends. The streamer's own channel counts as streaming
		// however few of its messages are unacknowledged: a receiver
		// that caught up during its sender's wait acknowledged them all.
		return false, false
	}
	if mayDirect && c.fd >= 0 && !c.linkBuffered.Load() && c.state.Load() == stOpen && c.idleForDirect() {
		// Claimed: nobody schedules the loop while the caller writes.
		c.mu.scheduled = true
		return true, false
	}
	return false, c.scheduleLocked()
}

// idleForDirect reports whether the connection has been without a write
// for directGap (or a write's cost), and every connection of the node
// without a direct write as long, unless the connection's loop is busy and
// shared with other nodes (loopLoad.busyShared): then what it is asked to
// write waits behind their work, a sender's own write does not.
func (c *conn) idleForDirect() bool {
	now, gap := c.node.now(), max(directGap, c.writeCost.Load())
	if now-c.lastWrite.Load() < gap {
		return false
	}
	return now-c.node.lastDirect.Load() >= gap || c.load.Load().busyShared(loadNow())
}

// scheduleLocked marks the loop as scheduled to flush. It reports whether
// the caller must wake the loop (wake) once it has released c.mu and any
// lock a flush takes: waking is a system call, and a loop woken while the
// waker still holds c.mu wakes only to wait for it, then waits again for a
// thread. While the loop is reading (onTraffic), which flushes when it is
// done, nobody wakes it: the acks a receiving loop sends and the batches an
// ack frees on a sending loop are scheduled from the loop itself, and each
// wake-up was a write to gnet's eventfd and one more turn of the loop.
// Nor while the loop is in a callback for another of its connections (an
// inline task answering what it was given, say): the loop flushes c when
// that callback ends (loopLoad.deferFlush).
func (c *conn) scheduleLocked() (wake bool) {
	if c.mu.scheduled || c.state.Load() != stOpen {
		return false
	}
	c.mu.scheduled = true
	return !c.mu.reading && !c.load.Load().deferFlush(c)
}

// wake makes the loop flush, after scheduleLocked said so.
func (c *conn) wake() {
	if hook := testHookWake.Load(); hook != nil {
		(*hook)(c)
	}
	if err := c.lk.Execute(c.flushTask); err != nil {
		c.mu.Lock()
		c.mu.scheduled = false
		c.mu.Unlock()
	}
}

// testHookWake, if set, is called as c.wake asks c's loop to flush.
var testHookWake atomic.Pointer[func(c *conn)]

// schedule is scheduleLocked and wake for a caller that holds no lock.
func (c *conn) schedule() {
	c.mu.Lock()
	wake := c.scheduleLocked()
	c.mu.Unlock()
	if wake {
		c.wake()
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

// syncInflight tells the batch policy which writes completed by now: gnet
// gives no callback when its outbound buffer drains, so the buffered byte
// count is read instead (on the loop; a direct writer knows only that the
// link held nothing when the loop last looked). The caller holds wmu.
func (c *conn) syncInflight(direct bool, now int64) {
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
		p.WriteDone(now)
	}
}

// flush writes batches while the policy allows. It runs on the loop.
func (c *conn) flush() {
	c.wmu.Lock()
	c.flushLocked(false)
	c.wmu.Unlock()
}

// loopFlush is the flush a sender asks of the loop (wake): it counts in
// the loop's load.
func (c *conn) loopFlush() {
	l := c.load.Load()
	if l == nil {
		c.flush()
		return
	}
	start := l.begin()
	c.flush()
	l.done(start, loadNow())
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
	// One reading of the clock, and after each write the time it ended (a
	// reading cost 40 ns on the 2-core Intel Xeon VM measured).
	now := c.node.now()
	for {
		c.syncInflight(direct, now)
		if !c.hasWork() && (direct || len(c.carry) == 0) {
			return
		}
		if direct && (len(c.carry) > 0 || c.linkBuffered.Load()) {
			// Bytes are waiting in front: only the loop may write now.
			c.schedule()
			return
		}
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
		now = c.lastWrite.Load() // when the write ended: this writer's, under wmu
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
	data := !b.empty()
	if data {
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
	var end int64
	if direct {
		var ok bool
		if end, ok = c.writeDirect(iov, total); !ok {
			return 0
		}
	} else {
		if _, err := c.lk.Writev(iov); err != nil {
			c.close(err)
			return 0
		}
		end = c.node.now()
		c.linkBuffered.Store(c.lk.OutboundBuffered() > 0)
		if carried {
			c.carry = nil
		}
	}
	c.lastWrite.Store(end)
	clear(o.iov[:cap(o.iov)])
	o.policy.Flushed(now, total, cause)
	if hook := testHookBatchWritten.Load(); hook != nil {
		(*hook)(c, total)
	}
	w := outCounts{wire: uint64(total), batches: 1, flushed: true, cause: cause,
		ctrlFrames: lossyCtrlFrames(o.ctrl) + lossyCtrlFrames(b.reqs)}
	if data {
		w.msgs, w.dataFrames = uint64(b.msgs), 1
	}
	c.countOut(w)
	return total
}

// testHookBatchWritten, set only by tests, runs in writeBatch once a batch
// of total bytes is written and before it is counted.
var testHookBatchWritten atomic.Pointer[func(c *conn, total int)]

// outCounts is what a write adds to its connection's outgoing counters.
type outCounts struct {
	msgs, wire, batches, dataFrames, ctrlFrames, direct, carried uint64
	flushed                                                      bool // a batch cut for cause
	cause                                                        batch.Cause
}

// countOut adds a write's counts w to c's counters (conn.count).
func (c *conn) countOut(w outCounts) {
	c.count(func(s *connCounters) {
		s.msgsOut.Add(w.msgs)
		s.wireOut.Add(w.wire)
		s.batches.Add(w.batches)
		s.dataFrames.Add(w.dataFrames)
		s.ctrlFrames.Add(w.ctrlFrames)
		s.direct.Add(w.direct)
		s.carried.Add(w.carried)
		if w.flushed {
			s.flushes[w.cause].Add(1)
		}
	}, func() ConnStats {
		late := ConnStats{MessagesOut: w.msgs, WireOut: w.wire, Batches: w.batches, DataFrames: w.dataFrames,
			CtrlFrames: w.ctrlFrames, DirectWrites: w.direct, Carried: w.carried}
		if w.flushed {
			late.Flushes = map[string]uint64{w.cause.String(): 1}
		}
		return late
	})
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

// lossyCtrlFrames counts the ACKREQUEST, ACK, PING and PONG frames in b,
// whole frames back to back: the control frames faults may drop
// ([ConnStats.CtrlFrames]).
func lossyCtrlFrames(b []byte) uint64 {
	var n uint64
	for len(b) >= wire.HeaderLen {
		h, err := wire.DecodeHeader(b, math.MaxInt32)
		if err != nil {
			break
		}
		switch h.Type {
		case wire.FrameAckRequest, wire.FrameAck, wire.FramePing, wire.FramePong:
			n++
		}
		b = b[min(len(b), wire.HeaderLen+int(h.Length)):]
	}
	return n
}
