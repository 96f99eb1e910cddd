package transport

import (
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// Stats is a snapshot of a node's counters. Connection counters include
// the connections already closed in Closed.
type Stats struct {
	Conns   []ConnStats  `json:"conns"`
	Closed  ConnStats    `json:"closed"` // sums over closed connections
	Peers   []PeerStats  `json:"peers,omitempty"`
	Faults  FaultStats   `json:"faults"`
	Refused RefusedStats `json:"refused"`
	Alerts  AlertStats   `json:"alerts"`
}

// RefusedStats counts connections the node refused or dropped before they
// carried data, by cause; cumulative since the node started.
type RefusedStats struct {
	AuthFailed        uint64 `json:"auth_failed"`        // wrong or missing key, either side's verdict
	HandshakeTimeouts uint64 `json:"handshake_timeouts"` // preface, authentication or TLS not done in time
	ConnLimit         uint64 `json:"conn_limit"`         // over the connections-per-address limit
	ProtocolErrors    uint64 `json:"protocol_errors"`    // malformed or unexpected frames, any time
	Limits            uint64 `json:"limits"`             // a frame, channel, inbound-budget or not-reading limit, any time
}

type securityCounters struct {
	authFailed, handshakeTimeouts, connLimit, protocol, limits atomic.Uint64
}

func (s *securityCounters) snapshot() RefusedStats {
	return RefusedStats{
		AuthFailed:        s.authFailed.Load(),
		HandshakeTimeouts: s.handshakeTimeouts.Load(),
		ConnLimit:         s.connLimit.Load(),
		ProtocolErrors:    s.protocol.Load(),
		Limits:            s.limits.Load(),
	}
}

// countClose counts why a connection closed, for [RefusedStats].
func (n *Node) countClose(err error) {
	var fe *wire.FrameError
	switch {
	case errors.Is(err, ErrAuthFailed):
		n.sec.authFailed.Add(1)
	case errors.Is(err, ErrInboundBudget) || errors.Is(err, ErrPeerNotReading) || errors.Is(err, taskid.ErrTooManyChannels) || errors.Is(err, wire.ErrFrameTooLarge):
		n.sec.limits.Add(1)
	case errors.As(err, &fe) || errors.Is(err, wire.ErrBadMagic) || errors.Is(err, wire.ErrVersion) ||
		errors.Is(err, wire.ErrReserved) || errors.Is(err, wire.ErrUnknownChannel) || errors.Is(err, wire.ErrUnknownFrame) ||
		errors.Is(err, taskid.ErrChannelInUse) || errors.Is(err, taskid.ErrChannelNumber) || errors.Is(err, ErrHandshake):
		n.sec.protocol.Add(1)
	}
}

// ConnStats counts one connection's traffic.
type ConnStats struct {
	Remote      string `json:"remote,omitempty"`
	NodeID      string `json:"node_id,omitempty"`
	Dialed      bool   `json:"dialed"`
	MessagesOut uint64 `json:"messages_out"`
	WireOut     uint64 `json:"wire_bytes_out"`
	Batches     uint64 `json:"batches"`
	// DataFrames and CtrlFrames count the frames written of the kinds
	// injected faults drop or duplicate: DATA, and ACKREQUEST, ACK, PING
	// and PONG. Counted whether or not faults are injected, they say how
	// many chances [Faults] had.
	DataFrames uint64 `json:"data_frames"`
	CtrlFrames uint64 `json:"ctrl_frames"`
	// DirectWrites counts the batches a sender wrote to the socket itself
	// because the connection was idle (no loop wake-up); Carried, those of
	// them the kernel took only in part, the rest going out from the loop.
	DirectWrites uint64 `json:"direct_writes"`
	Carried      uint64 `json:"carried"`
	// LoopBusy is the share of the last millisecond that the gnet event
	// loop running the connection spent in its callbacks, for all the
	// connections it runs (the process's nodes share their loops): near 1,
	// what the loop is asked to do waits for it. 0 on the net backend and
	// in sums.
	LoopBusy   float64 `json:"loop_busy,omitempty"`
	MessagesIn uint64  `json:"messages_in"`
	BytesIn    uint64  `json:"payload_bytes_in"`
	WireIn     uint64  `json:"wire_bytes_in"`
	// Flushes counts batches by why they were cut: idle, full, linger,
	// write-done, explicit.
	Flushes    map[string]uint64 `json:"flushes"`
	Stale      uint64            `json:"stale_dropped"`
	Duplicates uint64            `json:"duplicates_dropped"`
	Gaps       uint64            `json:"gap_dropped"`
	// Clock is the connection's estimate of the remote node's clock, nil
	// before its first round trip (and in sums).
	Clock *ClockOffset `json:"clock,omitempty"`
}

func (s *ConnStats) add(o ConnStats) {
	s.MessagesOut += o.MessagesOut
	s.WireOut += o.WireOut
	s.Batches += o.Batches
	s.DataFrames += o.DataFrames
	s.CtrlFrames += o.CtrlFrames
	s.DirectWrites += o.DirectWrites
	s.Carried += o.Carried
	s.MessagesIn += o.MessagesIn
	s.BytesIn += o.BytesIn
	s.WireIn += o.WireIn
	s.Stale += o.Stale
	s.Duplicates += o.Duplicates
	s.Gaps += o.Gaps
	for k, v := range o.Flushes {
		if s.Flushes == nil {
			s.Flushes = make(map[string]uint64)
		}
		s.Flushes[k] += v
	}
}

func (c *conn) snapshot() ConnStats {
	s := ConnStats{
		Remote:       c.remote,
		NodeID:       fmt.Sprintf("%x", c.remoteID.Load()),
		Dialed:       c.peer != nil,
		MessagesOut:  c.stats.msgsOut.Load(),
		WireOut:      c.stats.wireOut.Load(),
		Batches:      c.stats.batches.Load(),
		DataFrames:   c.stats.dataFrames.Load(),
		CtrlFrames:   c.stats.ctrlFrames.Load(),
		DirectWrites: c.stats.direct.Load(),
		Carried:      c.stats.carried.Load(),
		LoopBusy:     c.load.Load().current(loadNow()),
		MessagesIn:   c.stats.msgsIn.Load(),
		BytesIn:      c.stats.bytesIn.Load(),
		WireIn:       c.stats.wireIn.Load(),
		Stale:        c.stats.stale.Load(),
		Duplicates:   c.stats.dupIn.Load(),
		Gaps:         c.stats.gapIn.Load(),
		Flushes:      make(map[string]uint64, batch.NumCauses),
		Clock:        c.clock.estimate(),
	}
	for i := range c.stats.flushes {
		if v := c.stats.flushes[i].Load(); v > 0 {
			s.Flushes[batch.Cause(i).String()] = v
		}
	}
	return s
}

// ChannelStats counts one outgoing channel.
type ChannelStats struct {
	Channel taskid.Channel `json:"-"`
	Name    string         `json:"channel"`
	Peer    string         `json:"peer"` // the address of the peer it sends to
	Sent    uint64         `json:"sent"`
	Bytes   uint64         `json:"bytes"`
	Resent  uint64         `json:"resent"`
	// Blocked is the time Send and SendRun spent waiting for credit on
	// this channel, summed over the goroutines that waited.
	Blocked time.Duration `json:"blocked_ns"`
	Unacked int           `json:"unacked"`
	// Unsent is how many of the Unacked messages wait to be written.
	Unsent int `json:"unsent"`
	// UnackedBytes is the payload of the unacknowledged messages;
	// WindowBytes the memory the channel's window takes to hold them.
	UnackedBytes int                     `json:"unacked_bytes"`
	WindowBytes  int                     `json:"window_bytes"`
	Tracker      lossdetect.TrackerStats `json:"tracker"`
	Attached     bool                    `json:"attached"`
	// Stalled says the health check finds the channel stalled (see
	// [WithStallAlert]).
	Stalled bool `json:"stalled"`
}

// Stats returns the node's counters. Safe for concurrent use.
func (n *Node) Stats() Stats {
	var s Stats
	n.mu.Lock()
	conns := make([]*conn, 0, len(n.mu.conns))
	for c := range n.mu.conns {
		conns = append(conns, c)
	}
	s.Closed.add(n.mu.gone)
	n.mu.Unlock()
	if hook := testHookStatsListed.Load(); hook != nil {
		(*hook)()
	}
	for _, c := range conns {
		s.Conns = append(s.Conns, c.snapshot())
	}
	s.Faults = n.faultN.snapshot()
	s.Faults.PartitionTime = n.faultSched.partitionTime(n.o.faults, n.now())
	s.Refused = n.sec.snapshot()
	s.Alerts = n.health.snapshot()
	for _, p := range n.peers() {
		s.Peers = append(s.Peers, p.stats())
	}
	return s
}

// ChannelStats returns the counters of every open outgoing channel, to all
// peers; it takes each channel's lock in turn. Safe for concurrent use.
func (n *Node) ChannelStats() []ChannelStats {
	var cs []ChannelStats
	for _, p := range n.peers() {
		p.mu.Lock()
		for _, ch := range p.mu.channels {
			cs = append(cs, ch.stats())
		}
		p.mu.Unlock()
	}
	return cs
}

// PeerStats is the state of one peer this node sends to.
type PeerStats struct {
	Addr     string `json:"addr"`
	Channels int    `json:"channels"` // open channels
	// WindowBytes is the memory the channels' windows take (payloads
	// retained and the room their rings have grown for), which
	// [WithPeerBudget] bounds; IdleBytes is the part held by windows that
	// are empty and over their share, which a sender short of budget takes
	// back.
	WindowBytes int64 `json:"window_bytes"`
	IdleBytes   int64 `json:"idle_bytes"`
	Budget      int   `json:"budget"`
	// Blocked is the time senders spent waiting for credit from this peer
	// (its channels' windows or the budget), summed over the goroutines
	// that waited: Send, SendRun and [Peer.WaitCredit]. Its rate is the
	// back-pressure the peer exerts, in seconds per second.
	Blocked time.Duration `json:"blocked_ns"`
	// Resent counts the messages re-sent after a loss was detected.
	Resent uint64 `json:"resent"`
	// Up is how many of the peer's connections are up; Connects counts the
	// connections that completed their handshake, Reconnects those of them
	// that replaced one that broke, DialFailures the attempts that failed
	// before a connection was made.
	Up           int    `json:"up"`
	Connects     uint64 `json:"connects"`
	Reconnects   uint64 `json:"reconnects"`
	DialFailures uint64 `json:"dial_failures"`
	// Traffic sums the counters of the peer's connections, open and
	// closed.
	Traffic ConnStats `json:"traffic"`
	// Clock estimates the peer's clock against this node's, from the
	// connection with the tightest bound; nil before the first round trip.
	Clock *ClockOffset `json:"clock,omitempty"`
	// SlowConsumer says the health check finds the peer a slow consumer
	// (see [WithSlowConsumerAlert]).
	SlowConsumer bool `json:"slow_consumer"`
}

func (p *Peer) stats() PeerStats {
	s := PeerStats{
		Addr:         p.addr,
		Channels:     int(p.nchannels.Load()),
		WindowBytes:  p.charged.Load(),
		IdleBytes:    p.idle.Load(),
		Budget:       p.node.o.peerBudget,
		Blocked:      time.Duration(p.blocked.Load()),
		Resent:       p.resent.Load(),
		Connects:     p.connects.Load(),
		Reconnects:   p.reconnects.Load(),
		DialFailures: p.dialFailures.Load(),
		SlowConsumer: p.slow.Load(),
	}
	p.mu.Lock()
	s.Traffic = p.mu.gone
	s.Traffic.Flushes = maps.Clone(p.mu.gone.Flushes)
	for _, c := range p.mu.conns {
		if c != nil {
			s.Up++
			s.Traffic.add(c.snapshot())
		}
	}
	p.mu.Unlock()
	s.Traffic.Remote, s.Traffic.Dialed = p.addr, true
	if c, ok := p.ClockOffset(); ok {
		s.Clock = &c
	}
	return s
}

// testHookStatsListed, set only by tests, runs in Stats between listing
// the open connections and reading their counters.
var testHookStatsListed atomic.Pointer[func()]

// Totals sums the counters of all connections, open and closed.
func (s Stats) Totals() ConnStats {
	t := s.Closed
	for _, c := range s.Conns {
		t.add(c)
	}
	return t
}

func (ch *channel) stats() ChannelStats {
	ch.mu.Lock()
	f := ch.mu.src.Stats()
	attached := ch.mu.conn != nil
	stalled := ch.mu.stalledSince != 0
	ch.mu.Unlock()
	return ChannelStats{
		Channel:      ch.key,
		Name:         ch.key.String(),
		Peer:         ch.peer.addr,
		Blocked:      time.Duration(ch.blocked.Load()),
		Sent:         f.Sent,
		Bytes:        f.Bytes,
		Resent:       f.Resent,
		Unacked:      f.Unacked,
		Unsent:       f.Unsent,
		UnackedBytes: f.UnackedBytes,
		WindowBytes:  f.WindowBytes,
		Tracker:      f.Tracker,
		Attached:     attached,
		Stalled:      stalled,
	}
}

// Stats returns the counters of this sender's channel.
func (s *Sender) Stats() ChannelStats { return s.ch.stats() }

// count adds a write's or a read callback's counts to c: through live, to
// c's counters while c is open; else late's, to the closed totals. Another
// goroutine may close c while this one writes or reads (Node.abort, a
// handshake or idle timeout, a housekeeping reset), summing c's counters
// into its peer's and its node's closed totals (Peer.detach, Node.forget):
// counts added to c after that would be in no total, and a Stats that had
// read c live with them, and then the totals without them, would see its
// counters go back. So the counts go in under c.mu, whose closed the close
// sets before it sums: before it, to c's counters, which the sums then
// take; after it, to the closed totals themselves.
func (c *conn) count(live func(*connCounters), late func() ConnStats) {
	c.mu.Lock()
	open := !c.mu.closed
	if open {
		live(&c.stats)
	}
	c.mu.Unlock()
	if open {
		return
	}
	st := late()
	if c.peer != nil {
		c.peer.mu.Lock()
		c.peer.mu.gone.add(st)
		c.peer.mu.Unlock()
	}
	n := c.node
	n.mu.Lock()
	n.mu.gone.add(st)
	n.mu.Unlock()
}
