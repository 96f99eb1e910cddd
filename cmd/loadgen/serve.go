package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/load"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
	"github.com/sluicehq/sluice/window"
)

// The tasks of serve and send: data flows from (0, i) to (1, i); at the end
// send asks serve for its findings on the control channel, and serve
// answers on the reply channel.
var (
	controlSource = taskid.ID{Processor: 0, Index: 1<<32 - 1}
	controlTarget = taskid.ID{Processor: 1, Index: 1<<32 - 1}
	replySource   = taskid.ID{Processor: 1, Index: 1<<32 - 2}
	replyTarget   = taskid.ID{Processor: 0, Index: 1<<32 - 2}
)

// reportRequest is what send sends on the control channel when it is done.
type reportRequest struct {
	Epoch   uint64 `json:"epoch"`
	ReplyTo string `json:"reply_to"`
}

// session is what serve learned from one send run, told apart by epoch.
type session struct {
	rec                                      *bench.Recorder
	delivered, dups, gaps, malformed, nbytes atomic.Int64
	mu                                       sync.Mutex
	chans                                    map[taskid.ID]*bench.Delivery // by source task
	last                                     atomic.Int64                  // bench.Now() of its latest data
}

// maxSessions bounds the runs serve keeps findings for at once, each with
// a latency recorder of about a megabyte. A run's session ends when its
// report is answered; one whose send never asks (it was killed) is
// forgotten, the least recently active first, once a new run would make
// more than this.
const maxSessions = 64

// maxReplies bounds the answers to report requests on their way at once,
// each from a node of its own; a request beyond it is refused.
const maxReplies = 8

type server struct {
	node      *transport.Node
	delivered atomic.Int64
	rec       *bench.Recorder
	lim       *load.Limiter
	stderr    io.Writer
	// replyOpts are the options of the node each answer to a report
	// request is sent from (the serving node's key, TLS and buffers).
	replyOpts []transport.Option
	// replyTimeout bounds each answer; 0 means replyTimeout.
	replyTimeout time.Duration

	replying atomic.Int32 // answers on their way

	mu       sync.Mutex
	sessions map[uint64]*session
	runs     int // sessions ever started
}

// session returns run epoch's session, starting it if it is new.
func (s *server) session(epoch uint64) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[epoch]
	if !ok {
		if len(s.sessions) >= maxSessions {
			s.forgetStalestLocked()
		}
		ss = &session{rec: bench.NewRecorder(), chans: map[taskid.ID]*bench.Delivery{}}
		ss.last.Store(bench.Now())
		s.sessions[epoch] = ss
		s.runs++
	}
	return ss
}

// sessionIfAny returns run epoch's session, or nil if it sent nothing (or
// was forgotten).
func (s *server) sessionIfAny(epoch uint64) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[epoch]
}

// endSession returns run epoch's session (an empty one if the run sent
// nothing) and forgets it: its send asks for the findings once serve has
// consumed everything it sent.
func (s *server) endSession(epoch uint64) *session {
	ss := s.session(epoch)
	s.mu.Lock()
	delete(s.sessions, epoch)
	s.mu.Unlock()
	return ss
}

// forgetStalestLocked drops the session whose data came longest ago.
func (s *server) forgetStalestLocked() {
	var stalest uint64
	oldest := int64(math.MaxInt64)
	for e, ss := range s.sessions {
		if t := ss.last.Load(); t < oldest {
			stalest, oldest = e, t
		}
	}
	delete(s.sessions, stalest)
	fmt.Fprintf(s.stderr, "loadgen serve: forgetting run %x, which sent nothing for %v and never asked for its findings: more than %d runs at once\n",
		stalest, time.Duration(bench.Now()-oldest).Round(time.Millisecond), maxSessions)
}

