// Clock offsets: each connection estimates how far its peer's clock is from
// this node's, NTP-style, from its PING/PONG round trips. A PING carries the
// time it was queued (T1, as a token) and asks for the peer's clock
// (wire.PingClock); the PONG echoes the token and carries the peer's clock
// when it read the PING (C); the node reads it at T4. The peer's clock read C
// at some instant between T1 and T4 of this node's, so it is ahead by
// C - (T1+T4)/2 to within (T4-T1)/2. Of the recent samples the one with the
// shortest round trip is kept: the tightest bound, the least queueing in it.

package transport

import (
	"sync/atomic"
	"time"
)

// clockSamples is how many recent round trips a connection keeps; at the
// default ping interval of 1 s, the last 8 s, short enough to follow the
// drift of clocks that NTP slews (at most 500 ppm: 4 ms in 8 s, in the
// worst case; typically microseconds).
const clockSamples = 8

// ClockOffset estimates a peer's clock against this node's [Node.Clock]:
// at any instant the peer's clock reads Offset more, to within Error (half
// the round trip of the sample it comes from). A message the peer stamped
// with its clock at ts and this node received at now took now - ts + Offset
// (plus or minus Error) to arrive.
type ClockOffset struct {
	Offset time.Duration `json:"offset_ns"`
	Error  time.Duration `json:"error_ns"`
	// Samples counts the round trips measured on the connection (or the
	// peer's best connection).
	Samples uint64 `json:"samples"`
}

type clockSample struct{ offset, rtt int64 }

// clockEstimator is a connection's offset estimate. add runs on the loop;
// best is read anywhere.
type clockEstimator struct {
	ring [clockSamples]clockSample
	n    uint64
	best atomic.Pointer[ClockOffset]
}

// add takes a round trip: the PING queued at t1 and its PONG read at t4 of
// this node's clock, the peer's clock reading remote in between.
func (e *clockEstimator) add(t1, t4, remote int64) {
	rtt := t4 - t1
	if rtt < 0 {
		return // a token from the future: not a PING of ours
	}
	e.ring[e.n%clockSamples] = clockSample{offset: remote - (t1 + rtt/2), rtt: rtt}
	e.n++
	b := e.ring[0]
	for _, s := range e.ring[1:min(e.n, clockSamples)] {
		if s.rtt < b.rtt {
			b = s
		}
	}
	e.best.Store(&ClockOffset{Offset: time.Duration(b.offset), Error: time.Duration(b.rtt / 2), Samples: e.n})
}

// estimate returns the current estimate, or nil before the first sample.
func (e *clockEstimator) estimate() *ClockOffset { return e.best.Load() }

// Clock returns the node's clock in nanoseconds since the Unix epoch: the
// wall clock read when the node started, advanced by the monotonic clock
// (so it never jumps when the wall clock is stepped), plus
// [WithClockOffset]. PONGs carry it, and peers' offsets ([ClockOffset]) are
// against it. Safe for concurrent use.
func (n *Node) Clock() int64 { return n.clockAt(n.now()) }

// clockAt converts t of n.now's scale to n.Clock's.
func (n *Node) clockAt(t int64) int64 { return n.wallStart + t + int64(n.o.clockOffset) }

// ClockOffset returns the estimate of the peer's clock from its connection
// with the tightest bound, and false before any round trip was measured.
// Safe for concurrent use.
func (p *Peer) ClockOffset() (ClockOffset, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *ClockOffset
	for _, c := range p.mu.conns {
		if c != nil {
			best = tighter(best, c)
		}
	}
	return found(best)
}

// ClockOffset returns the estimate of the clock of the node with id nodeID
// from the connection to or from it with the tightest bound, and false when
// no connection with it has measured a round trip. A receiving node uses it
// to correct the timestamps of messages its sender stamped. Safe for
// concurrent use.
func (n *Node) ClockOffset(nodeID uint64) (ClockOffset, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var best *ClockOffset
	for c := range n.mu.conns {
		if c.remoteID.Load() == nodeID && c.state.Load() == stOpen {
			best = tighter(best, c)
		}
	}
	return found(best)
}

// tighter returns whichever of best and c's estimate has the smaller error
// bound; best when c has none.
func tighter(best *ClockOffset, c *conn) *ClockOffset {
	if e := c.clock.estimate(); e != nil && (best == nil || e.Error < best.Error) {
		return e
	}
	return best
}

func found(best *ClockOffset) (ClockOffset, bool) {
	if best == nil {
		return ClockOffset{}, false
	}
	return *best, true
}
