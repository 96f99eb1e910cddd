// The node's health check, run by its timer goroutine, warns in the log
// about what an operator should look at, like NATS's slow consumers and
// Gearpump's health check:
//
//   - A channel stalls when its clock has not advanced for the stall alert's
//     time while it has messages unacknowledged. A channel's clock, in the
//     transport, is its acknowledged progress: the sequence number up to
//     which its target has acknowledged, which advances as the target task
//     consumes (a receiver acknowledges what its task has consumed). The
//     transport carries timestamps without reading them; the engine's clocks
//     are built from them.
//   - A peer is a slow consumer when, over one slow-consumer interval,
//     senders were waiting for its credit (Send, SendRun or WaitCredit found
//     no room in a window or the peer budget) for more than half of the
//     time; it recovers after an interval in which they waited less than a
//     quarter of it. The gap between the two keeps a peer at the edge from
//     flapping.
//
// Each alert writes one line when it starts (a warning) and one when it
// clears, never one per check, and is counted in [Stats].Alerts. A
// channel's alert clears as the channel closes (channel.shutLocked), and a
// peer's as the peer closes (Peer.close), under the lock that marks it
// closed; the check raises one only under that lock, for a channel or peer
// still open. So no closed channel is counted stalled and no closed peer
// slow, not even once the node's shutdown has stopped the check.

package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [WithStallAlert] and [WithSlowConsumerAlert].
const (
	DefaultStallAlert        = 10 * time.Second
	DefaultSlowConsumerAlert = 5 * time.Second
)

// AlertStats counts the node's alerts.
type AlertStats struct {
	// ChannelStalls counts the times a channel began to stall; Stalled is
	// how many stall now.
	ChannelStalls uint64 `json:"channel_stalls"`
	Stalled       int    `json:"stalled_channels"`
	// SlowConsumers counts the times a peer became a slow consumer; Slow is
	// how many are now.
	SlowConsumers uint64 `json:"slow_consumers"`
	Slow          int    `json:"slow_peers"`
}

// health is the state of the node's health check: the timer goroutine's
// alone, but for the counters.
type health struct {
	next int64 // when to check next

	stalls, slows atomic.Uint64
	nStalled      atomic.Int64
	nSlow         atomic.Int64
}

// checkEvery is how often the health check looks: a tenth of the shorter
// alert time, within [10 ms, 1 s], so that an alert starts at most a tenth
// late, and 10,000 channels are not visited every few milliseconds.
func (n *Node) checkEvery() time.Duration {
	d := time.Duration(0)
	for _, a := range []time.Duration{n.o.stallAlert, n.o.slowAlert} {
		if a > 0 && (d == 0 || a < d) {
			d = a
		}
	}
	return min(max(d/10, 10*time.Millisecond), time.Second)
}

// checkHealth runs the health check of peers, the node's, if it is due.
// Timer goroutine only.
func (n *Node) checkHealth(now int64, peers []*Peer) {
	h := &n.health
	if (n.o.stallAlert <= 0 && n.o.slowAlert <= 0) || now < h.next {
		return
	}
	h.next = now + int64(n.checkEvery())
	// Channels and peers clear their alerts as they close (channel.shutLocked,
	// Peer.close).
	for _, p := range peers {
		if n.o.slowAlert > 0 {
			n.checkSlow(p, now)
		}
		if n.o.stallAlert <= 0 {
			continue
		}
		for _, ch := range p.channelList() {
			n.checkStall(ch, now)
		}
	}
}

// checkStall looks whether ch's acknowledged progress moved. Timer
// goroutine only.
func (n *Node) checkStall(ch *channel, now int64) {
	ch.mu.Lock()
	acked, next := ch.mu.src.Progress()
	closed, stalled := ch.mu.closed, ch.mu.stalledSince != 0
	ch.mu.Unlock()
	hs := &ch.health
	if closed {
		return // its close cleared the alert, if it was on
	}
	moved := acked != hs.acked || acked == next
	if moved {
		hs.acked, hs.since = acked, now
	} else if hs.since == 0 {
		hs.since = now
	}
	raises := !moved && !stalled && now-hs.since >= int64(n.o.stallAlert)
	if !raises && !(moved && stalled) {
		return
	}
	if raises {
		if hook := testHookStallJudged.Load(); hook != nil {
			(*hook)(ch)
		}
	}
	// The alert changes under ch.mu, against the channel's close: a
	// channel closed meanwhile (this check holds a list of the peer's
	// channels taken before) raises nothing, and its close cleared the
	// alert it had. The lines are written under it too, so that a
	// channel's lines come in order.
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.mu.closed {
		return
	}
	if !raises {
		n.clearStallLocked(ch, now, "its target acknowledges again")
		return
	}
	// The line first, then the state: whoever sees the state sees the line.
	n.log.Warn("sluice: channel stalled: its target has acknowledged nothing for a while and messages wait",
		"channel", ch.key.String(), "peer", ch.peer.addr, "for", time.Duration(now-hs.since).Round(time.Millisecond),
		"unacked", next-acked, "acked_seq", acked)
	ch.mu.stalledSince = hs.since
	n.health.stalls.Add(1)
	n.health.nStalled.Add(1)
}

