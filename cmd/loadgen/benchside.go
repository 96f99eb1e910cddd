package main

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
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// The far ends of loadgen bench's cases. Each case has a sending half, in
// the bench process, and a receiving half (a side): a TCP reader, a TCP
// echo, a receiving transport node or an echoing one. A host starts one
// side at a time: in the bench process itself (one process), or in a child
// process, the same binary re-executed as 'loadgen benchpeer', which reads a
// sideSpec per line on its stdin and answers each line with one JSON line on
// its stdout (two processes).

// Side kinds.
const (
	sideTCPPacked  = "tcp-packed"  // bench.ReadPacked: the throughput ceiling's reader
	sideTCPStamped = "tcp-stamped" // bench.ReadStamped: the fixed-rate baseline's reader
	sideTCPFanIn   = "tcp-fan-in"  // sideSpec.Count connections, each read by bench.ReadStamped
	sideTCPEcho    = "tcp-echo"    // bench.Echo: the ping-pong baseline's echo
	sideTCPEchoHO  = "tcp-echo-ho" // bench.EchoHandOff: the same with a hand-off between goroutines
	sideNodeSink   = "node-sink"   // a node whose task (1, 0) checks and records what arrives, inline
	sideNodeSinks  = "node-sinks"  // sideSpec.Count such nodes, addresses separated by commas
	sideNodeEcho   = "node-echo"   // a node whose task (1, 0) sends what arrives back to (0, 0) at ReplyTo
)

// Backends, as bench names them.
const (
	backendDefault = "default"
	backendNet     = "net"
)

// The ping-pong tasks: pings go from pingTask to echoTask, pongs back.
var (
	pingTask = taskid.ID{Processor: 0, Index: 0}
	echoTask = taskid.ID{Processor: 1, Index: 0}
)

// sideSpec asks a host for a side.
type sideSpec struct {
	Op      string `json:"op"` // "start" or "finish"
	Kind    string `json:"kind,omitempty"`
	Backend string `json:"backend,omitempty"`
	Size    int    `json:"size,omitempty"`
	// ReplyTo is the pinging node's address, for node-echo.
	ReplyTo string `json:"reply_to,omitempty"`
	// Count is how many nodes a node-sinks side starts.
	Count int `json:"count,omitempty"`
}

// sideReply is a host's answer: to "start" the side's address, to "finish"
// what the side found. PID is the process the side ran in.
type sideReply struct {
	Addr     string                 `json:"addr,omitempty"`
	PID      int                    `json:"pid"`
	Delivery bench.Delivery         `json:"delivery"`
	Latency  *hdrhistogram.Snapshot `json:"latency,omitempty"`
	Err      string                 `json:"err,omitempty"`
}

// side is a running receiving half.
type side interface {
	addr() string
	// finish waits until the side has seen the end of what was sent (EOF
	// for TCP; for nodes the sender has flushed before asking), stops it
	// and reports.
	finish(ctx context.Context) (bench.Delivery, *bench.Recorder, error)
	// abort stops the side without waiting for the end of the stream.
	abort()
}

// backendOptions returns the transport options of a backend name.
func backendOptions(name string) ([]transport.Option, error) {
	switch name {
	case backendDefault:
		return nil, nil
	case backendNet:
		return []transport.Option{transport.WithBackend(transport.BackendNet)}, nil
	}
	return nil, fmt.Errorf("bench: unknown backend %q (want %s or %s)", name, backendDefault, backendNet)
}

// listeningNode starts a node of backend be listening on a loopback port.
func listeningNode(be string) (*transport.Node, error) {
	opts, err := backendOptions(be)
	if err != nil {
		return nil, err
	}
	return transport.NewNode(append([]transport.Option{transport.WithListen("127.0.0.1:0")}, opts...)...)
}

// startSide starts the side spec asks for, in this process.
func startSide(ctx context.Context, spec sideSpec) (side, error) {
	if spec.Size < headerLen {
		return nil, fmt.Errorf("bench: message size %d is below %d", spec.Size, headerLen)
	}
	switch spec.Kind {
	case sideTCPPacked, sideTCPStamped, sideTCPEcho, sideTCPEchoHO:
		return startTCPSide(spec)
	case sideTCPFanIn:
		return startFanInSide(spec)
	case sideNodeSink, sideNodeSinks:
		return startSinkSide(spec)
	case sideNodeEcho:
		return startEchoSide(ctx, spec)
	}
	return nil, fmt.Errorf("bench: unknown side %q", spec.Kind)
}

// tcpSide accepts one connection and runs a baseline's receiving half on it.
type tcpSide struct {
	ln   net.Listener
	conn atomic.Pointer[net.Conn]
	rec  *bench.Recorder
	done chan tcpDone
}

