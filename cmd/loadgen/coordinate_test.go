package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/transport"
)

func testCoordConfig(agents ...string) coordConfig {
	return coordConfig{
		agents:   agents,
		topology: topoFanIn,
		tc: transportConfig{
			size: 64, duration: time.Second, channels: 3, connections: 1,
		},
		messages:         4000,
		startDelay:       20 * time.Millisecond,
		heartbeatTimeout: 2 * time.Second,
		connectTimeout:   2 * time.Second,
	}
}

func TestCoordinateFanInMergesEverySendersFindings(t *testing.T) {
	rx, tx1, tx2 := startAgent(t), startAgent(t), startAgent(t)
	cfg := testCoordConfig(rx.addr, tx1.addr, tx2.addr)
	log := &syncBuffer{}
	report, rec, err := coordinate(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("coordinate: %v\n%s", err, log)
	}
	if report.Scenario != "transport-distributed" {
		t.Errorf("scenario %q", report.Scenario)
	}
	if report.MessagesSent != 8000 || report.MessagesDelivered != 8000 || report.Duplicates != 0 || report.Lost != 0 {
		t.Errorf("sent %d, delivered %d, duplicates %d, lost %d; want 8000 sent and delivered by two senders, none repeated or lost",
			report.MessagesSent, report.MessagesDelivered, report.Duplicates, report.Lost)
	}
	if report.ExactlyOnce == nil || !*report.ExactlyOnce {
		t.Errorf("exactly-once not confirmed: %s", report.ExactlyOnceStatement())
	}
	if n := rec.Count(); n != 8000 {
		t.Errorf("the merged histogram holds %d latencies, want one per message delivered (8000)", n)
	}
	if report.LatencyUS.P50 <= 0 || report.ThroughputMsgsPerS <= 0 || report.WireBytes < 8000*64 {
		t.Errorf("latency %+v, throughput %v, wire bytes %d: not filled from the merged findings",
			report.LatencyUS, report.ThroughputMsgsPerS, report.WireBytes)
	}
	// The agents share this process's clock: each sender's estimate of its
	// receiver's offset is 0 to within its bound, and the report says so.
	if c := report.Clock; c == nil || c.Method != "ping" || c.MinOffsetNS < -c.ErrorNS-1000 || c.MaxOffsetNS > c.ErrorNS+1000 || c.Samples < clockMinSamples {
		t.Errorf("clock correction %+v; want PING estimates of an offset of 0 within their bound", c)
	}
	if !strings.Contains(strings.Join(report.Notes, "\n"), "corrected for the clocks") {
		t.Errorf("the notes do not state the clock correction:\n%s", strings.Join(report.Notes, "\n"))
	}
	// The agents deliver and produce as the plan says, auto and their own
	// cores here, and the report says so, not the coordinator's cores.
	if d, p := report.Config["delivery"], report.Config["producers"]; d != "inline" || p != "half of each sending agent's cores" {
		t.Errorf("config says delivery %v, producers %v; want inline (auto without a consume rate) and each agent's default", d, p)
	}
	agents, _ := report.Config["agents"].([]map[string]any)
	if len(agents) != 3 {
		t.Fatalf("config lists %d agents, want 3: %v", len(agents), report.Config["agents"])
	}
	for i, want := range []string{"receiver", "sender 1", "sender 2"} {
		if agents[i]["role"] != want {
			t.Errorf("agent %d's role is %v, want %s", i, agents[i]["role"], want)
		}
	}
	notes := strings.Join(report.Notes, "\n")
	for _, a := range []string{rx.addr, tx1.addr, tx2.addr} {
		if !strings.Contains(notes, "agent "+a) {
			t.Errorf("the notes do not describe agent %s's machine:\n%s", a, notes)
		}
	}
	// Every agent ended its run and is free for the next coordinator.
	for _, a := range []*testAgent{rx, tx1, tx2} {
		a.log.waitFor(t, "finished")
	}
}