func (s *server) handler(target taskid.ID) transport.Handler {
	if target == controlTarget {
		return s.onControl
	}
	return func(ch taskid.Channel, _ uint64, msgs []transport.Message) {
		s.lim.Wait(len(msgs))
		ss := s.session(ch.Epoch)
		now := bench.Now()
		ss.last.Store(now)
		ss.mu.Lock()
		d := ss.chans[ch.Source]
		if d == nil {
			d = &bench.Delivery{}
			ss.chans[ch.Source] = d
		}
		before := *d
		var n, bytes, malformed int64
		var lats latencyGroup
		for _, m := range msgs {
			if !bench.Filled(m.Payload) {
				malformed++ // no sequence number, or not loadgen's payload: neither delivered nor a gap
				continue
			}
			intended, seq := bench.Stamped(m.Payload)
			if !d.Observe(seq) {
				continue
			}
			n++
			bytes += int64(len(m.Payload))
			if lat, k := lats.add(now - intended); k > 0 {
				ss.rec.RecordN(lat, k)
				s.rec.RecordN(lat, k)
			}
		}
		ss.rec.RecordN(lats.lat, lats.n)
		s.rec.RecordN(lats.lat, lats.n)
		dups, gaps := d.Duplicates-before.Duplicates, d.Missing-before.Missing
		ss.mu.Unlock()
		ss.delivered.Add(n)
		ss.dups.Add(dups)
		ss.gaps.Add(gaps)
		ss.malformed.Add(malformed)
		ss.nbytes.Add(bytes)
		s.delivered.Add(n)
	}
}

// onControl answers a send run's request for its findings.
func (s *server) onControl(_ taskid.Channel, _ uint64, msgs []transport.Message) {
	for _, m := range msgs {
		req, err := parseReportRequest(m.Payload)
		if err != nil {
			fmt.Fprintf(s.stderr, "loadgen serve: %v\n", err)
			continue
		}
		if s.replying.Add(1) > maxReplies {
			s.replying.Add(-1)
			fmt.Fprintf(s.stderr, "loadgen serve: refusing the report request of run %x: %d answers are on their way already\n", req.Epoch, maxReplies)
			continue
		}
		ss := s.endSession(req.Epoch)
		f := ss.received()
		fmt.Fprintf(s.stderr, "loadgen serve: run %x done: %d delivered, %d duplicates, %d missing, %d malformed; p99 %.1f µs\n",
			req.Epoch, f.Delivered, f.Duplicates, f.Gaps, f.Malformed, ss.rec.Latency().P99)
		go func() {
			defer s.replying.Add(-1)
			s.reply(req, f)
		}()
	}
}

// The JSON messages loadgen's processes exchange outside the control
// protocol, each decoded with an error that says what was malformed.
var (
	// parseReportRequest decodes a report request, a control channel
	// message to serve.
	parseReportRequest = jsonDecoder[reportRequest]("a malformed report request")
	// parseFindings decodes serve's answer to a report request, a reply
	// channel message.
	parseFindings = jsonDecoder[control.Received]("malformed findings")
	// parseSideSpec decodes a line of a bench host's requests.
	parseSideSpec = jsonDecoder[sideSpec]("bench: a malformed side request")
	// parseSideReply decodes a line of a bench host's answers.
	parseSideReply = jsonDecoder[sideReply]("a malformed answer")
)

// jsonDecoder returns a function that decodes a T from JSON, its error
// beginning with what.
func jsonDecoder[T any](what string) func([]byte) (T, error) {
	return func(b []byte) (T, error) {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			var zero T
			return zero, fmt.Errorf("%s: %w", what, err)
		}
		return v, nil
	}
}

func (s *server) reply(req reportRequest, f control.Received) {
	b, err := json.Marshal(f)
	if err == nil {
		err = s.sendReply(req, b)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "loadgen serve: answering %s: %v\n", req.ReplyTo, err)
	}
}

// replyTimeout is how long serve tries to deliver an answer.
const replyTimeout = 10 * time.Second

