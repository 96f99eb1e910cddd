package main

// loadgen agent and loadgen coordinate run one transport scenario across
// hosts, the way Kafka's Trogdor agents and coordinator do: an agent on each
// host waits for a coordinator on a control port; the coordinator tells
// every agent its part, starts them together, watches their heartbeats,
// gathers what each one measured and merges it into one report.
//
// The control protocol (package control: its messages, framing, limits and
// versions) runs over one TCP connection per agent; the agent keeps the
// coordinator's "bye" answer until it has freed its node, so that it is
// idle when the coordinator hears it. From the plan on, the agent sends
// "progress" every plan.Heartbeat, so a coordinator that hears nothing for a
// few heartbeats knows the agent is hung or gone. An agent that loses its
// control connection aborts its run at once: a coordinator that dies does
// not leave agents sending forever.
//
// A connection whose first message is "worker", "kill" or "drop" is not a
// run: it starts or kills one of the engine workers an agent hosts for
// `loadgen coordinate --scenario wordcount|pipeline`, or removes the
// directory of a job that is over (agentworker.go).
//
// Until a connection's first message is in (and its key proven, with
// --key-file), the agent knows nothing of its peer: it reads that opening
// with lines of at most control.MaxOpeningLine bytes and gives it
// firstMessageTimeout, and it serves at most maxControlConns connections at
// once, answering more with an error and closing them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/load"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// The limits on an agent's control connections.
const (
	// firstMessageTimeout is how long a connection may take, from its key
	// exchange, to send its first message (coordinators send it at once).
	firstMessageTimeout = 10 * time.Second
	// maxControlConns is how many control connections an agent serves at
	// once: a run's, one for each engine worker it hosts, and the passing
	// kills.
	maxControlConns = 64
)

// agent serves coordinators on a control listener, one run at a time.
type agent struct {
	ln         net.Listener
	dataListen string // "" : the address the coordinator reached us at, any port
	stderr     io.Writer
	opts       []transport.Option // authentication and encryption of the data node
	key        []byte             // authenticates coordinators; nil: anyone may coordinate
	workDir    string             // engine workers' directories, <workDir>/<job>/node<k>
	nodeArgs   []string           // the transport flags engine workers get
	exe        string             // the loadgen binary engine workers run; "": this one (tests set it)
	workers    workers
	// firstTimeout and maxConns are firstMessageTimeout and
	// maxControlConns, but in tests.
	firstTimeout time.Duration
	maxConns     int

	wg     sync.WaitGroup
	closed chan struct{}
	mu     struct {
		sync.Mutex
		busy  string // the coordinator whose run is under way
		conns map[net.Conn]struct{}
	}
}

func newAgent(ln net.Listener, dataListen string, stderr io.Writer) *agent {
	a := &agent{ln: ln, dataListen: dataListen, stderr: stderr, closed: make(chan struct{}),
		firstTimeout: firstMessageTimeout, maxConns: maxControlConns}
	a.mu.conns = map[net.Conn]struct{}{}
	a.workers.procs = map[string]*os.Process{}
	a.workers.live, a.workers.dropping = map[string]int{}, map[string]bool{}
	return a
}

// serve accepts coordinators until ctx ends or close is called.
func (a *agent) serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, a.close)
	defer stop()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			select {
			case <-a.closed:
				a.wg.Wait()
				return nil
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			a.close()
			a.wg.Wait()
			return err
		}
		a.mu.Lock()
		full := len(a.mu.conns) >= a.maxConns
		if !full {
			a.mu.conns[c] = struct{}{}
		}
		a.mu.Unlock()
		if full {
			a.refuse(c)
			continue
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			a.session(ctx, c)
			a.mu.Lock()
			delete(a.mu.conns, c)
			a.mu.Unlock()
			c.Close()
		}()
	}
}