func TestCoordinateRingSendsBothWays(t *testing.T) {
	a, b := startAgent(t), startAgent(t)
	cfg := testCoordConfig(a.addr, b.addr)
	cfg.topology = topoRing
	cfg.tc.rate = 20000 // both senders together, 3000 messages each: about 0.3 s
	cfg.messages = 3000
	report, rec, err := coordinate(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if report.MessagesSent != 6000 || report.MessagesDelivered != 6000 || rec.Count() != 6000 {
		t.Errorf("sent %d, delivered %d, %d latencies; want 6000 of each, half from each agent",
			report.MessagesSent, report.MessagesDelivered, rec.Count())
	}
	notes := strings.Join(report.Notes, "\n")
	for _, pair := range []string{a.addr + " -> " + b.addr, b.addr + " -> " + a.addr} {
		if !strings.Contains(notes, pair+": 3000 sent, 3000 delivered") {
			t.Errorf("no note says %s delivered all 3000:\n%s", pair, notes)
		}
	}
}

// closedAddr is a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestCoordinateNamesTheUnreachableAgent(t *testing.T) {
	live, dead := startAgent(t), closedAddr(t)
	_, _, err := coordinate(context.Background(), testCoordConfig(live.addr, dead), io.Discard)
	if !errors.Is(err, errAgentUnreachable) {
		t.Fatalf("error %v, want errAgentUnreachable", err)
	}
	var ae *agentError
	if !errors.As(err, &ae) || ae.Agent != dead || ae.Role != "sender 1" {
		t.Fatalf("error %v does not name the unreachable agent %s as sender 1", err, dead)
	}
	if strings.Contains(err.Error(), live.addr) {
		t.Errorf("error %q blames the live agent too", err)
	}
}

func TestCoordinateFailsNamingAnAgentThatDiesMidRun(t *testing.T) {
	tests := []struct {
		name   string
		victim int // which agent dies: 0 receives, 1 sends
		role   string
	}{
		{"a sender that dies while sending is named", 1, "sender 1"},
		{"a receiver that dies while receiving is named", 0, "receiver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agents := []*testAgent{startAgent(t), startAgent(t)}
			cfg := testCoordConfig(agents[0].addr, agents[1].addr)
			cfg.messages, cfg.tc.rate = 0, 2000
			cfg.tc.duration = time.Minute // only a death ends it early
			errc := make(chan error, 1)
			go func() {
				_, _, err := coordinate(context.Background(), cfg, io.Discard)
				errc <- err
			}()
			agents[1].log.waitFor(t, "sending to")
			agents[tt.victim].close()
			err := <-errc
			var ae *agentError
			if !errors.Is(err, errAgentLost) || !errors.As(err, &ae) {
				t.Fatalf("error %v, want an agentError wrapping errAgentLost", err)
			}
			if ae.Agent != agents[tt.victim].addr || ae.Role != tt.role || ae.Phase != "running" {
				t.Errorf("error names agent %s (%s) while %s, want %s (%s) while running",
					ae.Agent, ae.Role, ae.Phase, agents[tt.victim].addr, tt.role)
			}
			// The survivor does not go on sending or receiving for nobody.
			agents[1-tt.victim].log.waitFor(t, "aborted: the coordinator went away")
		})
	}
}

func TestCoordinateFailsNamingASilentAgent(t *testing.T) {
	live := startAgent(t)
	// A listener that accepts and never answers is what a stopped (SIGSTOP)
	// or wedged agent process looks like from the network: the kernel
	// completes the handshake, nobody speaks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	cfg := testCoordConfig(live.addr, ln.Addr().String())
	cfg.heartbeatTimeout = 200 * time.Millisecond
	_, _, err = coordinate(context.Background(), cfg, io.Discard)
	var ae *agentError
	if !errors.Is(err, errAgentSilent) || !errors.As(err, &ae) || ae.Agent != ln.Addr().String() {
		t.Fatalf("error %v, want errAgentSilent naming %s", err, ln.Addr())
	}
	live.log.waitFor(t, "aborted: the coordinator went away")
}

func TestCoordinateReportsAnAgentsRefusal(t *testing.T) {
	a, b := startAgent(t), startAgent(t)
	busy := dialCtl(t, b.addr) // another coordinator holds b
	p := goodPlan()
	if err := busy.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	recvType(t, busy)
	_, _, err := coordinate(context.Background(), testCoordConfig(a.addr, b.addr), io.Discard)
	var ae *agentError
	if !errors.Is(err, errAgentFailed) || !errors.As(err, &ae) || ae.Agent != b.addr || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("error %v, want errAgentFailed naming %s as busy", err, b.addr)
	}
}

func TestCoordinateConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*coordConfig)
		wantErr string
	}{
		{"two agents and a sane plan are accepted", func(*coordConfig) {}, ""},
		{"one agent is refused", func(c *coordConfig) { c.agents = c.agents[:1] }, "at least two"},
		{"an agent listed twice is refused", func(c *coordConfig) { c.agents[1] = c.agents[0] }, "twice"},
		{"an agent without a port is refused", func(c *coordConfig) { c.agents[1] = "10.0.0.2" }, "10.0.0.2"},
		{"an unknown topology is refused", func(c *coordConfig) { c.topology = "star" }, "star"},
		{"faults are refused", func(c *coordConfig) { c.tc.faults = "drop=0.1" }, "--faults"},
		{"a negative message count is refused", func(c *coordConfig) { c.messages = -1 }, "--messages"},
		{"a payload too small is refused", func(c *coordConfig) { c.tc.size = 4 }, "--size 4"},
		{"no heartbeat timeout is refused", func(c *coordConfig) { c.heartbeatTimeout = 0 }, "--heartbeat-timeout"},
		{"as many channels as a receiving node takes from two senders are accepted", func(c *coordConfig) {
			c.agents = append(c.agents, "10.0.0.3:7500")
			c.tc.channels = (transport.DefaultMaxReceivers - 1) / 2
		}, ""},
		{"more channels into one receiver than its node takes are refused", func(c *coordConfig) {
			c.agents = append(c.agents, "10.0.0.3:7500")
			c.tc.channels = maxChannels
		}, "make 131070 channels into one receiving agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCoordConfig("10.0.0.1:7500", "10.0.0.2:7500")
			tt.change(&c)
			err := c.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestRoles(t *testing.T) {
	addrs := []string{"a:1", "b:1", "c:1"}
	tests := []struct {
		topology string
		sendTo   []int // -1: receives only
	}{
		{topoFanIn, []int{-1, 0, 0}},
		{topoRing, []int{1, 2, 0}},
	}
	for _, tt := range tests {
		rs := assignRoles(addrs, tt.topology)
		for i, r := range rs {
			got := -1
			for j, o := range rs {
				if r.sendTo == o {
					got = j
				}
			}
			if got != tt.sendTo[i] {
				t.Errorf("%s: agent %d sends to %d, want %d", tt.topology, i, got, tt.sendTo[i])
			}
		}
	}
}

func TestReachableDataAddr(t *testing.T) {
	tests := []struct{ data, ctl, want string }{
		{"10.0.0.1:7401", "10.0.0.1:7500", "10.0.0.1:7401"},
		{"0.0.0.0:7401", "10.0.0.1:7500", "10.0.0.1:7401"},
		{"[::]:7401", "10.0.0.1:7500", "10.0.0.1:7401"},
		{":7401", "host.example:7500", "host.example:7401"},
		{"host.example:7401", "10.0.0.1:7500", "host.example:7401"},
	}
	for _, tt := range tests {
		if got := reachableDataAddr(tt.data, tt.ctl); got != tt.want {
			t.Errorf("data %s reached via %s: got %s, want %s", tt.data, tt.ctl, got, tt.want)
		}
	}
}

// A transport run across agents interrupted mid-run (Ctrl-C, SIGTERM: its
// context ends) says so and fails with exit status 1, as an interrupted
// engine run does; it failed with a bare 'context canceled' (exit status 2).
// The agents, whose findings come only at a run's end, abort their parts.
func TestAnInterruptedCoordinatedTransportRunSaysSoAndFails(t *testing.T) {
	rx, tx, err := interruptCoordinated(t)
	if err == nil || exitCode(err) != 1 || !errors.Is(err, errInterrupted) {
		t.Fatalf("an interrupted run returned %v (exit status %d), want errInterrupted (exit status 1)", err, exitCode(err))
	}
	if msg := err.Error(); !strings.Contains(msg, "interrupted after") || !strings.Contains(msg, "no report") ||
		strings.Contains(msg, "context canceled") {
		t.Errorf("error %q does not say the run was interrupted and that there is no report (or names context canceled)", msg)
	}
	for _, a := range []*testAgent{rx, tx} {
		a.log.waitFor(t, "aborted: the coordinator went away")
	}
}

// A coordinate that ends without the agents' bye (interrupted here) leaves
// them idle when it returns, as one that completes does, so that a run
// started at once is not refused as busy: before, it closed the control
// connections and returned while the agents were still tearing their
// parts down.
func TestAnInterruptedCoordinateReturnsWithTheAgentsIdle(t *testing.T) {
	rx, tx, err := interruptCoordinated(t)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("coordinate returned %v, want errInterrupted", err)
	}
	for _, a := range []*testAgent{rx, tx} {
		a.mu.Lock()
		busy := a.mu.busy
		a.mu.Unlock()
		if busy != "" {
			t.Errorf("agent %s is still busy with the run of %s when coordinate returned", a.addr, busy)
		}
	}
}

// interruptCoordinated runs a transport scenario across two agents that
// only an interrupt ends, interrupts it once the sender is sending, and
// returns the agents and what coordinate returned.
func interruptCoordinated(t *testing.T) (rx, tx *testAgent, err error) {
	t.Helper()
	rx, tx = startAgent(t), startAgent(t)
	cfg := testCoordConfig(rx.addr, tx.addr)
	cfg.messages, cfg.tc.rate = 0, 2000
	cfg.tc.duration = time.Hour // only the interrupt ends it
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go cancelOnProgress(ctx, cancel, tx.log, "sending to")
	_, _, err = coordinate(ctx, cfg, io.Discard)
	return rx, tx, err
}
