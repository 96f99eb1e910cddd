// Reading and dispatch: a connection's loop decodes what arrived (the
// handshake, then frames) and hands each frame to the part it is for: the
// inbound demux (inbound.go) on the accepting side, the outbound mux
// (outbound.go) on the dialing side.

package transport

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// onTraffic decodes everything buffered, which arrived by now (Node.now),
// and then flushes what that scheduled. It runs on the loop. It reports
// false when the connection is to be closed (it has recorded why).
func (c *conn) onTraffic(now int64) (keep bool) {
	c.mu.Lock()
	c.mu.reading = true
	c.mu.Unlock()
	keep, done := c.read(now)
	c.retryParked()
	c.countIn()
	c.mu.Lock()
	c.mu.reading = false
	scheduled := c.mu.scheduled
	// While senders write their own batches (conn.writeStreaming), what
	// they have not yet filled is theirs: an ack read here does not cut
	// it into a partial batch.
	streamed := c.mu.streaming && c.streamingLocked(c.node.now())
	c.mu.Unlock()
	// A flush scheduled while reading woke nobody (scheduleLocked): it
	// happens here, as it does after every complete read.
	if keep && ((done && !streamed) || scheduled) {
		c.flush()
	}
	return keep
}

// read decodes everything buffered, which arrived by now, for onTraffic.
// done says it got past the handshake and through every whole frame.
func (c *conn) read(now int64) (keep, done bool) {
	if c.state.Load() == stClosed {
		return false, false
	}
	b, _ := c.lk.Peek(-1)
	if len(b) == 0 {
		return true, false
	}
	if hook := testHookReadBegins.Load(); hook != nil {
		(*hook)(c, b)
	}
	c.lastRecv.Store(now)
	// A peer that does not read what it is sent, yet sends on, would make
	// the answers to what it sends (PONGs, ACKs) pile up here without
	// bound: it loses the connection instead. This read adds at most the
	// answers to what one read brought.
	if n := c.backlog(); n > minBacklogLimit {
		if limit := c.backlogLimit(); n > limit {
			return c.fail(fmt.Errorf("%w: %d bytes wait for it, over the limit of %d", ErrPeerNotReading, n, limit), wire.GoAwayLimit), false
		}
	}
	off := 0
	if c.state.Load() == stHandshake {
		n, open, ok := c.handshake(b)
		if !ok {
			return false, false
		}
		if !open {
			if n > 0 {
				_, _ = c.lk.Discard(n)
			}
			return true, false
		}
		off = n
	}
	counts := &c.in.counts
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
			return c.fail(err, code), false
		}
		counts.wire += uint64(n)
		if err := c.handle(f); err != nil {
			// A node shutting down closes its connections itself (the
			// open ones after a GOAWAY SHUTDOWN): an OPEN it refuses for
			// that is no fault of the peer's.
			if c.goaway != nil || errors.Is(err, ErrClosed) {
				c.close(err)
				return false, false
			}
			code := wire.GoAwayProtocolError
			if errors.Is(err, ErrInboundBudget) || errors.Is(err, taskid.ErrTooManyChannels) {
				code = wire.GoAwayLimit
			}
			return c.fail(err, code), false
		}
		off += n
	}
	// What is left is less than one frame, whose header DecodeFrame has
	// checked against the max frame size: that bounds the inbound buffer.
	if off > 0 { // Discard(0) would drop everything buffered
		_, _ = c.lk.Discard(off)
	}
	return true, true
}

// inCounts is what a read callback adds to its connection's incoming
// counters. The loop adds up a callback's counts here, in c.in.counts, and
// adds them to the connection once, as the callback ends (countIn), so that
// the frames and messages it reads take no lock for it.
type inCounts struct {
	msgs, bytes, wire, stale, dup, gap uint64
}

// countIn adds what the read callback read (c.in.counts) to c's counters
// (conn.count), and clears it; loop only.
func (c *conn) countIn() {
	r := c.in.counts
	if r == (inCounts{}) {
		return
	}
	c.in.counts = inCounts{}
	c.count(func(s *connCounters) {
		s.msgsIn.Add(r.msgs)
		s.bytesIn.Add(r.bytes)
		s.wireIn.Add(r.wire)
		s.stale.Add(r.stale)
		s.dupIn.Add(r.dup)
		s.gapIn.Add(r.gap)
	}, func() ConnStats {
		return ConnStats{MessagesIn: r.msgs, BytesIn: r.bytes, WireIn: r.wire, Stale: r.stale, Duplicates: r.dup, Gaps: r.gap}
	})
}

// testHookReadBegins, set only by tests, runs once in a read callback that
// has bytes b to decode, after read found the connection open.
var testHookReadBegins atomic.Pointer[func(c *conn, b []byte)]

// backlog is what the connection holds for its peer to read: its control
// frames not yet written and what the link buffers. Loop only.
func (c *conn) backlog() int {
	c.mu.Lock()
	n := len(c.mu.ctrl)
	c.mu.Unlock()
	return n + c.lk.OutboundBuffered()
}

// backlogLimit bounds backlog for a peer that reads. What an honest
// connection holds for its peer is its windows' data, which the peer budget
// bounds (twice: a batch re-sent while the first copy still waits), the
// batches the batch policy lets be in flight, a control frame or two for
// each channel (an OPEN, an ACKREQUEST, an ACK), and a margin for PINGs and
// PONGs: 49 MiB with the defaults.
func (c *conn) backlogLimit() int {
	o := &c.node.o
	return 2*o.peerBudget + o.batch.MaxInflight*o.maxFrame + 128*o.maxChannels + minBacklogLimit
}

// minBacklogLimit is the least backlogLimit, the margin for PINGs and PONGs.
const minBacklogLimit = 1 << 20

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

func (c *conn) handle(f wire.Frame) error {
	// The dialing side receives acks and pongs; the accepting side, data
	// and the frames that open, close and query channels. Either side
	// answers pings and heeds GOAWAY.
	dialed := c.peer != nil
	switch f.Type {
	case wire.FrameData, wire.FrameOpen, wire.FrameClose, wire.FrameAckRequest:
		if dialed {
			return c.unexpected(f.Type)
		}
		return c.demux(f)
	case wire.FrameAck:
		if !dialed {
			return c.unexpected(f.Type)
		}
		a, err := wire.ParseAck(f.Body)
		if err != nil {
			return err
		}
		return c.onAck(a)
	case wire.FramePing:
		v, err := wire.ParsePing(f.Body)
		if err != nil {
			return err
		}
		p := wire.Pong{Value: v}
		if f.Flags&wire.PingClock != 0 {
			p.Clock, p.HasClock = c.node.Clock(), true
		}
		c.sendCtrl(func(b []byte) []byte { return wire.AppendPong(b, p) })
		return nil
	case wire.FramePong:
		p, err := wire.ParsePong(f.Flags, f.Body)
		if err != nil {
			return err
		}
		if p.HasClock {
			n := c.node
			c.clock.add(n.clockAt(int64(p.Value)), n.Clock(), p.Clock)
		}
		c.releaseRetired(int64(p.Value))
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

func (c *conn) unexpected(t wire.FrameType) error {
	side := "accepting"
	if c.peer == nil {
		side = "dialing"
	}
	return &wire.FrameError{Type: t, Err: fmt.Errorf("%w: a %v frame may not come from the %s side", wire.ErrUnknownFrame, t, side)}
}