// refuse tells the peer of a connection over maxConns why it is closed, and
// closes it. The line goes into an empty socket buffer, so the write does
// not wait; its deadline is for a peer that is not there.
func (a *agent) refuse(c net.Conn) {
	why := fmt.Sprintf("agent busy: %d control connections are open, the most it serves at once (a run's, its engine workers'); try again once one ends", a.maxConns)
	a.logf("refused a control connection from %s: %d are open, the most it serves at once", c.RemoteAddr(), a.maxConns)
	if line, err := control.Append(nil, control.Msg{Kind: control.KindError, Error: why}); err == nil {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(line)
	}
	c.Close()
}

// close stops accepting and cuts every control connection, which aborts
// the runs under way. It is idempotent and safe for concurrent use.
func (a *agent) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.closed:
		return
	default:
	}
	close(a.closed)
	a.ln.Close()
	for c := range a.mu.conns {
		c.Close()
	}
}

// release ends who's run, letting the next coordinator in. Releasing a run
// already released does nothing, even when another coordinator's run has
// begun since.
func (a *agent) release(who string) {
	a.mu.Lock()
	if a.mu.busy == who {
		a.mu.busy = ""
	}
	a.mu.Unlock()
}

func (a *agent) logf(format string, args ...any) {
	fmt.Fprintf(a.stderr, "loadgen agent: "+format+"\n", args...)
}

