package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/transport"
)

// The ways coordinate can fail because of one agent. An agentError wraps
// one of them and names the agent.
var (
	errAgentUnreachable = errors.New("loadgen: agent unreachable")
	errAgentLost        = errors.New("loadgen: agent's control connection broke (did it die?)")
	errAgentSilent      = errors.New("loadgen: agent stopped reporting (is it hung?)")
	errAgentFailed      = errors.New("loadgen: agent failed")
	errAgentBadReport   = errors.New("loadgen: agent sent findings loadgen cannot use")
)

// agentError is a failure of one agent during one phase of a run.
type agentError struct {
	Agent string // its control address
	Role  string // "receiver", "sender 1", ...
	Phase string // "connecting", "preparing", "running", ...
	Err   error
}

func (e *agentError) Error() string {
	return fmt.Sprintf("agent %s (%s), while %s: %v", e.Agent, e.Role, e.Phase, e.Err)
}

func (e *agentError) Unwrap() error { return e.Err }

// Topologies: who sends to whom.
const (
	// topoFanIn: the first agent receives, every other agent sends to it.
	topoFanIn = "fan-in"
	// topoRing: every agent sends to the next one and receives from the
	// previous one (with two agents: both directions at once).
	topoRing = "ring"
)

// coordConfig is what coordinate runs.
type coordConfig struct {
	key      []byte // proves the coordinator to the agents; nil: no authentication
	agents   []string
	topology string
	tc       transportConfig
	// messages is how many each sender sends; 0: tc.duration decides.
	messages         int64
	startDelay       time.Duration
	heartbeatTimeout time.Duration
	connectTimeout   time.Duration
	// trustClocks makes senders stamp their own clocks' send times
	// (--clock-correction=false).
	trustClocks bool
}

func (c *coordConfig) validate() error {
	if len(c.agents) < 2 {
		return fmt.Errorf("coordinate: --agents needs at least two agents, got %d", len(c.agents))
	}
	seen := map[string]bool{}
	for _, a := range c.agents {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("coordinate: agent address %q: %w", a, err)
		}
		if seen[a] {
			return fmt.Errorf("coordinate: agent %s listed twice", a)
		}
		seen[a] = true
	}
	if c.topology != topoFanIn && c.topology != topoRing {
		return fmt.Errorf("coordinate: unknown topology %q (want %s or %s)", c.topology, topoFanIn, topoRing)
	}
	if c.messages < 0 {
		return fmt.Errorf("coordinate: --messages must not be negative, got %d", c.messages)
	}
	if c.tc.faults != "" {
		return errors.New("coordinate: --faults is for 'loadgen run'; inject faults into a local run instead")
	}
	if c.heartbeatTimeout <= 0 || c.connectTimeout <= 0 || c.startDelay < 0 {
		return errors.New("coordinate: --heartbeat-timeout and --connect-timeout must be positive, --start-delay not negative")
	}
	// Each sender's channels are (source, target) pairs of their own at
	// its receiver, whose node keeps state for a bounded number of them.
	senders := 1 // ring: one sender a receiver
	if c.topology == topoFanIn {
		senders = len(c.agents) - 1
	}
	if pairs := c.tc.channels * senders; pairs > transport.DefaultMaxReceivers-1 {
		return fmt.Errorf("coordinate: --channels %d from each of %d senders make %d channels into one receiving agent, over the %d its node takes (transport.WithMaxReceivers, one more for the control channel)",
			c.tc.channels, senders, pairs, transport.DefaultMaxReceivers-1)
	}
	tc := c.tc
	if c.messages > 0 {
		tc.duration = time.Hour // bounded by --messages
	}
	return tc.validate()
}

// remote is the coordinator's view of one agent.
type remote struct {
	addr   string
	role   string
	cc     *control.Conn
	sendTo *remote // nil: does not send
	index  int     // sender number

	ready    control.Ready
	progress control.Progress
	done     *control.Done
	found    *control.Findings
	latency  map[uint64]*hdrhistogram.Histogram // found's histograms, by sender epoch
	finished bool                               // it answered bye
}