// sendReply delivers an answer to req from a node of its own, aborted once
// the answer is acknowledged or its time is up. The serving node does not
// send it: a peer of a node stays, redialling its address, for as long as
// the node lives, and anyone who can send a report request names that
// address.
func (s *server) sendReply(req reportRequest, b []byte) error {
	timeout := s.replyTimeout
	if timeout == 0 {
		timeout = replyTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	n, err := transport.NewNode(s.replyOpts...)
	if err != nil {
		return err
	}
	defer n.Abort()
	p, err := n.Peer(req.ReplyTo)
	if err != nil {
		return err
	}
	snd, err := p.OpenSenderEpoch(ctx, replySource, replyTarget, req.Epoch)
	if err != nil {
		return err
	}
	defer snd.Close()
	if err := snd.Send(ctx, 0, b); err != nil {
		return err
	}
	return snd.Flush(ctx)
}

// newServer starts serve's node on listen, with opts, consuming at most
// consume messages per second (0: no limit), inline or on the targets'
// goroutines. Aborting s.node stops it.
func newServer(listen string, opts []transport.Option, consume float64, inline bool, stderr io.Writer) (*server, error) {
	s := &server{rec: bench.NewRecorder(), sessions: map[uint64]*session{}, stderr: stderr, replyOpts: opts}
	s.lim = load.NewLimiter(consume)
	node, err := transport.NewNode(append(opts[:len(opts):len(opts)], transport.WithListen(listen))...)
	if err != nil {
		return nil, err
	}
	s.node = node
	if inline {
		node.HandleAllInline(s.handler)
	} else {
		node.HandleAll(s.handler)
	}
	return s, nil
}

func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", "Receives from 'loadgen send' until interrupted, checking that every message\n"+
		"arrives exactly once and in order, and tells each sender what it found.", stderr)
	listen := fs.String("listen", "127.0.0.1:7400", "address to listen on")
	consume := fs.Float64("consume-rate", 0, "messages per second consumed at most; 0: no limit")
	delivery := fs.String("delivery", "auto", deliveryUsage)
	var sec nodeFlags
	sec.register(fs)
	sec.registerMetrics(fs)
	sec.registerClockOffset(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkDelivery(*delivery, *consume); err != nil {
		return err
	}
	if err := sec.startMetrics(ctx, stderr); err != nil {
		return err
	}
	secOpts, err := sec.options()
	if err != nil {
		return err
	}
	s, err := newServer(*listen, secOpts, *consume, inlineDelivery(*delivery, *consume), stderr)
	if err != nil {
		return err
	}
	node := s.node
	defer metricsHub.addNode(node, "serve")()
	fmt.Fprintf(stderr, "loadgen serve: listening on %s\n", node.Addr())
	prog := bench.NewProgress(stderr, &s.delivered, s.rec)
	prog.Start()
	<-ctx.Done()
	prog.Stop()
	node.Abort()
	s.mu.Lock()
	runs := s.runs
	s.mu.Unlock()
	fmt.Fprintf(stdout, "loadgen serve: %d messages delivered in %d run(s)\n", s.delivered.Load(), runs)
	return nil
}

func sendCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("send", "Sends to a 'loadgen serve' and waits until it has consumed and acknowledged\n"+
		"every message; the report carries the one-way latency serve measured. Interrupted\n"+
		"(Ctrl-C), it reports what it sent once serve confirmed it (interrupt again to stop\n"+
		"waiting) and fails (exit status 1).", stderr)
	to := fs.String("to", "127.0.0.1:7400", "address of the loadgen serve")
	messages := fs.Int64("messages", 1_000_000, "messages to send")
	replyListen := fs.String("reply-listen", "", "address for serve's answer (default: this host's address towards --to, any port)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up when serve has not confirmed everything this long after the last send, or when the connection to serve has been down this long")
	correct := fs.Bool("clock-correction", true, "stamp send times in serve's clock, estimated from the transport's PING round trips, so that the one-way latency serve measures does not depend on the hosts' clocks agreeing (the report states the offset and the error bound); false trusts the clocks as they are")
	var out outputFlags
	out.register(fs)
	var tc transportConfig
	tc.register(fs)
	var sec nodeFlags
	sec.register(fs)
	sec.registerMetrics(fs)
	sec.registerClockOffset(fs)
	hideFlags(fs, "duration", "consume-rate", "delivery", "seed", "faults") // refused below
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := sec.startMetrics(ctx, stderr); err != nil {
		return err
	}
	secOpts, err := sec.options()
	if err != nil {
		return err
	}
	if *messages < 1 {
		return fmt.Errorf("--messages must be >= 1, got %d", *messages)
	}
	if *timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, got %v", *timeout)
	}
	// The transport flags send shares with run that mean nothing here are
	// refused rather than ignored.
	var ignored error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "duration":
			ignored = errors.New("send: --duration is for 'loadgen run'; send is bounded by --messages")
		case "consume-rate", "delivery":
			ignored = fmt.Errorf("send: --%s is for the receiving side: give it to 'loadgen serve'", f.Name)
		case "seed":
			ignored = errors.New("send: --seed seeds --faults, which send does not take")
		}
	})
	if ignored != nil {
		return ignored
	}
	tc.duration = time.Hour // bounded by --messages
	if err := tc.validate(); err != nil {
		return err
	}
	if tc.faults != "" {
		return errors.New("send: --faults is for 'loadgen run'; inject faults into a local run instead")
	}
	if err := out.check(); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	reply := *replyListen
	if reply == "" {
		host, err := localAddrToward(*to)
		if err != nil {
			return err
		}
		reply = net.JoinHostPort(host, "0")
	}
	node, err := transport.NewNode(append(secOpts, transport.WithListen(reply), transport.WithConnectionsPerPeer(tc.connections),
		transport.WithPingInterval(clockPing))...)
	if err != nil {
		return err
	}
	defer node.Abort()
	defer metricsHub.addNode(node, "send")()
	answer := make(chan control.Received, 1)
	if err := node.Handle(replyTarget, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			if f, err := parseFindings(m.Payload); err == nil {
				select {
				case answer <- f:
				default:
				}
			}
		}
	}); err != nil {
		return err
	}
	peer, err := node.Peer(*to)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = peer.WaitConnected(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("send: is 'loadgen serve' running at %s? %w", *to, err)
	}
	var clock *clockCorrector
	if *correct {
		if clock, err = startClockCorrection(ctx, peer); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		tc.shift = clock.shiftOf()
	}
	senders := make([]*transport.Sender, tc.channels)
	for i := range senders {
		if senders[i], err = peer.OpenSender(ctx, taskid.ID{Processor: 0, Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i)}); err != nil {
			return err
		}
	}
	cfg := tc.asMap()
	// What serve decides (how it delivers and consumes) and what send refuses
	// (a duration, faults) is not this run's to report.
	for _, k := range []string{"duration", "consume_rate", "delivery", "faults", "seed"} {
		delete(cfg, k)
	}
	cfg["messages"], cfg["to"] = *messages, *to
	report := bench.NewReport("send", cfg)
	var confirmed atomic.Int64
	prog := bench.NewProgress(stderr, &confirmed, nil)
	start := time.Now()
	prog.Start()
	lc := tc.loadConfig()
	lc.Sent = &confirmed
	sctx, stopSending := context.WithCancelCause(ctx)
	watched := watchPeer(sctx, peer, *timeout, stopSending)
	sent, err := load.Count(sctx, lc, *messages, senders)
	stopSending(nil)
	<-watched
	sendEnd := time.Since(start)
	// Interrupted (Ctrl-C): what was sent is still confirmed and reported,
	// waiting for serve on abortOf(ctx), which a second interrupt ends.
	interrupted := err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		prog.Stop()
		if cause := context.Cause(sctx); ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}
	wait := ctx
	if interrupted {
		wait = abortOf(ctx)
		fmt.Fprintln(stderr, "loadgen send: interrupted; waiting for serve to confirm what was sent (interrupt again to stop waiting)")
	}
	dctx, cancel := context.WithTimeout(wait, *timeout)
	defer cancel()
	for _, s := range senders {
		if err := s.Flush(dctx); err != nil {
			prog.Stop()
			if interrupted && wait.Err() != nil {
				return fmt.Errorf("send: %w after %d messages sent in %.1f s; a second interrupt ended the wait for serve to confirm them, so there is no report",
					errInterrupted, sent, sendEnd.Seconds())
			}
			return fmt.Errorf("send: serve did not confirm everything within %v: %w", *timeout, err)
		}
	}
	elapsed := time.Since(start)
	prog.Stop()
	report.Clock = clock.finish()
	ctl, err := peer.OpenSender(dctx, controlSource, controlTarget)
	if err != nil {
		return err
	}
	req, _ := json.Marshal(reportRequest{Epoch: node.Epoch(), ReplyTo: node.Addr()})
	if err := ctl.Send(dctx, 0, req); err != nil {
		return err
	}
	var f control.Received
	select {
	case f = <-answer:
	case <-dctx.Done():
		return fmt.Errorf("send: serve confirmed every message but did not report its findings: %w", dctx.Err())
	}
	rec := bench.NewRecorder()
	if f.Latency != nil {
		h, err := importLatency(f.Latency)
		if err != nil {
			return fmt.Errorf("send: the findings 'loadgen serve' at %s reported are unusable: %w", *to, err)
		}
		rec.MergeHistogram(h)
	}
	st := node.Stats()
	report.DurationS = elapsed.Seconds()
	report.MessagesSent = sent
	report.MessagesDelivered = f.Delivered
	report.Duplicates = f.Duplicates
	report.Lost = max(sent-f.Delivered, f.Gaps)
	report.WireBytes = int64(st.Totals().WireOut)
	for _, c := range node.ChannelStats() {
		report.Resent += int64(c.Resent)
	}
	report.Finish(rec)
	report.ThroughputBytesPerS = float64(f.Bytes) / elapsed.Seconds()
	ok := report.Duplicates == 0 && report.Lost == 0 && report.MessagesDelivered == sent
	report.ExactlyOnce = &ok
	report.Notes = append(report.Notes, "latency is measured by serve against the send times in the payloads; "+report.Clock.String(),
		"wire_bytes counts what send wrote; serve's acknowledgements are not included")
	if f.Malformed > 0 {
		report.Notes = append(report.Notes, "serve says "+malformedNote(f.Malformed))
	}
	if interrupted {
		report.Failures = append(report.Failures, fmt.Sprintf("interrupted after %.1f s and %d of the %d messages asked for: what it measured is a shorter run's",
			sendEnd.Seconds(), sent, *messages))
	}
	return finishReport(report, rec, out, stdout, stderr)
}