type tcpDone struct {
	d   bench.Delivery
	err error
}

func startTCPSide(spec sideSpec) (*tcpSide, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &tcpSide{ln: ln, rec: bench.NewRecorder(), done: make(chan tcpDone, 1)}
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			s.done <- tcpDone{err: err}
			return
		}
		defer c.Close()
		s.conn.Store(&c)
		var r tcpDone
		switch spec.Kind {
		case sideTCPPacked:
			r.d, r.err = bench.ReadPacked(c, spec.Size)
		case sideTCPStamped:
			r.d, r.err = bench.ReadStamped(c, spec.Size, s.rec)
		case sideTCPEchoHO:
			r.err = bench.EchoHandOff(c, spec.Size)
		default:
			r.err = bench.Echo(c, spec.Size)
		}
		s.done <- r
	}()
	return s, nil
}

func (s *tcpSide) addr() string { return s.ln.Addr().String() }

func (s *tcpSide) abort() {
	s.ln.Close()
	if c := s.conn.Load(); c != nil {
		(*c).Close()
	}
}

func (s *tcpSide) finish(ctx context.Context) (bench.Delivery, *bench.Recorder, error) {
	select {
	case r := <-s.done:
		return r.d, s.rec, r.err
	case <-ctx.Done():
		s.abort()
		return bench.Delivery{}, nil, fmt.Errorf("bench: the TCP side did not see the end of the stream: %w", ctx.Err())
	}
}

// fanInSide accepts Count connections and reads each with
// bench.ReadStamped, all recording into one Recorder: plain TCP's
// fixed-rate baseline to many peers. Each connection numbers its messages
// from 0; the delivery is the sum of theirs.
type fanInSide struct {
	ln    net.Listener
	rec   *bench.Recorder
	mu    sync.Mutex
	conns []net.Conn
	done  chan tcpDone // one for each connection
	count int
}