type ctlEvent struct {
	from *remote
	m    control.Msg
	err  error
}

// coordinator runs one distributed run.
type coordinator struct {
	cfg       coordConfig
	began     time.Time // when coordinate was called
	startAt   time.Time // the senders' common start; zero until it is set
	stderr    io.Writer
	remotes   []*remote
	events    chan ctlEvent
	delivered atomic.Int64 // over every receiver, from their heartbeats
	sent      atomic.Int64 // over every agent, from their heartbeats
}

func (c *coordinator) logf(format string, args ...any) {
	fmt.Fprintf(c.stderr, "loadgen coordinate: "+format+"\n", args...)
}

// assignRoles decides who sends to whom.
func assignRoles(addrs []string, topology string) []*remote {
	rs := make([]*remote, len(addrs))
	for i, a := range addrs {
		rs[i] = &remote{addr: a}
	}
	for i, r := range rs {
		switch {
		case topology == topoRing:
			r.sendTo, r.index, r.role = rs[(i+1)%len(rs)], i, fmt.Sprintf("sender %d and receiver", i)
		case i == 0:
			r.role = "receiver"
		default:
			r.sendTo, r.index, r.role = rs[0], i, fmt.Sprintf("sender %d", i)
		}
	}
	return rs
}

// senders returns the remotes that send.
func (c *coordinator) senders() []*remote {
	var out []*remote
	for _, r := range c.remotes {
		if r.sendTo != nil {
			out = append(out, r)
		}
	}
	return out
}

// coordinate runs cfg on its agents and merges what they measured.
func coordinate(ctx context.Context, cfg coordConfig, stderr io.Writer) (*bench.Report, *bench.Recorder, error) {
	if err := cfg.validate(); err != nil {
		return nil, nil, err
	}
	c := &coordinator{cfg: cfg, began: time.Now(), stderr: stderr, remotes: assignRoles(cfg.agents, cfg.topology)}
	if err := c.dial(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, nil, c.interrupted("connecting")
		}
		return nil, nil, err
	}
	abort := abortOf(ctx)
	ctx, cancel := context.WithCancel(ctx)
	var readers sync.WaitGroup
	defer func() {
		cancel()
		// Ending the control connections aborts whatever the agents
		// still run; they do not outlive a failed coordinator. Each
		// agent closes its end once it has freed its part, which ends
		// its reader (or the reader's heartbeat timeout does): waiting
		// for that leaves the agents idle, ready for the next run, when
		// coordinate returns, unless the user insists (abortOf).
		for _, r := range c.remotes {
			_ = r.cc.CloseWrite()
		}
		idle := make(chan struct{})
		go func() { readers.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-abort.Done():
		}
		for _, r := range c.remotes {
			r.cc.Close()
		}
	}()
	c.events = make(chan ctlEvent, 16)
	for _, r := range c.remotes {
		readers.Go(func() { c.read(ctx, r) })
	}

	senders := c.senders()
	hb := min(max(cfg.heartbeatTimeout/5, 10*time.Millisecond), time.Second)
	for _, r := range c.remotes {
		p := control.Plan{
			Version: control.Version, Size: cfg.tc.size, Channels: cfg.tc.channels, Connections: cfg.tc.connections,
			Messages: cfg.messages, Duration: cfg.tc.duration, ConsumeRate: cfg.tc.consumeRate, Heartbeat: hb,
			ClockCorrection: !cfg.trustClocks, Producers: cfg.tc.producers, Delivery: cfg.tc.delivery,
		}
		if r.sendTo != nil {
			p.Rate = cfg.tc.rate / float64(len(senders))
		} else {
			p.Messages = 0
		}
		if err := c.send(r, "preparing", control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
			return nil, nil, err
		}
	}
	if err := c.await(ctx, "preparing", control.KindReady, c.remotes); err != nil {
		return nil, nil, err
	}
	for _, r := range c.remotes {
		c.logf("agent %s (%s) ready, data on %s: %s", r.addr, r.role, r.ready.DataAddr, r.ready.Machine)
	}

	for _, r := range c.remotes {
		m := control.Msg{Kind: control.KindConnect}
		if r.sendTo != nil {
			m.To, m.Index = reachableDataAddr(r.sendTo.ready.DataAddr, r.sendTo.addr), r.index
		}
		if err := c.send(r, "connecting to its receiver", m); err != nil {
			return nil, nil, err
		}
	}
	if err := c.await(ctx, "connecting to its receiver", control.KindConnected, c.remotes); err != nil {
		return nil, nil, err
	}

	startAt := time.Now().Add(cfg.startDelay)
	c.startAt = startAt
	c.logf("%d sender(s) start at %s", len(senders), startAt.Format("15:04:05.000"))
	for _, r := range c.remotes {
		if err := c.send(r, "starting", control.Msg{Kind: control.KindStart, StartAt: startAt.UnixNano()}); err != nil {
			return nil, nil, err
		}
	}
	// The receivers' heartbeats carry counts, not histograms, so progress
	// shows rates only; latency comes from the histograms gathered at the end.
	prog := bench.NewProgress(nil, &c.delivered, nil)
	if d := time.Until(startAt); d > 0 {
		time.Sleep(d)
	}
	prog.Start()
	stopPrint := c.printProgress()
	err := c.await(ctx, "running", control.KindDone, senders)
	stopPrint()
	prog.Stop()
	if err != nil {
		return nil, nil, err
	}

	for _, r := range c.remotes {
		var epochs []uint64
		for _, s := range senders {
			if s.sendTo == r {
				epochs = append(epochs, s.ready.Epoch)
			}
		}
		if err := c.send(r, "collecting", control.Msg{Kind: control.KindCollect, Epochs: epochs}); err != nil {
			return nil, nil, err
		}
	}
	if err := c.await(ctx, "collecting", control.KindFindings, c.remotes); err != nil {
		return nil, nil, err
	}
	report, rec := c.report(startAt, prog)
	for _, r := range c.remotes {
		if err := c.send(r, "finishing", control.Msg{Kind: control.KindBye}); err != nil {
			return nil, nil, err
		}
	}
	if err := c.await(ctx, "finishing", control.KindBye, c.remotes); err != nil {
		return nil, nil, err
	}
	return report, rec, nil
}

