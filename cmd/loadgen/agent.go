package main

// loadgen agent and loadgen coordinate run one transport scenario across
// hosts, the way Kafka's Trogdor agents and coordinator do: an agent on each
// host waits for a coordinator on a control port; the coordinator tells
// every agent its part, starts them together, watches their heartbeats,
// gathers what each one measured and merges it into one report.
//
// The control protocol is JSON, one object per line, over one TCP
// connection per agent. One run goes through these steps, and a message out
// of order ends the run with an "error" message:
//
//	coordinator -> agent            agent -> coordinator
//	plan {plan}                     ready {data address, epoch, machine}
//	connect {to, index}             connected
//	start {start time}              done {sent, elapsed, resent}   (senders only)
//	collect {epochs}                findings {per sending epoch, wire bytes}
//	bye                             bye   (after freeing the node: the agent is idle)
//
// From the plan on, the agent sends "progress" every plan.Heartbeat, so a
// coordinator that hears nothing for a few heartbeats knows the agent is
// hung or gone. An agent that loses its control connection aborts its run
// at once: a coordinator that dies does not leave agents sending forever.
//
// A connection whose first message is "worker" or "kill" is not a run: it
// starts or kills one of the engine workers an agent hosts for `loadgen
// coordinate --scenario wordcount|pipeline` (agentworker.go).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// ctlVersion is the control protocol's version; a plan of another version is
// refused, so a coordinator and agents built from different commits fail
// clearly instead of half-working.
// Version 2 added the plan's ClockCorrection and done's Clock.
const ctlVersion = 2

// maxCtlLine bounds one control line. The largest are findings, which carry
// one exported histogram per sender (a few hundred KiB each).
const maxCtlLine = 64 << 20

// Control message types.
const (
	msgPlan      = "plan"
	msgReady     = "ready"
	msgConnect   = "connect"
	msgConnected = "connected"
	msgStart     = "start"
	msgProgress  = "progress"
	msgDone      = "done"
	msgCollect   = "collect"
	msgFindings  = "findings"
	msgBye       = "bye"
	msgError     = "error"
)

var (
	// errCtlLineTooLong means a control line exceeded maxCtlLine.
	errCtlLineTooLong = errors.New("loadgen: control line too long")
	// errCtlUnexpected means a control message came out of order.
	errCtlUnexpected = errors.New("loadgen: unexpected control message")
)

// ctlMsg is one control line. Type says which of the other fields are set.
type ctlMsg struct {
	Type string `json:"type"`

	Plan *agentPlan `json:"plan,omitempty"` // plan
	// To is the data address the agent sends to; empty: it only receives.
	To string `json:"to,omitempty"` // connect
	// Index numbers the senders of a run, so that each uses its own source
	// tasks and no two senders' channels fence each other at a receiver.
	Index int `json:"index,omitempty"` // connect
	// StartAt is the wall-clock time to start sending, in nanoseconds since
	// 1970.
	StartAt int64 `json:"start_at_unix_ns,omitempty"` // start
	// Epochs are the epochs of the senders whose findings are wanted.
	Epochs []uint64 `json:"epochs,omitempty"` // collect

	Ready    *agentReady    `json:"ready,omitempty"`
	Progress *agentProgress `json:"progress,omitempty"`
	Done     *agentDone     `json:"done,omitempty"`
	Findings *agentFindings `json:"findings,omitempty"`
	Error    string         `json:"error,omitempty"`

	Worker  *workerPlan    `json:"worker,omitempty"`  // worker, kill
	Started *workerStarted `json:"started,omitempty"` // started, killed

	Nonce []byte `json:"nonce,omitempty"` // auth: a fresh challenge
	MAC   []byte `json:"mac,omitempty"`   // proof: HMAC over the role and both challenges
}

// agentPlan is an agent's part in a run.
type agentPlan struct {
	Version     int     `json:"version"`
	Size        int     `json:"size"`
	Channels    int     `json:"channels"`
	Connections int     `json:"connections"`
	Rate        float64 `json:"rate"` // this agent's sending rate; 0: as fast as possible
	// Messages is how many messages this agent sends; 0: Duration decides.
	Messages    int64         `json:"messages"`
	Duration    time.Duration `json:"duration_ns"`
	ConsumeRate float64       `json:"consume_rate"`
	Heartbeat   time.Duration `json:"heartbeat_ns"`
	// ClockCorrection makes a sender stamp its send times in its
	// receiver's clock (see clockCorrector).
	ClockCorrection bool `json:"clock_correction"`
}