func startFanInSide(spec sideSpec) (*fanInSide, error) {
	if spec.Count < 1 || spec.Count > maxSinks {
		return nil, fmt.Errorf("bench: %d TCP connections asked for, want 1 to %d", spec.Count, maxSinks)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &fanInSide{ln: ln, rec: bench.NewRecorder(), done: make(chan tcpDone, spec.Count), count: spec.Count}
	go func() {
		for range spec.Count {
			c, err := ln.Accept()
			if err != nil {
				s.done <- tcpDone{err: err}
				continue
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			go func() {
				defer c.Close()
				d, err := bench.ReadStamped(c, spec.Size, s.rec)
				s.done <- tcpDone{d: d, err: err}
			}()
		}
		ln.Close()
	}()
	return s, nil
}

func (s *fanInSide) addr() string { return s.ln.Addr().String() }

func (s *fanInSide) abort() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// finish waits for every connection's end of stream and sums what their
// readers found.
func (s *fanInSide) finish(ctx context.Context) (bench.Delivery, *bench.Recorder, error) {
	var sum bench.Delivery
	var errs []error
	for range s.count {
		select {
		case r := <-s.done:
			sum.Delivered += r.d.Delivered
			sum.Duplicates += r.d.Duplicates
			sum.Missing += r.d.Missing
			sum.LastNS = max(sum.LastNS, r.d.LastNS)
			errs = append(errs, r.err)
		case <-ctx.Done():
			s.abort()
			return bench.Delivery{}, nil, fmt.Errorf("bench: the TCP side did not see the end of every stream: %w", ctx.Err())
		}
	}
	return sum, s.rec, errors.Join(errs...)
}

// sinkSide is one node (node-sink) or several (node-sinks, one for each of
// the sending node's peers), whose task (1, 0) checks every message's
// sequence number and records its latency, inline on the connection's
// loop, as loadgen run --scenario transport does. Node i checks channel i
// of chk; its messages come from one sender.
type sinkSide struct {
	nodes []*transport.Node
	chk   *checker
	rec   *bench.Recorder
	last  atomic.Int64 // the latest delivery of any of the nodes
}

// maxSinks bounds a node-sinks side: each node is a listener and a loop's
// connection in the hosting process.
const maxSinks = 256

func startSinkSide(spec sideSpec) (*sinkSide, error) {
	count := 1
	if spec.Kind == sideNodeSinks {
		if spec.Count < 1 || spec.Count > maxSinks {
			return nil, fmt.Errorf("bench: %d receiving nodes asked for, want 1 to %d", spec.Count, maxSinks)
		}
		count = spec.Count
	}
	s := &sinkSide{chk: &checker{chans: make([]chanCheck, count)}, rec: bench.NewRecorder()}
	for i := range count {
		n, err := listeningNode(spec.Backend)
		if err != nil {
			s.abort()
			return nil, err
		}
		s.nodes = append(s.nodes, n)
		if err := n.HandleInline(echoTask, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
			now := bench.Now()
			s.chk.observe(i, msgs, now, s.rec)
			storeLater(&s.last, now)
		}); err != nil {
			s.abort()
			return nil, err
		}
	}
	return s, nil
}

// storeLater stores t in v unless v already holds a later time: nodes on
// different loops record their deliveries concurrently.
func storeLater(v *atomic.Int64, t int64) {
	for last := v.Load(); t > last && !v.CompareAndSwap(last, t); last = v.Load() {
	}
}

// addr is the nodes' addresses, separated by commas.
func (s *sinkSide) addr() string {
	addrs := make([]string, len(s.nodes))
	for i, n := range s.nodes {
		addrs[i] = n.Addr()
	}
	return strings.Join(addrs, ",")
}

func (s *sinkSide) abort() {
	for _, n := range s.nodes {
		n.Abort()
	}
}

func (s *sinkSide) finish(context.Context) (bench.Delivery, *bench.Recorder, error) {
	s.abort()
	if n := s.chk.malformed.Load(); n > 0 {
		return bench.Delivery{}, nil, fmt.Errorf("bench: %s", malformedNote(n))
	}
	return bench.Delivery{Delivered: s.chk.delivered.Load(), Duplicates: s.chk.duplicates.Load(),
		Missing: s.chk.gaps.Load(), LastNS: s.last.Load()}, s.rec, nil
}

// echoSide is a node whose task (1, 0) sends every message back to task
// (0, 0) of the pinging node, from the task's own goroutine (Node.Handle),
// as BenchmarkTransportPingPong does.
type echoSide struct {
	node   *transport.Node
	echoed atomic.Int64
	failed atomic.Pointer[error]
}

func startEchoSide(ctx context.Context, spec sideSpec) (*echoSide, error) {
	n, err := listeningNode(spec.Backend)
	if err != nil {
		return nil, err
	}
	s := &echoSide{node: n}
	p, err := n.Peer(spec.ReplyTo)
	if err != nil {
		n.Abort()
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	back, err := p.OpenSender(octx, echoTask, pingTask)
	if err != nil {
		n.Abort()
		return nil, fmt.Errorf("bench: opening the echo's channel back to %s: %w", spec.ReplyTo, err)
	}
	if err := n.Handle(echoTask, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			if err := back.Send(context.Background(), m.Ts, m.Payload); err != nil {
				s.failed.CompareAndSwap(nil, &err)
				return
			}
			s.echoed.Add(1)
		}
	}); err != nil {
		n.Abort()
		return nil, err
	}
	return s, nil
}

func (s *echoSide) addr() string { return s.node.Addr() }

func (s *echoSide) abort() { s.node.Abort() }

func (s *echoSide) finish(context.Context) (bench.Delivery, *bench.Recorder, error) {
	s.node.Abort()
	var err error
	if e := s.failed.Load(); e != nil {
		err = fmt.Errorf("bench: echoing: %w", *e)
	}
	return bench.Delivery{Delivered: s.echoed.Load()}, nil, err
}

// host runs sides one at a time and says which process they run in.
type host interface {
	// start starts a side and returns its address and the pid it runs in.
	start(ctx context.Context, spec sideSpec) (addr string, pid int, err error)
	// finish ends the side started last and returns what it found.
	finish(ctx context.Context) (sideReply, error)
	close() error
}

// localHost runs sides in this process.
type localHost struct{ cur side }

// start aborts a side a failed case left behind, then starts spec's.
func (h *localHost) start(ctx context.Context, spec sideSpec) (string, int, error) {
	_ = h.close()
	s, err := startSide(ctx, spec)
	if err != nil {
		return "", 0, err
	}
	h.cur = s
	return s.addr(), os.Getpid(), nil
}

func (h *localHost) finish(ctx context.Context) (sideReply, error) {
	if h.cur == nil {
		return sideReply{}, errors.New("bench: finish without a side")
	}
	s := h.cur
	h.cur = nil
	return sideReplyOf(s.finish(ctx))
}

func sideReplyOf(d bench.Delivery, rec *bench.Recorder, err error) (sideReply, error) {
	r := sideReply{PID: os.Getpid(), Delivery: d}
	if rec != nil {
		r.Latency = rec.Snapshot().Export()
	}
	return r, err
}