// interrupted is the error of a run whose context ended (Ctrl-C, SIGTERM)
// while phase was under way. The agents report what they measured only
// at the end of a run, so there is nothing to report; closing the control
// connections, as coordinate does on its way out, aborts their parts.
func (c *coordinator) interrupted(phase string) error {
	when := fmt.Sprintf("after %.1f s of sending", time.Since(c.startAt).Seconds())
	if c.startAt.IsZero() || time.Now().Before(c.startAt) {
		when = fmt.Sprintf("after %.1f s, before the senders started", time.Since(c.began).Seconds())
	}
	return fmt.Errorf("transport scenario %w %s, while %s: the agents report what they measured only at the end of a run, so there is no report (their last heartbeats: %d messages sent, %d delivered); their parts are aborted",
		errInterrupted, when, phase, c.sent.Load(), c.delivered.Load())
}

// printProgress prints, once a second until stopped, what the agents'
// latest heartbeats say.
func (c *coordinator) printProgress() (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		prev := c.delivered.Load()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				d := c.delivered.Load()
				fmt.Fprintf(c.stderr, "t=%.0fs  delivered %d  rate %.0f msgs/s  sent %d\n",
					now.Sub(start).Seconds(), d, float64(d-prev), c.sent.Load())
				prev = d
			}
		}
	}()
	return func() { close(done); <-exited }
}