// session serves one coordinator's connection until the run ends or the
// connection breaks.
func (a *agent) session(ctx context.Context, c net.Conn) {
	who := c.RemoteAddr().String()
	cc := control.NewConn(c)
	cc.SetMaxLine(control.MaxOpeningLine)
	if err := control.Authenticate(cc, a.key, control.Agent); err != nil {
		a.logf("refused coordinator %s: %v", who, err)
		return
	}
	first, err := cc.Recv(a.firstTimeout)
	if err != nil {
		if errors.Is(err, control.ErrTimeout) {
			err = fmt.Errorf("no message within %v of connecting: %w", a.firstTimeout, err)
		}
		a.logf("coordinator %s went away: %v", who, err)
		if control.IsBadInput(err) || errors.Is(err, control.ErrTimeout) {
			_ = cc.Send(control.Msg{Kind: control.KindError, Error: err.Error()})
		}
		return
	}
	if first.Kind == control.KindAuth && a.key == nil {
		// A coordinator with a key: neither side runs anything.
		a.logf("refused coordinator %s: it proves a key, and this agent has no --key-file", who)
		_ = cc.Send(control.Msg{Kind: control.KindError, Error: "this agent has no --key-file: give the agent and the coordinator the same one, or neither"})
		return
	}
	cc.SetMaxLine(control.MaxLine)
	switch first.Kind {
	case control.KindWorker, control.KindKill, control.KindDrop:
		// Engine workers are not runs: an agent hosts any number of them,
		// beside a run.
		switch first.Kind {
		case control.KindWorker:
			err = a.runWorker(cc, first.Worker, c.LocalAddr())
		case control.KindKill:
			err = a.killWorker(cc, first.Worker)
		default:
			err = a.dropJob(cc, first.Worker)
		}
		if err != nil {
			a.logf("%s from %s failed: %v", first.Kind, who, err)
			_ = cc.Send(control.Msg{Kind: control.KindError, Error: err.Error()})
		}
		return
	}
	a.mu.Lock()
	busy := a.mu.busy
	if busy == "" {
		a.mu.busy = who
	}
	a.mu.Unlock()
	if busy != "" {
		a.logf("refused coordinator %s: busy with a run from %s", who, busy)
		_ = cc.Send(control.Msg{Kind: control.KindError, Error: "agent busy with a run from coordinator " + busy})
		return
	}
	defer a.release(who)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan control.Msg)
	readErr := make(chan error, 1)
	go func() {
		defer cancel()
		for {
			m, err := cc.Recv(0)
			if err != nil {
				readErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	a.logf("coordinator %s connected", who)
	r := &agentRun{a: a, cc: cc, msgs: msgs, who: who, first: &first}
	err = r.run(ctx, c.LocalAddr())
	r.shutdown()
	switch {
	case err == nil:
		a.logf("run from %s finished", who)
	case ctx.Err() != nil:
		why := "the agent is shutting down"
		select {
		case e := <-readErr:
			if control.IsBadInput(e) {
				// Not gone: it broke the protocol, and is told so.
				a.logf("run from %s failed: %v", who, e)
				_ = cc.Send(control.Msg{Kind: control.KindError, Error: e.Error()})
				return
			}
			why = "the coordinator went away: " + e.Error()
		default:
		}
		a.logf("run from %s aborted: %s", who, why)
	default:
		a.logf("run from %s failed: %v", who, err)
		_ = cc.Send(control.Msg{Kind: control.KindError, Error: err.Error()})
	}
}

// agentRun is one run on an agent: its node, its part as a receiver (serve's
// server) and as a sender.
type agentRun struct {
	a     *agent
	who   string // the coordinator
	cc    *control.Conn
	msgs  <-chan control.Msg
	first *control.Msg // the message that came before the run began

	plan    control.Plan
	to      string
	node    *transport.Node
	srv     *server
	senders []*transport.Sender
	clock   *clockCorrector // nil: no correction
	hbStop  chan struct{}
	hbDone  chan struct{}
}

// planConfig is the transport configuration a plan describes.
func planConfig(p *control.Plan) transportConfig {
	return transportConfig{
		size: p.Size, duration: p.Duration, rate: p.Rate, channels: p.Channels,
		connections: p.Connections, consumeRate: p.ConsumeRate, producers: p.Producers, delivery: p.Delivery,
	}
}

// validatePlan checks the plan's protocol fields, then the load it
// describes as loadgen run checks its flags.
func validatePlan(p *control.Plan) error {
	if err := p.Validate(); err != nil {
		return err
	}
	cfg := planConfig(p)
	if p.Messages > 0 && cfg.duration == 0 {
		cfg.duration = time.Hour // bounded by Messages
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// next waits for the next control message, which must be of kind want.
func (r *agentRun) next(ctx context.Context, want control.Kind) (control.Msg, error) {
	if m := r.first; m != nil {
		r.first = nil
		return *m, control.Expect(*m, want)
	}
	select {
	case m := <-r.msgs:
		return m, control.Expect(m, want)
	case <-ctx.Done():
		return control.Msg{}, ctx.Err()
	}
}

func (r *agentRun) run(ctx context.Context, ctlLocal net.Addr) error {
	m, err := r.next(ctx, control.KindPlan)
	if err != nil {
		return err
	}
	if err := validatePlan(m.Plan); err != nil {
		return err
	}
	r.plan = *m.Plan
	listen := r.a.dataListen
	if listen == "" {
		host, _, err := net.SplitHostPort(ctlLocal.String())
		if err != nil {
			return err
		}
		listen = net.JoinHostPort(host, "0")
	}
	r.srv = &server{rec: bench.NewRecorder(), sessions: map[uint64]*session{}, stderr: r.a.stderr, replyOpts: r.a.opts}
	r.srv.lim = load.NewLimiter(r.plan.ConsumeRate)
	r.node, err = transport.NewNode(append([]transport.Option{transport.WithListen(listen),
		transport.WithConnectionsPerPeer(r.plan.Connections), transport.WithPingInterval(clockPing)}, r.a.opts...)...)
	if err != nil {
		return err
	}
	r.srv.node = r.node
	defer metricsHub.addNode(r.node, "agent")()
	if cfg := planConfig(&r.plan); cfg.inline() {
		r.node.HandleAllInline(r.srv.handler)
	} else {
		r.node.HandleAll(r.srv.handler)
	}
	r.startHeartbeat()
	if err := r.cc.Send(control.Msg{Kind: control.KindReady, Ready: &control.Ready{
		DataAddr: r.node.Addr(), Epoch: r.node.Epoch(), Machine: bench.DetectMachine(),
	}}); err != nil {
		return err
	}

	if m, err = r.next(ctx, control.KindConnect); err != nil {
		return err
	}
	if r.to = m.To; r.to != "" {
		if err := r.connect(ctx, m.To, m.Index); err != nil {
			return err
		}
	}
	if err := r.cc.Send(control.Msg{Kind: control.KindConnected}); err != nil {
		return err
	}

	if m, err = r.next(ctx, control.KindStart); err != nil {
		return err
	}
	if len(r.senders) > 0 {
		r.a.logf("sending to %s from %s", r.to, time.Unix(0, m.StartAt).Format(time.RFC3339Nano))
		done := r.send(ctx, m.StartAt)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := r.cc.Send(control.Msg{Kind: control.KindDone, Done: &done}); err != nil {
			return err
		}
	}

	if m, err = r.next(ctx, control.KindCollect); err != nil {
		return err
	}
	f := control.Findings{BySender: map[uint64]control.Received{}, Clamped: r.srv.rec.Clamped()}
	for _, e := range m.Epochs {
		// Only the runs that sent here: a session made up for each epoch
		// named would hold a latency histogram, so a short line could
		// make the agent hold gigabytes.
		if ss := r.srv.sessionIfAny(e); ss != nil {
			f.BySender[e] = ss.received()
		}
	}
	f.WireOut = int64(r.node.Stats().Totals().WireOut)
	if err := r.cc.Send(control.Msg{Kind: control.KindFindings, Findings: &f}); err != nil {
		return err
	}
	if _, err = r.next(ctx, control.KindBye); err != nil {
		return err
	}
	// Free the agent before answering, so that the coordinator's next run,
	// which may start the moment this one returns, finds it idle.
	r.shutdown()
	r.a.release(r.who)
	return r.cc.Send(control.Msg{Kind: control.KindBye})
}

// connect dials the receiver and opens this sender's channels: sources
// (2+index, i), targets (1, i), the targets serve's handler checks.
func (r *agentRun) connect(ctx context.Context, to string, index int) error {
	if index < 0 || index > 1<<30 {
		return fmt.Errorf("connect: sender index %d out of range", index)
	}
	peer, err := r.node.Peer(to)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := peer.WaitConnected(wctx); err != nil {
		return fmt.Errorf("connect: cannot reach the receiver's data address %s: %w", to, err)
	}
	if r.plan.ClockCorrection {
		if r.clock, err = startClockCorrection(ctx, peer); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
	}
	senders := make([]*transport.Sender, r.plan.Channels)
	for i := range senders {
		src := taskid.ID{Processor: 2 + uint32(index), Index: uint32(i)}
		if senders[i], err = peer.OpenSender(wctx, src, taskid.ID{Processor: 1, Index: uint32(i)}); err != nil {
			return fmt.Errorf("connect: opening channel %d: %w", i, err)
		}
	}
	r.senders = senders
	return nil
}

// send waits for the start time, sends the plan's messages, and waits until
// the receiver has acknowledged every one.
func (r *agentRun) send(ctx context.Context, startAt int64) (done control.Done) {
	defer func() { done.Clock = r.clock.finish() }()
	if d := time.Until(time.Unix(0, startAt)); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return done
		}
	}
	start := time.Now()
	done.Late = max(0, start.Sub(time.Unix(0, startAt)))
	cfg := planConfig(&r.plan)
	cfg.shift = r.clock.shiftOf()
	var err error
	switch {
	case r.plan.Messages > 0:
		done.Sent, err = load.Count(ctx, cfg.loadConfig(), r.plan.Messages, r.senders)
	case cfg.rate > 0:
		var res bench.Result
		res, err = load.FixedRate(ctx, cfg.loadConfig(), r.senders)
		done.Sent = res.Sent
	default:
		done.Sent, err = load.MaxRate(ctx, cfg.loadConfig(), r.senders)
	}
	if err != nil {
		done.Err = err.Error()
	}
	dctx, cancel := context.WithTimeout(ctx, drainTimeout(cfg))
	defer cancel()
	for _, s := range r.senders {
		if err := s.Flush(dctx); err != nil {
			if done.Err == "" {
				done.Err = fmt.Sprintf("not every message was acknowledged within %v: %v", drainTimeout(cfg), err)
			}
			break
		}
	}
	done.Elapsed = time.Since(time.Unix(0, startAt))
	for _, s := range r.senders {
		done.Resent += int64(s.Stats().Resent)
	}
	return done
}

// startHeartbeat sends progress every plan.Heartbeat until shutdown.
func (r *agentRun) startHeartbeat() {
	r.hbStop, r.hbDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.hbDone)
		t := time.NewTicker(r.plan.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-r.hbStop:
				return
			case <-t.C:
			}
			p := control.Progress{
				Sent:      int64(r.node.Stats().Totals().MessagesOut),
				Delivered: r.srv.delivered.Load(),
			}
			if r.cc.Send(control.Msg{Kind: control.KindProgress, Progress: &p}) != nil {
				return
			}
		}
	}()
}

