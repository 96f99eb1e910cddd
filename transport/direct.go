// The direct writer: a sender that finds its connection idle writes the
// batch to a duplicate of the socket itself (fd), instead of waking the
// loop; what the kernel does not take waits in carry for the loop, which
// writes it before anything newer. writeCost, the moving average of what
// such a write takes, decides when a connection counts as idle. A sender
// that outruns its connection writes its full batches the same way
// (writeStreaming).

package transport

import (
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/batch"
)

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

// directGap is how long a connection must at least have been without
// writes for a sender to write to the socket itself instead of waking the
// loop; the gap must also be as long as a direct write takes, so that
// direct writes take at most half of a sender's time. A sender that
// finds the connection idle saves the loop's wake-up (an eventfd write and a
// thread switch, tens of microseconds on an idle virtual CPU); one that
// sends faster leaves the writing to the loop, which gathers what arrives
// meanwhile into one batch, so a fast producer never spends its time in one
// system call per message. The gap counts for the node as well as for the
// connection (Node.lastDirect): a producer that sends to many peers in
// turn finds each of their connections idle, and with the gap counted per
// connection alone it made a system call for nearly every message (to 20
// peers at 100,000 msgs/s in all, across two processes, a fixed-rate p99
// of 3.1-5.6 ms against the net backend's 1.1-1.45 ms, and 1.0-1.7 ms
// since; results/bench-amd-epyc/peers). The node's part is waived while
// the connection's loop is busy and shared with other nodes
// (loopLoad.busyShared): in one process, where the loop that writes for
// the sender also reads for the 20 receiving nodes, the writes the gap
// left to it waited behind that work (p99 4.3-9.3 ms, against 1.5-1.9 ms
// with the node's part waived).
const directGap = int64(5 * time.Microsecond)

// directMaxUnacked is the most messages a channel may have unacknowledged
// (this one included) for its sender to write directly.
const directMaxUnacked = 64

// streamHold is how long a connection stays stream-driven after a sender
// last wrote a full batch itself or ended a wait for credit. A sender at
// full speed fills a 64 KiB batch of 100-byte messages every 40-100 µs on
// the 2-core VMs measured, but is also descheduled, or waits for credit,
// for hundreds of microseconds now and then; a hold shorter than those
// gaps ends the state and starts it again after each (a kick of the
// node's timer, a wake-up of the loop, partial batches from it), and the
// timer looks at a connection once a hold while it streams. On a 2-core
// AMD EPYC VM 300 µs instead of 100 µs moved two processes from
// 11.4-12.9 to 11.8-13.2 M msgs/s (100 B; results/cpu-budget, "Stream
// hold: kept at 300 µs"); 1 ms read the same. A sender that stops without
// waiting or flushing leaves its tail to the loop, which writes it once
// the state has ended: at most a hold and the timer's lateness after the
// sender's last full batch.
const streamHold = int64(300 * time.Microsecond)

// writeStreaming writes one full batch from the calling sender's
// goroutine: its channel has nearly a batch's worth of messages unsent
// (channel.fullBatch). A sender that outruns the loop would otherwise hand
// it each batch (a wake-up and a thread switch: tens of microseconds on a
// virtual machine whose second vCPU idles), while the loop also cut
// partial batches at every ack it read; writing full batches where they
// are filled is what plain TCP's writer does.
//
// A connection on which a sender wrote a full batch itself, or ended a
// wait in Send for its window's credit, is stream-driven (markStreaming) for
// streamHold after the last such event: streaming channels queued on it do
// not wake the loop (the channel whose sender made it so counts as streaming
// however few of its messages are unacknowledged, conn.enqueue), and the
// loop does not flush after reading acks. The
// state ends when the node's timer, or the next channel queued or read,
// finds it stale, and the loop then flushes what the senders left; the
// latter two do not depend on the timer goroutine getting a P (a gnet loop
// in epoll_wait and a sender in a system call can hold both of a 2-core
// process's Ps for milliseconds). A channel sending at a moderate rate
// never fills a batch before the loop takes it and never runs out of
// credit, so it never makes its connection stream-driven, and its messages
// go out as before: at once, by the sender on an idle connection, by the
// loop otherwise.
//
// If the loop or another sender is writing, that writer takes what waits;
// if bytes wait in front (a direct write's carry, the link's buffer), the
// loop keeps the writing. Connections without direct writes (the net
// backend, TLS, injected faults) never stream this way.
//
// Whether the connection is stream-driven or not, a sender about to wait
// writes its channel's unsent tail itself (channel.writeOwnTail).
//
// It reports whether it wrote a batch.
func (c *conn) writeStreaming(ch *channel) bool {
	if !c.wmu.TryLock() {
		return false // the loop or another sender writes; it takes what waits
	}
	defer c.wmu.Unlock()
	if !c.takesDirect() || c.state.Load() != stOpen {
		return false // the loop writes
	}
	if len(c.carry) > 0 || c.linkBuffered.Load() {
		c.schedule()
		return false
	}
	now := c.node.now()
	c.syncInflight(true, now)
	if c.writeBatch(now, batch.CauseFull, true) == 0 {
		return false
	}
	// A full batch of its own (not the batch of an idle connection,
	// flushDirect, which may hold many channels' messages): the sender
	// outruns the loop.
	c.markStreaming(c.lastWrite.Load(), ch)
	return true
}