// clearStallLocked clears ch's stall alert, which is on, with a line that
// says why. The caller holds ch.mu: the check, or the channel's close.
func (n *Node) clearStallLocked(ch *channel, now int64, why string) {
	n.log.Info("sluice: channel stall cleared: "+why, "channel", ch.key.String(), "peer", ch.peer.addr,
		"after", time.Duration(now-ch.mu.stalledSince).Round(time.Millisecond))
	ch.mu.stalledSince = 0
	n.health.nStalled.Add(-1)
}

// testHookStallJudged, set only by tests, runs in checkStall once it found
// ch's acknowledged progress still for the stall alert's time, before the
// alert is raised.
var testHookStallJudged atomic.Pointer[func(ch *channel)]

// checkSlow ends p's slow-consumer interval if it is over. Timer goroutine
// only.
func (n *Node) checkSlow(p *Peer, now int64) {
	hs := &p.health
	waited := p.credit.waitedBy(now)
	if hs.start == 0 {
		hs.start, hs.waited = now, waited
		return
	}
	span := now - hs.start
	if span < int64(n.o.slowAlert) {
		return
	}
	share := float64(waited-hs.waited) / float64(span)
	hs.start, hs.waited = now, waited
	if hook := testHookSlowJudged.Load(); hook != nil {
		(*hook)(p, share)
	}
	slow := p.slow.Load()
	raises, clears := !slow && share > 0.5, slow && share < 0.25
	if !raises && !clears {
		return
	}
	// The alert changes under p.mu, against the peer's close: a peer
	// closed meanwhile (the node lists it until Peer.Close forgets it, and
	// during its shutdown; and this check may hold an older list) raises
	// nothing, and its close cleared the alert it had. The lines are
	// written under it too, so that a peer's lines come in order.
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return
	}
	waitedArgs := []any{"peer", p.addr, "waited", fmt.Sprintf("%.0f%%", 100*share), "of", time.Duration(span).Round(time.Millisecond)}
	if clears {
		n.clearSlowLocked(p, "senders wait for the peer's credit little again", waitedArgs...)
		return
	}
	// The line first, then the state: whoever sees the state sees the line.
	n.log.Warn("sluice: slow consumer: senders waited for the peer's credit most of the time", waitedArgs...)
	p.slow.Store(true)
	n.health.slows.Add(1)
	n.health.nSlow.Add(1)
}

// clearSlowLocked clears p's slow-consumer alert, which is on, with a line
// that says why and args (which begin with the peer). The caller holds
// p.mu: the check, or the peer's close.
func (n *Node) clearSlowLocked(p *Peer, why string, args ...any) {
	n.log.Info("sluice: slow consumer cleared: "+why, args...)
	p.slow.Store(false)
	n.health.nSlow.Add(-1)
}

// testHookSlowJudged, set only by tests, runs in checkSlow once an
// interval of p's ended, with the share of it its senders waited, before
// the alert changes.
var testHookSlowJudged atomic.Pointer[func(p *Peer, share float64)]

func (h *health) snapshot() AlertStats {
	return AlertStats{
		ChannelStalls: h.stalls.Load(), Stalled: int(h.nStalled.Load()),
		SlowConsumers: h.slows.Load(), Slow: int(h.nSlow.Load()),
	}
}

// chanHealth is a channel's health-check state; timer goroutine only.
type chanHealth struct {
	acked uint64 // acknowledged progress when last seen to move
	since int64  // when it was last seen to move
}

// peerHealth is a peer's slow-consumer interval; timer goroutine only.
type peerHealth struct {
	start  int64 // when the interval began
	waited int64 // creditWaits.waitedBy then
}

// creditWaits measures how long at least one sender was waiting for a
// peer's credit: the time in which the count of waiting senders was above
// zero, those in progress included.
type creditWaits struct {
	mu      sync.Mutex
	waiters int
	since   int64 // when waiters last became non-zero
	total   int64 // ns with waiters > 0, up to since
}

func (w *creditWaits) begin(now int64) {
	w.mu.Lock()
	if w.waiters == 0 {
		w.since = now
	}
	w.waiters++
	w.mu.Unlock()
}

func (w *creditWaits) end(now int64) {
	w.mu.Lock()
	if w.waiters--; w.waiters == 0 {
		w.total += now - w.since
	}
	w.mu.Unlock()
}

// waitedBy returns the time senders were waiting up to now.
func (w *creditWaits) waitedBy(now int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters > 0 {
		return w.total + now - w.since
	}
	return w.total
}