func (p *agentPlan) config() transportConfig {
	return transportConfig{
		size: p.Size, duration: p.Duration, rate: p.Rate, channels: p.Channels,
		connections: p.Connections, consumeRate: p.ConsumeRate,
	}
}

func (p *agentPlan) validate() error {
	if p.Version != ctlVersion {
		return fmt.Errorf("plan: control protocol version %d, this agent speaks %d", p.Version, ctlVersion)
	}
	if p.Messages < 0 {
		return fmt.Errorf("plan: messages must not be negative, got %d", p.Messages)
	}
	if p.Heartbeat <= 0 {
		return fmt.Errorf("plan: heartbeat must be positive, got %v", p.Heartbeat)
	}
	cfg := p.config()
	if p.Messages > 0 && cfg.duration == 0 {
		cfg.duration = time.Hour // bounded by Messages
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// agentReady answers a plan.
type agentReady struct {
	// DataAddr is where the agent's node accepts senders.
	DataAddr string `json:"data_addr"`
	// Epoch is the epoch of the channels the agent will send on; receivers
	// keep their findings by it.
	Epoch   uint64        `json:"epoch"`
	Machine bench.Machine `json:"machine"`
}

// agentProgress is a heartbeat with the agent's counters so far.
type agentProgress struct {
	Sent      int64 `json:"sent"`      // messages written by this agent's node
	Delivered int64 `json:"delivered"` // messages this agent received exactly once and in order
}

// agentDone reports a sender's end: every message sent was acknowledged, or
// Err says why not.
type agentDone struct {
	Sent    int64         `json:"sent"`
	Elapsed time.Duration `json:"elapsed_ns"` // from the start time to the last acknowledgement
	Late    time.Duration `json:"late_ns"`    // how long after the start time sending began
	Resent  int64         `json:"resent"`
	Err     string        `json:"error,omitempty"`
	// Clock is how the sender corrected its send times for the
	// receiver's clock.
	Clock *bench.ClockCorrection `json:"clock,omitempty"`
}

// agentFindings answers a collect: what the agent received from each
// sender epoch asked for, and what its node wrote.
type agentFindings struct {
	BySender map[uint64]findings `json:"by_sender"`
	WireOut  int64               `json:"wire_bytes_out"`
	Clamped  int64               `json:"clamped"`
}

// ctlConn is one end of a control connection. send is safe for concurrent
// use; recv is not (one reader per connection).
type ctlConn struct {
	c  net.Conn
	r  *bufio.Reader
	mu sync.Mutex // serialises writes
}

func newCtlConn(c net.Conn) *ctlConn {
	return &ctlConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// ctlWriteTimeout bounds one control write: a peer that stops reading is
// as good as gone.
const ctlWriteTimeout = 10 * time.Second

func (cc *ctlConn) send(m ctlMsg) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	cc.mu.Lock()
	defer cc.mu.Unlock()
	_ = cc.c.SetWriteDeadline(time.Now().Add(ctlWriteTimeout))
	_, err = cc.c.Write(b)
	return err
}

// recv reads the next message, waiting at most timeout (0: no limit).
func (cc *ctlConn) recv(timeout time.Duration) (ctlMsg, error) {
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	_ = cc.c.SetReadDeadline(dl)
	line, err := readCtlLine(cc.r, maxCtlLine)
	if err != nil {
		return ctlMsg{}, err
	}
	var m ctlMsg
	if err := json.Unmarshal(line, &m); err != nil {
		return ctlMsg{}, fmt.Errorf("loadgen: malformed control line: %w", err)
	}
	if m.Type == "" {
		return ctlMsg{}, errors.New("loadgen: malformed control line: no type")
	}
	return m, nil
}

// readCtlLine reads one line of at most limit bytes, without its newline.
// The returned slice is the caller's.
func readCtlLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 {
			return nil, errCtlLineTooLong
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte{'\n'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// agent serves coordinators on a control listener, one run at a time.
type agent struct {
	ln         net.Listener
	dataListen string // "" : the address the coordinator reached us at, any port
	stderr     io.Writer
	opts       []transport.Option // authentication and encryption of the data node
	key        []byte             // authenticates coordinators; nil: anyone may coordinate
	workDir    string             // engine workers' directories, <workDir>/<job>/node<k>
	nodeArgs   []string           // the transport flags engine workers get
	workers    workers

	wg     sync.WaitGroup
	closed chan struct{}
	mu     struct {
		sync.Mutex
		busy  string // the coordinator whose run is under way
		conns map[net.Conn]struct{}
	}
}

func newAgent(ln net.Listener, dataListen string, stderr io.Writer) *agent {
	a := &agent{ln: ln, dataListen: dataListen, stderr: stderr, closed: make(chan struct{})}
	a.mu.conns = map[net.Conn]struct{}{}
	a.workers.procs = map[string]*os.Process{}
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
		a.mu.conns[c] = struct{}{}
		a.mu.Unlock()
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
	cc := newCtlConn(c)
	if err := ctlAuthenticate(cc, a.key, false); err != nil {
		a.logf("refused coordinator %s: %v", who, err)
		return
	}
	first, err := cc.recv(0)
	if err != nil {
		a.logf("coordinator %s went away: %v", who, err)
		return
	}
	switch first.Type {
	case msgWorker, msgKill:
		// Engine workers are not runs: an agent hosts any number of them,
		// beside a run.
		if first.Worker == nil {
			err = errors.New("worker: missing plan")
		} else if first.Type == msgWorker {
			err = a.runWorker(cc, first.Worker, c.LocalAddr())
		} else {
			err = a.killWorker(cc, first.Worker)
		}
		if err != nil {
			a.logf("%s from %s failed: %v", first.Type, who, err)
			_ = cc.send(ctlMsg{Type: msgError, Error: err.Error()})
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
		_ = cc.send(ctlMsg{Type: msgError, Error: "agent busy with a run from coordinator " + busy})
		return
	}
	defer a.release(who)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan ctlMsg)
	readErr := make(chan error, 1)
	go func() {
		defer cancel()
		for {
			m, err := cc.recv(0)
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
			why = "the coordinator went away: " + e.Error()
		default:
		}
		a.logf("run from %s aborted: %s", who, why)
	default:
		a.logf("run from %s failed: %v", who, err)
		_ = cc.send(ctlMsg{Type: msgError, Error: err.Error()})
	}
}

// agentRun is one run on an agent: its node, its part as a receiver (serve's
// server) and as a sender.
type agentRun struct {
	a     *agent
	who   string // the coordinator
	cc    *ctlConn
	msgs  <-chan ctlMsg
	first *ctlMsg // the message that came before the run began

	plan    agentPlan
	to      string
	node    *transport.Node
	srv     *server
	senders []*transport.Sender
	clock   *clockCorrector // nil: no correction
	hbStop  chan struct{}
	hbDone  chan struct{}
}

// next waits for the next control message, which must be of type want.
func (r *agentRun) next(ctx context.Context, want string) (ctlMsg, error) {
	if m := r.first; m != nil {
		r.first = nil
		if m.Type != want {
			return *m, fmt.Errorf("%w %q, want %q", errCtlUnexpected, m.Type, want)
		}
		return *m, nil
	}
	select {
	case m := <-r.msgs:
		if m.Type != want {
			return m, fmt.Errorf("%w %q, want %q", errCtlUnexpected, m.Type, want)
		}
		return m, nil
	case <-ctx.Done():
		return ctlMsg{}, ctx.Err()
	}
}

func (r *agentRun) run(ctx context.Context, ctlLocal net.Addr) error {
	m, err := r.next(ctx, msgPlan)
	if err != nil {
		return err
	}
	if m.Plan == nil {
		return errors.New("plan: missing")
	}
	if err := m.Plan.validate(); err != nil {
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
	r.srv = &server{rec: bench.NewRecorder(), sessions: map[uint64]*session{}, stderr: r.a.stderr}
	if r.plan.ConsumeRate > 0 {
		r.srv.lim = &limiter{rate: r.plan.ConsumeRate}
	}
	r.node, err = transport.NewNode(append([]transport.Option{transport.WithListen(listen),
		transport.WithConnectionsPerPeer(r.plan.Connections), transport.WithPingInterval(clockPing)}, r.a.opts...)...)
	if err != nil {
		return err
	}
	r.srv.node = r.node
	defer metricsHub.addNode(r.node, "agent")()
	r.node.HandleAll(r.srv.handler)
	r.startHeartbeat()
	if err := r.cc.send(ctlMsg{Type: msgReady, Ready: &agentReady{
		DataAddr: r.node.Addr(), Epoch: r.node.Epoch(), Machine: bench.DetectMachine(),
	}}); err != nil {
		return err
	}

	if m, err = r.next(ctx, msgConnect); err != nil {
		return err
	}
	if r.to = m.To; r.to != "" {
		if err := r.connect(ctx, m.To, m.Index); err != nil {
			return err
		}
	}
	if err := r.cc.send(ctlMsg{Type: msgConnected}); err != nil {
		return err
	}

	if m, err = r.next(ctx, msgStart); err != nil {
		return err
	}
	if len(r.senders) > 0 {
		r.a.logf("sending to %s from %s", r.to, time.Unix(0, m.StartAt).Format(time.RFC3339Nano))
		done := r.send(ctx, m.StartAt)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := r.cc.send(ctlMsg{Type: msgDone, Done: &done}); err != nil {
			return err
		}
	}

	if m, err = r.next(ctx, msgCollect); err != nil {
		return err
	}
	f := agentFindings{BySender: map[uint64]findings{}, Clamped: r.srv.rec.Clamped()}
	for _, e := range m.Epochs {
		f.BySender[e] = r.srv.session(e).findings()
	}
	f.WireOut = int64(r.node.Stats().Totals().WireOut)
	if err := r.cc.send(ctlMsg{Type: msgFindings, Findings: &f}); err != nil {
		return err
	}
	if _, err = r.next(ctx, msgBye); err != nil {
		return err
	}
	// Free the agent before answering, so that the coordinator's next run,
	// which may start the moment this one returns, finds it idle.
	r.shutdown()
	r.a.release(r.who)
	return r.cc.send(ctlMsg{Type: msgBye})
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
func (r *agentRun) send(ctx context.Context, startAt int64) (done agentDone) {
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
	cfg := r.plan.config()
	cfg.shift = r.clock.shiftOf()
	var err error
	switch {
	case r.plan.Messages > 0:
		done.Sent, err = sendCount(ctx, cfg, r.plan.Messages, r.senders)
	case cfg.rate > 0:
		var res bench.Result
		res, err = sendFixedRate(ctx, cfg, r.senders)
		done.Sent = res.Sent
	default:
		done.Sent, err = sendMaxRate(ctx, cfg, r.senders)
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

// sendCount sends count messages over senders in turn, at cfg.rate or as
// fast as they take them, like loadgen send.
func sendCount(ctx context.Context, cfg transportConfig, count int64, senders []*transport.Sender) (int64, error) {
	src := newPayloadSource(cfg.size, len(senders), cfg.shift)
	target := func(ctx context.Context, i, intended int64) error {
		ch := int(i % int64(len(senders)))
		if err := senders[ch].Send(ctx, intended, src.next(ch, intended)); err != nil {
			return err
		}
		src.seqs[ch]++
		return nil
	}
	var res bench.Result
	var err error
	if cfg.rate > 0 {
		res, err = bench.FixedRate{Rate: cfg.rate, Count: count}.Run(ctx, target)
	} else {
		res, err = bench.MaxRate{Count: count}.Run(ctx, target)
	}
	return res.Sent, err
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
			p := agentProgress{
				Sent:      int64(r.node.Stats().Totals().MessagesOut),
				Delivered: r.srv.delivered.Load(),
			}
			if r.cc.send(ctlMsg{Type: msgProgress, Progress: &p}) != nil {
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

// findings is what the session received, with its latency histogram
// exported for another process to merge. (serve's onControl builds the same
// answer for loadgen send.)
func (ss *session) findings() findings {
	return findings{
		Delivered: ss.delivered.Load(), Duplicates: ss.dups.Load(), Gaps: ss.gaps.Load(),
		Bytes: ss.nbytes.Load(), Latency: ss.rec.Snapshot().Export(),
	}
}

func agentCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("agent", "Waits for 'loadgen coordinate' on a control port and runs its part of a\n"+
		"scenario across hosts: receives like 'loadgen serve', sends like 'loadgen send'.\n"+
		"Runs until interrupted, one coordinator at a time.", stderr)
	listen := fs.String("listen", "127.0.0.1:7500", "control address to listen on for coordinators")
	dataListen := fs.String("data-listen", "", "data address to receive on, and the host engine workers listen on (default: the address the coordinator reached, any port)")
	workDir := fs.String("data-dir", "", "directory for the logs and checkpoints of the engine workers this agent runs, kept for a coordinator that resumes its job (default: a temporary one, removed when the agent stops)")
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