// close aborts a side that was started and not finished.
func (h *localHost) close() error {
	if h.cur != nil {
		h.cur.abort()
		h.cur = nil
	}
	return nil
}

// childHost runs sides in a child process: this binary re-executed as
// 'loadgen benchpeer', driven over its stdin and stdout.
type childHost struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
	// exited is closed when the child has exited; waitErr is then why.
	exited  chan struct{}
	waitErr error
}

func startChildHost(stderr io.Writer) (*childHost, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: finding this binary to start the second process: %w", err)
	}
	cmd := exec.Command(exe, "benchpeer")
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: starting %s benchpeer: %w", exe, err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	h := &childHost{cmd: cmd, in: in, out: sc, exited: make(chan struct{})}
	go func() {
		// Wait closes the stdout pipe only after the child exited, so
		// reading an answer may be underway; it then ends at EOF.
		h.waitErr = cmd.Wait()
		close(h.exited)
	}()
	return h, nil
}

// gone says why the child is no longer there, once it exited.
func (h *childHost) gone() error {
	<-h.exited
	if h.waitErr != nil {
		return fmt.Errorf("bench: the second process (pid %d) exited: %w", h.cmd.Process.Pid, h.waitErr)
	}
	return fmt.Errorf("bench: the second process (pid %d) exited", h.cmd.Process.Pid)
}

// watch returns a context that ends with ctx or when the child exits, so
// that a case whose far end died stops at once instead of at its timeout.
func (h *childHost) watch(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-h.exited:
			cancel(h.gone())
		case <-cctx.Done():
		}
	}()
	return cctx, func() { cancel(nil) }
}

// call sends one request and reads its answer, or gives up when ctx ends
// (killing the child, whose answer would never come).
func (h *childHost) call(ctx context.Context, spec sideSpec) (sideReply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(spec)
	if _, err := h.in.Write(append(b, '\n')); err != nil {
		return sideReply{}, fmt.Errorf("bench: the second process is gone: %w", err)
	}
	type answer struct {
		r   sideReply
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		var a answer
		switch {
		case h.out.Scan():
			a.err = json.Unmarshal(h.out.Bytes(), &a.r)
		case h.out.Err() != nil:
			a.err = h.out.Err()
		default:
			a.err = io.ErrUnexpectedEOF
		}
		ch <- a
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			select {
			case <-h.exited:
				return sideReply{}, h.gone()
			case <-time.After(time.Second):
			}
			return sideReply{}, fmt.Errorf("bench: reading the second process's answer: %w", a.err)
		}
		if a.r.Err != "" {
			return a.r, fmt.Errorf("bench: in the second process (pid %d): %s", a.r.PID, a.r.Err)
		}
		return a.r, nil
	case <-ctx.Done():
		_ = h.cmd.Process.Kill()
		return sideReply{}, fmt.Errorf("bench: the second process did not answer %s: %w", spec.Op, context.Cause(ctx))
	}
}

func (h *childHost) start(ctx context.Context, spec sideSpec) (string, int, error) {
	spec.Op = "start"
	r, err := h.call(ctx, spec)
	return r.Addr, r.PID, err
}

func (h *childHost) finish(ctx context.Context) (sideReply, error) {
	return h.call(ctx, sideSpec{Op: "finish"})
}

// close ends the child's stdin, which ends the child, and waits for it.
func (h *childHost) close() error {
	h.in.Close()
	<-h.exited
	return h.waitErr
}

// benchPeerCmd is the second process of loadgen bench: it starts and
// finishes sides as its stdin asks, one JSON line each, answering each on
// stdout, until stdin ends or ctx is done (SIGINT, SIGTERM).
func benchPeerCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("benchpeer", "The second process of 'loadgen bench' (internal): hosts the receiving side of each case,\n"+
		"driven by JSON lines on stdin.", stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	lines := make(chan []byte)
	scanErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
		scanErr <- sc.Err()
		close(lines)
	}()
	enc := json.NewEncoder(stdout)
	h := &localHost{}
	defer h.close()
	for {
		var line []byte
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-lines:
			if !ok {
				return <-scanErr
			}
			line = l
		}
		var spec sideSpec
		var r sideReply
		var err error
		if err = json.Unmarshal(line, &spec); err == nil {
			switch spec.Op {
			case "start":
				r.Addr, r.PID, err = h.start(ctx, spec)
			case "finish":
				fctx, cancel := context.WithTimeout(ctx, time.Minute)
				r, err = h.finish(fctx)
				cancel()
			default:
				err = fmt.Errorf("bench: unknown op %q", spec.Op)
			}
		}
		r.PID = os.Getpid()
		if err != nil {
			r.Err = err.Error()
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
}