// localAddrToward returns this host's address on the route to addr.
func localAddrToward(addr string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", fmt.Errorf("send: finding this host's address toward %s: %w", addr, err)
	}
	defer c.Close()
	host, _, err := net.SplitHostPort(c.LocalAddr().String())
	return host, err
}

// watchPeer ends sending (stop, with an error that says why) once the
// connection to serve has been down for timeout: the producers of a serve
// that died would otherwise wait for its credit for ever. It returns a
// channel closed when it has stopped watching, once ctx ends.
func watchPeer(ctx context.Context, peer *transport.Peer, timeout time.Duration, stop context.CancelCauseFunc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if peer.Connected() {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			err := peer.WaitConnected(wctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				stop(fmt.Errorf("send: lost its connection to serve at %s for %v (--timeout) while sending: %w", peer.Addr(), timeout, err))
				return
			}
		}
	}()
	return done
}

// nodeFlags are the flags of the commands that open transport nodes:
// --key-file, --tls, --socket-buffer and --peer-budget.
type nodeFlags struct {
	keyFile      string
	tls          bool
	socketBuffer int
	peerBudget   int
	metrics      string // --metrics, for the commands that registerMetrics
	// clockOffset is --clock-offset, for the commands that
	// registerClockOffset: a wrong clock, for tests.
	clockOffset time.Duration
}

// registerClockOffset adds --clock-offset, for the commands that stamp or
// measure latencies across hosts (serve, send, agent).
func (s *nodeFlags) registerClockOffset(fs *flag.FlagSet) {
	fs.DurationVar(&s.clockOffset, "clock-offset", 0, "for tests only: run with this process's clock (its latency stamps and its node's clock) off by this much, as on a host whose clock is wrong, to check the correction of latencies across hosts")
}

// registerMetrics adds --metrics, for the commands whose nodes it serves
// (not passed on to child processes, which would all want its port).
func (s *nodeFlags) registerMetrics(fs *flag.FlagSet) {
	fs.StringVar(&s.metrics, "metrics", "", "serve this process's counters on ADDR (host:port) at /metrics, in the Prometheus text format, and Go's profiles at /debug/pprof/; 'loadgen stat --node ADDR' shows them live")
}