// dial connects to every agent at once and names each one it cannot reach.
func (c *coordinator) dial(ctx context.Context) error {
	errs := make([]error, len(c.remotes))
	done := make(chan int)
	for i, r := range c.remotes {
		go func() {
			d := net.Dialer{Timeout: c.cfg.connectTimeout}
			conn, err := d.DialContext(ctx, "tcp", r.addr)
			if err != nil {
				errs[i] = &agentError{Agent: r.addr, Role: r.role, Phase: "connecting",
					Err: fmt.Errorf("%w: %v (is 'loadgen agent --listen %s' running there?)", errAgentUnreachable, err, r.addr)}
			} else {
				r.cc = control.NewConn(conn)
				if err := control.Authenticate(r.cc, c.cfg.key, control.Coordinator); err != nil {
					errs[i] = &agentError{Agent: r.addr, Role: r.role, Phase: "authenticating", Err: err}
				}
			}
			done <- i
		}()
	}
	for range c.remotes {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		for _, r := range c.remotes {
			if r.cc != nil {
				r.cc.Close()
			}
		}
		return err
	}
	return nil
}

// read turns r's control lines into events until the connection fails or
// stays silent for the heartbeat timeout. Once ctx ends it drops them, and
// still reads to the connection's end: the agent closes it once its part
// is freed.
func (c *coordinator) read(ctx context.Context, r *remote) {
	for {
		m, err := r.cc.Recv(c.cfg.heartbeatTimeout)
		if err != nil {
			if errors.Is(err, control.ErrTimeout) {
				err = fmt.Errorf("%w: nothing heard for %v", errAgentSilent, c.cfg.heartbeatTimeout)
			} else {
				err = fmt.Errorf("%w: %v", errAgentLost, err)
			}
		}
		select {
		case c.events <- ctlEvent{from: r, m: m, err: err}:
		case <-ctx.Done():
		}
		if err != nil {
			return
		}
	}
}

func (c *coordinator) send(r *remote, phase string, m control.Msg) error {
	if err := r.cc.Send(m); err != nil {
		return &agentError{Agent: r.addr, Role: r.role, Phase: phase, Err: fmt.Errorf("%w: %v", errAgentLost, err)}
	}
	return nil
}

// await handles events until every remote in set has sent a message of type
// want, and fails on the first agent that breaks, goes silent or reports a
// failure. Heartbeats update the progress counters on the way.
func (c *coordinator) await(ctx context.Context, phase string, want control.Kind, set []*remote) error {
	pending := map[*remote]bool{}
	for _, r := range set {
		pending[r] = true
	}
	for len(pending) > 0 {
		var ev ctlEvent
		select {
		case ev = <-c.events:
		case <-ctx.Done():
			return c.interrupted(phase)
		}
		r := ev.from
		fail := func(err error) error { return &agentError{Agent: r.addr, Role: r.role, Phase: phase, Err: err} }
		if ev.err != nil {
			if r.finished {
				continue // it said bye and closed its end
			}
			return fail(ev.err)
		}
		m := ev.m
		switch {
		case m.Kind == control.KindProgress:
			r.progress = *m.Progress
			var delivered, sent int64
			for _, x := range c.remotes {
				delivered += x.progress.Delivered
				sent += x.progress.Sent
			}
			c.delivered.Store(delivered)
			c.sent.Store(sent)
			continue
		case m.Kind == control.KindError:
			return fail(fmt.Errorf("%w: %s", errAgentFailed, m.Error))
		case m.Kind == control.KindAuth:
			return fail(fmt.Errorf("%w: the agent requires a key; give coordinate the agents' --key-file", control.ErrAuth))
		case m.Kind != want || !pending[r]:
			return fail(&control.UnexpectedError{Got: m.Kind, Want: want})
		}
		// The decoder saw to it that each kind has its body.
		switch want {
		case control.KindReady:
			r.ready = *m.Ready
		case control.KindDone:
			r.done = m.Done
		case control.KindFindings:
			hs, err := c.importFindings(r, m.Findings)
			if err != nil {
				return fail(fmt.Errorf("%w: %w", errAgentBadReport, err))
			}
			r.found, r.latency = m.Findings, hs
		case control.KindBye:
			r.finished = true
		}
		delete(pending, r)
	}
	return nil
}