// markStreaming makes a connection that takes direct writes
// stream-driven from now, after a sender wrote a full batch itself or
// ended a wait for its window's credit, with the node's timer to look at
// it after streamHold. A connection without direct writes stays as it is.
func (c *conn) markStreaming(now int64, ch *channel) {
	c.streamAt.Store(now)
	c.mu.Lock()
	arm := !c.mu.streaming && !c.mu.closed && c.fd >= 0
	c.mu.streaming = c.mu.streaming || arm
	if c.mu.streaming && ch != nil {
		c.mu.streamer = ch
	}
	c.mu.Unlock()
	if arm {
		c.node.timers.wakeConn(c, now+streamHold)
	}
}

// writeTail writes what is ready from a sender's goroutine before it
// waits (channel.writeOwnTail), if the connection takes direct writes.
func (c *conn) writeTail() {
	if !c.wmu.TryLock() {
		return // the writer takes it
	}
	defer c.wmu.Unlock()
	if c.takesDirect() {
		c.flushLocked(true)
	}
}

// takesDirect reports whether senders may write to the connection
// themselves: it has a duplicate of its socket (the gnet backend, without
// TLS or injected faults) and is not closed.
func (c *conn) takesDirect() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fd >= 0 && !c.mu.closed
}

// streamingLocked reports whether the connection is stream-driven at now
// (a sender wrote a full batch itself, or ended a wait for its window's
// credit, within streamHold before now), and ends a state gone stale: the
// node's timer, a channel queued and a read all end it this way, whichever
// looks first. The caller holds c.mu.
func (c *conn) streamingLocked(now int64) bool {
	if c.mu.streaming && now-c.streamAt.Load() < streamHold {
		return true
	}
	c.mu.streaming, c.mu.streamer = false, nil
	return false
}

// streamDeadline is the node's timer's look at a connection it was to
// flush at now: while the connection is stream-driven it returns when to
// look again; otherwise the timer schedules the loop's flush of what the
// senders left.
func (c *conn) streamDeadline(now int64) (at int64, later bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.streamingLocked(now) {
		return 0, false
	}
	return c.streamAt.Load() + streamHold, true
}

// flushDirect writes what is ready from the calling goroutine, after
// enqueue said so. If the loop or another sender is writing, the loop is
// scheduled instead.
func (c *conn) flushDirect() {
	if !c.wmu.TryLock() {
		c.mu.Lock()
		c.mu.scheduled = false
		wake := c.scheduleLocked()
		c.mu.Unlock()
		if wake {
			c.wake()
		}
		return
	}
	c.flushLocked(true)
	c.wmu.Unlock()
}

// writeDirect writes iov (total bytes) to the socket from a sender's
// goroutine. What the kernel does not take goes to carry, and the loop is
// scheduled to write it (gnet then buffers it and waits for the socket). It
// returns when the write ended (Node.now), and false if the connection
// failed. The caller holds wmu.
func (c *conn) writeDirect(iov [][]byte, total int) (end int64, ok bool) {
	start := c.node.now()
	c.fdMu.Lock()
	n, err := -1, error(net.ErrClosed)
	if c.fd >= 0 {
		n, err = writev(c.fd, iov)
	}
	c.fdMu.Unlock()
	end = c.node.now()
	c.writeCost.Store(nextWriteCost(c.writeCost.Load(), end-start))
	c.node.lastDirect.Store(end)
	if err == unix.EAGAIN || err == unix.EINTR {
		n, err = 0, nil
	}
	if err != nil {
		c.close(err)
		_ = c.lk.Close()
		return 0, false
	}
	if n == total {
		c.countOut(outCounts{direct: 1})
		return end, true
	}
	c.countOut(outCounts{direct: 1, carried: 1})
	for _, b := range iov {
		if n >= len(b) {
			n -= len(b)
			continue
		}
		c.carry = append(c.carry, b[n:]...)
		n = 0
	}
	c.schedule()
	return end, true
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

// setDirectFD enables direct writes on a duplicate of fd. Without one
// (the duplication failed) every write goes through the loop.
func (c *conn) setDirectFD(fd int) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load() == stClosed {
		// close has been or will be past its look at fd without it.
		_ = unix.Close(dup)
		return
	}
	c.fdMu.Lock()
	c.fd = dup
	c.fdMu.Unlock()
}
