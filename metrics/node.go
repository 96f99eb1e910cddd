package metrics

import (
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// NodeOptions chooses what NodeCollector exports beyond the node's and its
// peers' counters.
type NodeOptions struct {
	// Channels adds a series per outgoing channel (sent, re-sent,
	// unacknowledged, blocked time, RTT, stalled): eight per channel, which with
	// thousands of channels is more than most Prometheus servers should
	// keep. The per-peer sums are exported either way.
	Channels bool
	// Name, when set, labels every sample node="Name", so that several
	// nodes can be served by one handler.
	Name string
}

// NodeCollector collects n's counters at each scrape: node totals, every
// peer's traffic, back-pressure and window depth, and with o.Channels
// every outgoing channel. A scrape locks each channel once.
func NodeCollector(n *transport.Node, o NodeOptions) Collector {
	return CollectorFunc(func(s *Set) {
		if o.Name != "" {
			s = s.With("node", o.Name)
		}
		collectNode(s, n.Stats(), n.ChannelStats(), o)
	})
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func collectNode(s *Set, st transport.Stats, chans []transport.ChannelStats, o NodeOptions) {
	tot := st.Totals()
	s.Counter("sluice_messages_sent_total", "Messages written to connections, re-sent ones included.", float64(tot.MessagesOut))
	s.Counter("sluice_wire_bytes_sent_total", "Bytes written to connections, framing and control frames included.", float64(tot.WireOut))
	s.Counter("sluice_messages_received_total", "Messages read from connections, duplicates and stale ones included.", float64(tot.MessagesIn))
	s.Counter("sluice_payload_bytes_received_total", "Payload bytes of the messages delivered to target tasks' inboxes.", float64(tot.BytesIn))
	s.Counter("sluice_wire_bytes_received_total", "Bytes read from connections in whole frames.", float64(tot.WireIn))
	s.Counter("sluice_batches_total", "DATA batches written.", float64(tot.Batches))
	for _, cause := range sortedKeys(tot.Flushes) {
		s.Counter("sluice_flushes_total", "Batches by why they were cut.", float64(tot.Flushes[cause]), "cause", cause)
	}
	const dropHelp = "Received messages dropped, by cause: of an older epoch (stale), seen before (duplicate), after a gap (gap)."
	s.Counter("sluice_dropped_messages_total", dropHelp, float64(tot.Stale), "cause", "stale")
	s.Counter("sluice_dropped_messages_total", dropHelp, float64(tot.Duplicates), "cause", "duplicate")
	s.Counter("sluice_dropped_messages_total", dropHelp, float64(tot.Gaps), "cause", "gap")
	const faultHelp = "Faults this node injected into its outgoing traffic, by kind."
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.DataDropped), "kind", "drop")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.CtrlDropped), "kind", "ctrldrop")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.Duplicated), "kind", "dup")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.Resets), "kind", "reset")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.GEDropped), "kind", "ge_drop")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.Delayed), "kind", "delayed")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.PartitionHeld), "kind", "partition_held")
	s.Counter("sluice_faults_injected_total", faultHelp, float64(st.Faults.PartitionReads), "kind", "partition_read")
	s.Counter("sluice_fault_throttled_bytes_total", "Bytes the injected bandwidth cap held back.", float64(st.Faults.Throttled))
	s.Gauge("sluice_fault_partition_seconds", "How much of the injected partition has passed.", st.Faults.PartitionTime.Seconds())
	s.Gauge("sluice_fault_held_max_bytes", "The most bytes one connection's fault link held at once (delayed, throttled or partitioned).", float64(st.Faults.HeldMax))
	const alertHelp = "Alerts the node raised in its log, by kind: a channel whose acknowledged progress stood still with messages waiting (channel_stall), a peer whose senders waited for its credit most of the time (slow_consumer)."
	s.Counter("sluice_alerts_total", alertHelp, float64(st.Alerts.ChannelStalls), "kind", "channel_stall")
	s.Counter("sluice_alerts_total", alertHelp, float64(st.Alerts.SlowConsumers), "kind", "slow_consumer")
	const activeHelp = "Alerts in effect now: stalled channels, slow-consumer peers."
	s.Gauge("sluice_alerts_active", activeHelp, float64(st.Alerts.Stalled), "kind", "channel_stall")
	s.Gauge("sluice_alerts_active", activeHelp, float64(st.Alerts.Slow), "kind", "slow_consumer")
	const refusedHelp = "Connections refused or closed for a fault of the peer's, by cause."
	s.Counter("sluice_refused_connections_total", refusedHelp, float64(st.Refused.AuthFailed), "cause", "auth_failed")
	s.Counter("sluice_refused_connections_total", refusedHelp, float64(st.Refused.HandshakeTimeouts), "cause", "handshake_timeout")
	s.Counter("sluice_refused_connections_total", refusedHelp, float64(st.Refused.ConnLimit), "cause", "conn_limit")
	s.Counter("sluice_refused_connections_total", refusedHelp, float64(st.Refused.ProtocolErrors), "cause", "protocol_error")
	s.Counter("sluice_refused_connections_total", refusedHelp, float64(st.Refused.Limits), "cause", "limit")
	var dialed, accepted int
	for _, c := range st.Conns {
		if c.Dialed {
			dialed++
		} else {
			accepted++
		}
	}
	s.Gauge("sluice_connections", "Open connections, by who dialed.", float64(dialed), "dir", "dialed")
	s.Gauge("sluice_connections", "Open connections, by who dialed.", float64(accepted), "dir", "accepted")
	var busy float64
	for _, c := range st.Conns {
		busy = max(busy, c.LoopBusy)
	}
	s.Gauge("sluice_event_loop_busy_ratio", "The share of the last millisecond that the busiest gnet event loop running this node's connections spent in callbacks, for all the connections it runs (a process's nodes share their loops): near 1, what the loop is asked to do waits for it. 0 on the net backend.", busy)
	for _, c := range st.Conns {
		if c.Dialed || c.Clock == nil {
			continue // a dialed connection's clock is its peer's
		}
		l := []string{"remote_node", c.NodeID, "remote", c.Remote}
		s.Gauge("sluice_accepted_clock_offset_seconds", "How far the clock of a node that connected to this one is ahead of this node's, estimated from PING round trips.", seconds(c.Clock.Offset), l...)
		s.Gauge("sluice_accepted_clock_error_seconds", "The bound of sluice_accepted_clock_offset_seconds: half the round trip it comes from.", seconds(c.Clock.Error), l...)
	}

	type depth struct {
		unacked, unsent, unackedBytes int
		rttSum                        time.Duration
		rttN                          int
	}
	perPeer := map[string]*depth{}
	for _, c := range chans {
		d := perPeer[c.Peer]
		if d == nil {
			d = &depth{}
			perPeer[c.Peer] = d
		}
		d.unacked += c.Unacked
		d.unsent += c.Unsent
		d.unackedBytes += c.UnackedBytes
		if c.Tracker.RTTSamples > 0 {
			d.rttSum += c.Tracker.SRTT
			d.rttN++
		}
	}
	peers := slices.Clone(st.Peers)
	slices.SortFunc(peers, func(a, b transport.PeerStats) int { return strings.Compare(a.Addr, b.Addr) })
	for _, p := range peers {
		l := []string{"peer", p.Addr}
		t := p.Traffic
		s.Counter("sluice_peer_messages_sent_total", "Messages written to the peer, re-sent ones included.", float64(t.MessagesOut), l...)
		s.Counter("sluice_peer_wire_bytes_sent_total", "Bytes written to the peer.", float64(t.WireOut), l...)
		s.Counter("sluice_peer_batches_total", "DATA batches written to the peer.", float64(t.Batches), l...)
		for _, cause := range sortedKeys(t.Flushes) {
			s.Counter("sluice_peer_flushes_total", "Batches written to the peer by why they were cut.", float64(t.Flushes[cause]), "peer", p.Addr, "cause", cause)
		}
		s.Counter("sluice_peer_resent_messages_total", "Messages re-sent to the peer after a loss was detected.", float64(p.Resent), l...)
		s.Counter("sluice_peer_blocked_seconds_total", "Time senders spent waiting for the peer's credit, summed over senders; its rate is the back-pressure in seconds per second.", seconds(p.Blocked), l...)
		s.Counter("sluice_peer_connects_total", "Connections to the peer that completed their handshake.", float64(p.Connects), l...)
		s.Counter("sluice_peer_reconnects_total", "Connections to the peer that replaced one that broke.", float64(p.Reconnects), l...)
		s.Counter("sluice_peer_dial_failures_total", "Connection attempts to the peer that failed.", float64(p.DialFailures), l...)
		s.Gauge("sluice_peer_up", "Connections to the peer that are up.", float64(p.Up), l...)
		s.Gauge("sluice_peer_slow_consumer", "1 while the node's health check finds the peer a slow consumer.", b2f(p.SlowConsumer), l...)
		s.Gauge("sluice_peer_channels", "Open channels to the peer.", float64(p.Channels), l...)
		s.Gauge("sluice_peer_window_bytes", "Memory the windows of the peer's channels take.", float64(p.WindowBytes), l...)
		s.Gauge("sluice_peer_budget_bytes", "The bound of sluice_peer_window_bytes.", float64(p.Budget), l...)
		d := perPeer[p.Addr]
		if d == nil {
			d = &depth{}
		}
		s.Gauge("sluice_peer_unacked_messages", "Messages sent or queued to the peer and not yet acknowledged.", float64(d.unacked), l...)
		s.Gauge("sluice_peer_unsent_messages", "Of the unacknowledged messages, those not yet written.", float64(d.unsent), l...)
		s.Gauge("sluice_peer_unacked_bytes", "Payload bytes of the unacknowledged messages.", float64(d.unackedBytes), l...)
		if c := p.Clock; c != nil {
			s.Gauge("sluice_peer_clock_offset_seconds", "How far the peer's clock is ahead of this node's, estimated from PING round trips.", seconds(c.Offset), l...)
			s.Gauge("sluice_peer_clock_error_seconds", "The bound of sluice_peer_clock_offset_seconds: half the round trip it comes from.", seconds(c.Error), l...)
		}
		if d.rttN > 0 {
			s.Gauge("sluice_peer_rtt_seconds", "Smoothed AckRequest round trip, averaged over the peer's channels that measured one.", seconds(d.rttSum/time.Duration(d.rttN)), l...)
		}
	}
	if !o.Channels {
		return
	}
	for _, c := range chans {
		l := []string{"peer", c.Peer, "channel", c.Name}
		s.Counter("sluice_channel_sent_messages_total", "Messages sent on the channel.", float64(c.Sent), l...)
		s.Counter("sluice_channel_sent_bytes_total", "Payload bytes sent on the channel.", float64(c.Bytes), l...)
		s.Counter("sluice_channel_resent_messages_total", "Messages re-sent on the channel.", float64(c.Resent), l...)
		s.Counter("sluice_channel_blocked_seconds_total", "Time senders spent waiting for the channel's credit.", seconds(c.Blocked), l...)
		s.Gauge("sluice_channel_unacked_messages", "Messages not yet acknowledged.", float64(c.Unacked), l...)
		s.Gauge("sluice_channel_unsent_messages", "Messages not yet written.", float64(c.Unsent), l...)
		s.Gauge("sluice_channel_rtt_seconds", "Smoothed AckRequest round trip.", seconds(c.Tracker.SRTT), l...)
		s.Gauge("sluice_channel_stalled", "1 while the node's health check finds the channel stalled.", b2f(c.Stalled), l...)
	}
}

func sortedKeys(m map[string]uint64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
