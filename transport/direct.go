// The direct writer: a sender that finds its connection idle writes the
// batch to a duplicate of the socket itself (fd), instead of waking the
// loop; what the kernel does not take waits in carry for the loop, which
// writes it before anything newer. writeCost, the moving average of what
// such a write takes, decides when a connection counts as idle.

package transport

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
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
// system call per message.
const directGap = int64(5 * time.Microsecond)

// directMaxUnacked is the most messages a channel may have unacknowledged
// (this one included) for its sender to write directly.
const directMaxUnacked = 64

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
	c.schedule()
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