func (s *nodeFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&s.peerBudget, "peer-budget", transport.DefaultPeerBudget, "memory the windows of all channels to one peer may take, in bytes (payloads not yet acknowledged and the room their rings have grown for); a producer that outruns the connection fills it, so a smaller one bounds memory and queueing tighter, and a larger one buys queueing, not throughput")
	fs.IntVar(&s.socketBuffer, "socket-buffer", transport.DefaultSocketBuffer, "kernel send and receive buffer of each connection, in bytes (SO_SNDBUF, SO_RCVBUF); it caps a connection at this many bytes per round trip, so raise it for a long fat link; 0: the kernel's autotuning")
	fs.StringVar(&s.keyFile, "key-file", "", "file holding the pre-shared key (at least 16 bytes; surrounding whitespace is trimmed) that every peer must prove it holds; all peers need the same file")
	fs.BoolVar(&s.tls, "tls", false, "encrypt connections with TLS 1.3 (an ephemeral self-signed certificate; peers are authenticated by --key-file, which is required)")
}

// args returns the flags that give a child process the same settings.
func (s *nodeFlags) args() []string {
	var a []string
	if s.keyFile != "" {
		a = append(a, "--key-file", s.keyFile)
	}
	if s.tls {
		a = append(a, "--tls")
	}
	if s.socketBuffer != transport.DefaultSocketBuffer {
		a = append(a, "--socket-buffer", strconv.Itoa(s.socketBuffer))
	}
	if s.peerBudget != transport.DefaultPeerBudget {
		a = append(a, "--peer-budget", strconv.Itoa(s.peerBudget))
	}
	return a
}

// key reads the pre-shared key, or returns nil without --key-file. The
// caller owns the slice and should clear it when done. Errors name the file,
// never its contents.
func (s *nodeFlags) key() ([]byte, error) {
	if s.keyFile == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	key := bytes.TrimSpace(raw)
	switch {
	case len(key) == 0:
		return nil, fmt.Errorf("--key-file %s is empty", s.keyFile)
	case len(key) < minKeyLen:
		clear(raw)
		return nil, fmt.Errorf("--key-file %s holds %d bytes, at least %d are needed", s.keyFile, len(key), minKeyLen)
	}
	out := append([]byte(nil), key...)
	clear(raw)
	return out, nil
}

// options reads the key file and builds the transport options. Errors name
// the file, never its contents.
func (s *nodeFlags) options() ([]transport.Option, error) {
	if s.socketBuffer < 0 {
		return nil, fmt.Errorf("--socket-buffer must be >= 0 bytes, got %d", s.socketBuffer)
	}
	// The transport refuses such a budget too, but without naming the flag.
	if least := window.DefaultConfig().MaxFootprint(); s.peerBudget < least {
		return nil, fmt.Errorf("--peer-budget must be at least one full window's memory, %d bytes; got %d", least, s.peerBudget)
	}
	opts := []transport.Option{transport.WithSocketBuffers(s.socketBuffer), transport.WithPeerBudget(s.peerBudget)}
	if s.clockOffset != 0 {
		bench.SetClockOffset(s.clockOffset)
		opts = append(opts, transport.WithClockOffset(s.clockOffset))
	}
	key, err := s.key()
	if err != nil {
		return nil, err
	}
	if key != nil {
		opts = append(opts, transport.WithKey(key))
		clear(key)
	}
	if s.tls {
		if s.keyFile == "" {
			return nil, errors.New("--tls needs --key-file: the certificate is self-signed and not verified, so the key is what authenticates the peer")
		}
		cfg, err := ephemeralTLS()
		if err != nil {
			return nil, err
		}
		opts = append(opts, transport.WithTLS(cfg))
	}
	return opts, nil
}

// minKeyLen is the transport's shortest accepted key.
const minKeyLen = 16

// ephemeralTLS returns a TLS configuration with a fresh self-signed
// certificate that does not verify the peer's: encryption only, the
// pre-shared key authenticates.
func ephemeralTLS() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "loadgen"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("--tls: creating a certificate: %w", err)
	}
	return &tls.Config{
		Certificates:       []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		InsecureSkipVerify: true, // the pre-shared key authenticates the peer
	}, nil
}