// importFindings imports the latency histograms receiver r found for the
// senders that send to it, by their epochs, and fails on the first that is
// not one loadgen exports. Whatever else f holds is not read.
func (c *coordinator) importFindings(r *remote, f *control.Findings) (map[uint64]*hdrhistogram.Histogram, error) {
	hs := map[uint64]*hdrhistogram.Histogram{}
	for _, s := range c.senders() {
		got, ok := f.BySender[s.ready.Epoch]
		if s.sendTo != r || !ok || got.Latency == nil {
			continue
		}
		h, err := importLatency(got.Latency)
		if err != nil {
			return nil, fmt.Errorf("the latencies of %s (%s): %w", s.addr, s.role, err)
		}
		hs[s.ready.Epoch] = h
	}
	return hs, nil
}

// reachableDataAddr replaces an unspecified host in an agent's data address
// ("0.0.0.0:7401", ":7401") with the host the coordinator reached it at.
func reachableDataAddr(data, ctl string) string {
	host, port, err := net.SplitHostPort(data)
	if err != nil {
		return data
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if ch, _, err := net.SplitHostPort(ctl); err == nil {
			return net.JoinHostPort(ch, port)
		}
	}
	return data
}

// report merges every agent's findings into one report: counts add up per
// sender, latency histograms merge, and each agent's machine is listed.
func (c *coordinator) report(startAt time.Time, prog *bench.Progress) (*bench.Report, *bench.Recorder) {
	cfg := c.cfg.tc.asMap()
	delete(cfg, "faults")
	delete(cfg, "seed")
	if c.cfg.tc.producers == 0 && c.cfg.tc.rate == 0 { // each sending agent's own default
		cfg["producers"] = "half of each sending agent's cores"
	}
	cfg["topology"] = c.cfg.topology
	if c.cfg.messages > 0 {
		cfg["messages_per_sender"] = c.cfg.messages
		delete(cfg, "duration")
	}
	var agents []map[string]any
	for _, r := range c.remotes {
		agents = append(agents, map[string]any{"control": r.addr, "data": r.ready.DataAddr, "role": r.role, "machine": r.ready.Machine})
	}
	cfg["agents"] = agents
	report := bench.NewReport("transport-distributed", cfg)
	report.StartedAt = startAt.UTC()
	rec := bench.NewRecorder()
	var bytes int64
	var elapsed time.Duration
	var failures []string
	for _, s := range c.senders() {
		f := s.sendTo.found.BySender[s.ready.Epoch]
		d := s.done
		report.MessagesSent += d.Sent
		report.MessagesDelivered += f.Delivered
		report.Duplicates += f.Duplicates
		report.Lost += max(d.Sent-f.Delivered, f.Gaps)
		report.Resent += d.Resent
		bytes += f.Bytes
		elapsed = max(elapsed, d.Elapsed)
		var p99 float64
		if h := s.sendTo.latency[s.ready.Epoch]; h != nil {
			rec.MergeHistogram(h)
			p99 = bench.LatencyOf(h).P99
		}
		report.Notes = append(report.Notes, fmt.Sprintf("%s -> %s: %d sent, %d delivered, %d duplicates, %d missing, p99 %.1f µs, started %v late; %s",
			s.addr, s.sendTo.addr, d.Sent, f.Delivered, f.Duplicates, f.Gaps, p99, d.Late.Round(time.Microsecond), d.Clock.String()))
		if f.Malformed > 0 {
			report.Notes = append(report.Notes, fmt.Sprintf("%s -> %s: %s", s.addr, s.sendTo.addr, malformedNote(f.Malformed)))
		}
		report.Clock = report.Clock.Merge(d.Clock)
		if d.Err != "" {
			failures = append(failures, fmt.Sprintf("%s (%s): %s", s.addr, s.role, d.Err))
		}
	}
	var clamped int64
	for _, r := range c.remotes {
		report.WireBytes += r.found.WireOut
		clamped += r.found.Clamped
		report.Notes = append(report.Notes, fmt.Sprintf("agent %s (%s): %s", r.addr, r.role, r.ready.Machine))
	}
	report.DurationS = elapsed.Seconds()
	report.Timeline = prog.Samples()
	report.Finish(rec)
	if elapsed > 0 {
		report.ThroughputBytesPerS = float64(bytes) / elapsed.Seconds()
	}
	ok := len(failures) == 0 && report.Duplicates == 0 && report.Lost == 0 && report.MessagesDelivered == report.MessagesSent
	report.ExactlyOnce = &ok
	for _, f := range failures {
		report.Notes = append(report.Notes, "sender failed: "+f)
	}
	if clamped > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("%d latencies were beyond the histogram's range and clamped", clamped))
	}
	report.Notes = append(report.Notes,
		"latency is measured by each receiver against the send times in the payloads; over all senders, "+report.Clock.String(),
		"duration runs from the common start time to the last sender's last acknowledgement; machine is the coordinator's, the agents' are listed above and in config.agents")
	return report, rec
}

func coordinateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("coordinate", "Runs a scenario across hosts on 'loadgen agent's: sends each agent its part,\n"+
		"starts them together, watches their heartbeats, gathers their histograms and\n"+
		"merges them into one report. Fails, naming the agent, when one is unreachable,\n"+
		"dies or goes silent. Give the agents by addresses they can reach each other at.\n"+
		"With --scenario wordcount or pipeline this process is the engine's coordinator\n"+
		"and each agent runs one of its workers (node i on the i-th agent), starting it\n"+
		"again after a failure; --faults kill= SIGKILLs a worker on any agent. The\n"+
		"wordcount --input must be readable at its path on the agent of node 0.\n"+
		"The workers keep the job's source logs and checkpoints on their agents (see\n"+
		"'loadgen agent -h', --data-dir), its journal in this process's --data-dir. Once\n"+
		"the job cannot be resumed (it completed, or it ended and this process had no\n"+
		"--data-dir), the agents remove its directories, and a completed job's journal\n"+
		"goes too; an agent that fails to is a warning, naming it. With --start-over,\n"+
		"the agents first remove the job --data-dir held; an agent that cannot fails\n"+
		"the run, naming it, before anything is discarded.\n"+
		"A flag of another scenario is refused, as 'loadgen run' refuses it.\n"+
		"Interrupted (Ctrl-C), a run has no report (the agents report only at its end,\n"+
		"the engine only a completed job), says so (and where an engine job's data is),\n"+
		"and fails (exit status 1).", stderr)
	agents := fs.String("agents", "", "comma-separated control addresses of the agents, e.g. 10.0.0.1:7500,10.0.0.2:7500")
	scenario := fs.String("scenario", "transport", "scenario to run: transport, wordcount or pipeline")
	topology := fs.String("topology", topoFanIn, "fan-in: the first agent receives from all others; ring: each agent sends to the next")
	messages := fs.Int64("messages", 0, "messages each sender sends; 0: send for --duration")
	startDelay := fs.Duration("start-delay", 500*time.Millisecond, "how far ahead of now the common start time is set, once every agent is connected")
	hbTimeout := fs.Duration("heartbeat-timeout", 5*time.Second, "fail when an agent sends nothing for this long")
	connectTimeout := fs.Duration("connect-timeout", 5*time.Second, "fail when an agent's control port does not answer within this")
	correct := fs.Bool("clock-correction", true, "make each sender stamp its send times in its receiver's clock, estimated from the transport's PING round trips, so that one-way latency does not depend on the hosts' clocks agreeing (the report states the offsets and the error bound); false trusts the clocks as they are")
	var out outputFlags
	out.register(fs)
	var tc transportConfig
	tc.register(fs)
	var ec engineConfig
	ec.register(fs)
	var sec nodeFlags
	fs.StringVar(&sec.keyFile, "key-file", "", "file holding the pre-shared key the agents were given: the coordinator proves it holds it before an agent takes a plan (and the agents use it for their data connections)")
	hideFlags(fs, "nodes") // one engine worker per agent: refused below
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("coordinate: unexpected arguments %q", fs.Args())
	}
	key, err := sec.key()
	if err != nil {
		return err
	}
	var list []string
	for _, a := range strings.Split(*agents, ",") {
		if a = strings.TrimSpace(a); a != "" {
			list = append(list, a)
		}
	}
	nodes := false
	fs.Visit(func(f *flag.Flag) { nodes = nodes || f.Name == "nodes" })
	switch *scenario {
	case "transport":
		if err := checkScenarioFlags("coordinate", *scenario, fs); err != nil {
			return err
		}
	case "wordcount", "pipeline":
		if nodes {
			return errors.New("coordinate: there is one engine worker per agent; --nodes is for 'loadgen run'")
		}
		if err := checkScenarioFlags("coordinate", *scenario, fs); err != nil {
			return err
		}
		if len(list) == 0 {
			return errors.New("coordinate: --agents names no agent")
		}
		if err := checkEngineRun(*scenario, ec, tc); err != nil {
			return fmt.Errorf("coordinate: %w", err)
		}
		if err := out.check(); err != nil {
			return fmt.Errorf("coordinate: %w", err)
		}
		return coordinateEngine(ctx, *scenario, list, key, *connectTimeout, ec, tc, sec, out, stdout, stderr)
	default:
		return fmt.Errorf("coordinate: unknown scenario %q (want transport, wordcount or pipeline)", *scenario)
	}
	cfg := coordConfig{
		topology: *topology, tc: tc, messages: *messages,
		startDelay: *startDelay, heartbeatTimeout: *hbTimeout, connectTimeout: *connectTimeout,
		key: key, agents: list, trustClocks: !*correct,
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := out.check(); err != nil {
		return fmt.Errorf("coordinate: %w", err)
	}
	fmt.Fprintf(stderr, "loadgen coordinate: transport scenario on %d agents (%s): %d-byte messages, %s, rate %s, %d channel(s), %d connection(s)\n",
		len(cfg.agents), cfg.topology, tc.size, amountString(cfg.messages, tc.duration), rateString(tc.rate), tc.channels, tc.connections)
	report, rec, err := coordinate(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	return finishReport(report, rec, out, stdout, stderr)
}

// coordinateEngine runs an engine scenario with its workers on agents.
func coordinateEngine(ctx context.Context, scenario string, agents []string, key []byte, timeout time.Duration,
	ec engineConfig, tc transportConfig, sec nodeFlags, out outputFlags, stdout, stderr io.Writer) error {
	seen := map[string]bool{}
	for _, a := range agents {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("coordinate: agent address %q: %w", a, err)
		}
		if seen[a] {
			return fmt.Errorf("coordinate: agent %s listed twice", a)
		}
		seen[a] = true
	}
	// The workers take their transport settings from their agent's
	// command line; these are only the engine's defaults for its options.
	sec.peerBudget, sec.socketBuffer = transport.DefaultPeerBudget, transport.DefaultSocketBuffer
	l := &agentLauncher{agents: agents, key: key, timeout: timeout, machines: map[string]bench.Machine{}}
	ec.nodes, ec.agents = len(agents), l
	fmt.Fprintf(stderr, "loadgen coordinate: %s scenario, one engine worker on each of %d agents%s\n", scenario, len(agents), faultString(tc.faults))
	var (
		report *bench.Report
		rec    *bench.Recorder
		err    error
	)
	if scenario == "wordcount" {
		report, rec, err = runWordCountScenario(ctx, ec, tc, sec, stderr)
	} else {
		report, rec, err = runPipelineScenario(ctx, ec, tc, sec, stderr)
	}
	if err != nil {
		return err
	}
	var list []map[string]any
	l.mu.Lock()
	for i, a := range agents {
		list = append(list, map[string]any{"control": a, "node": i, "machine": l.machines[a]})
		report.Notes = append(report.Notes, fmt.Sprintf("node %d on agent %s: %s", i, a, l.machines[a]))
	}
	l.mu.Unlock()
	report.Config["agents"] = list
	report.Notes = append(report.Notes, "machine is the coordinator's; each worker's agent and machine are listed above and in config.agents")
	return finishReport(report, rec, out, stdout, stderr)
}

func amountString(messages int64, d time.Duration) string {
	if messages > 0 {
		return fmt.Sprintf("%d messages per sender", messages)
	}
	return d.String()
}