// shutdown stops the heartbeat and aborts the node: whatever was not
// acknowledged is dropped, since the run is over either way.
func (r *agentRun) shutdown() {
	r.clock.finish() // if connect started one and the run ended before send
	if r.hbStop != nil {
		close(r.hbStop)
		<-r.hbDone
		r.hbStop = nil
	}
	if r.node != nil {
		r.node.Abort()
		r.node = nil
	}
}

// received is what the session received, with its latency histogram
// exported for another process to merge: the answer to a coordinator's
// collect and to loadgen send's report request.
func (ss *session) received() control.Received {
	return control.Received{
		Delivered: ss.delivered.Load(), Duplicates: ss.dups.Load(), Gaps: ss.gaps.Load(), Malformed: ss.malformed.Load(),
		Bytes: ss.nbytes.Load(), Latency: ss.rec.Snapshot().Export(),
	}
}

func agentCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", "Waits for 'loadgen coordinate' on a control port and runs its part of a\n"+
		"scenario across hosts: receives like 'loadgen serve', sends like 'loadgen send'.\n"+
		"Runs until interrupted, one coordinator at a time. It serves at most "+strconv.Itoa(maxControlConns)+"\n"+
		"control connections at once (a run's, its engine workers') and refuses more;\n"+
		"a connection must send its first message within "+firstMessageTimeout.String()+", in lines of at most\n"+
		strconv.Itoa(control.MaxOpeningLine>>10)+" KiB until then.", stderr)
	listen := fs.String("listen", "127.0.0.1:7500", "control address to listen on for coordinators")
	dataListen := fs.String("data-listen", "", "data address to receive on, and the host engine workers listen on (default: the address the coordinator reached, any port)")
	workDir := fs.String("data-dir", "", "directory for the logs and checkpoints of the engine workers this agent runs, in job-<id>/node<k>: kept while their job can be resumed (its coordinator has a --data-dir), removed at the coordinator's word once it cannot (it completed, its coordinator had no --data-dir, or a coordinator started over from that --data-dir) (default: a temporary one, removed when the agent stops)")
	var sec nodeFlags
	sec.register(fs)
	sec.registerMetrics(fs)
	sec.registerClockOffset(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := sec.startMetrics(ctx, stderr); err != nil {
		return err
	}
	opts, err := sec.options()
	if err != nil {
		return err
	}
	key, err := sec.key()
	if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected arguments %q", fs.Args())
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a := newAgent(ln, *dataListen, stderr)
	a.opts, a.key, a.nodeArgs = opts, key, sec.args()
	if a.workDir = *workDir; a.workDir == "" {
		if a.workDir, err = os.MkdirTemp("", "loadgen-agent-"); err != nil {
			return err
		}
		defer os.RemoveAll(a.workDir)
	}
	a.logf("listening for coordinators on %s", ln.Addr())
	err = a.serve(ctx)
	fmt.Fprintln(stdout, "loadgen agent: stopped")
	return err
}
