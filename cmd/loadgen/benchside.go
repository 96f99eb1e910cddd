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
	sideTCPPacked     = "tcp-packed"      // bench.ReadPacked: the throughput ceiling's reader
	sideTCPPackedAcks = "tcp-packed-acks" // bench.ReadPackedAcking: the same under flow control
	sideTCPStamped    = "tcp-stamped"     // bench.ReadStamped: the fixed-rate baseline's reader
	sideTCPEcho       = "tcp-echo"        // bench.Echo: the ping-pong baseline's echo
	sideTCPEchoHO     = "tcp-echo-ho"     // bench.EchoHandOff: the same with a hand-off between goroutines
	sideNodeSink      = "node-sink"       // a node whose task (1, 0) checks and records what arrives, inline
	sideNodeEcho      = "node-echo"       // a node whose task (1, 0) sends what arrives back to (0, 0) at ReplyTo
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
	// Count is how many connections a TCP side accepts, or how many nodes
	// a node-sink side starts (their addresses separated by commas); 0
	// means one.
	Count int `json:"count,omitempty"`
	// Every is how many messages a tcp-packed-acks reader acknowledges
	// at a time.
	Every int `json:"every,omitempty"`
}

// maxCount bounds sideSpec.Count: each is a connection (and, for nodes, a
// listener) in the hosting process.
const maxCount = 256

// count is how many connections or nodes spec asks for.
func (spec sideSpec) count() (int, error) {
	switch {
	case spec.Count == 0:
		return 1, nil
	case spec.Count < 0 || spec.Count > maxCount:
		return 0, fmt.Errorf("bench: a side of %d connections or nodes asked for, want 1 to %d", spec.Count, maxCount)
	}
	return spec.Count, nil
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
	case sideTCPPacked, sideTCPPackedAcks, sideTCPStamped, sideTCPEcho, sideTCPEchoHO:
		return startTCPSide(spec)
	case sideNodeSink:
		return startSinkSide(spec)
	case sideNodeEcho:
		return startEchoSide(ctx, spec)
	}
	return nil, fmt.Errorf("bench: unknown side %q", spec.Kind)
}

// tcpSide accepts spec.count() connections and runs a baseline's
// receiving half on each; a reader's latencies go to one Recorder, and the
// delivery is the sum of the readers' (each connection numbers its
// messages from 0).
type tcpSide struct {
	ln    net.Listener
	rec   *bench.Recorder
	mu    sync.Mutex
	conns []net.Conn
	done  chan tcpDone // one for each connection
	count int
}

type tcpDone struct {
	d   bench.Delivery
	err error
}

func startTCPSide(spec sideSpec) (*tcpSide, error) {
	count, err := spec.count()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &tcpSide{ln: ln, rec: bench.NewRecorder(), done: make(chan tcpDone, count), count: count}
	go func() {
		defer ln.Close()
		for range count {
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
				var r tcpDone
				switch spec.Kind {
				case sideTCPPacked:
					r.d, r.err = bench.ReadPacked(c, spec.Size)
				case sideTCPPackedAcks:
					r.d, r.err = bench.ReadPackedAcking(c, c, spec.Size, spec.Every)
				case sideTCPStamped:
					r.d, r.err = bench.ReadStamped(c, spec.Size, s.rec)
				case sideTCPEchoHO:
					r.err = bench.EchoHandOff(c, spec.Size)
				default:
					r.err = bench.Echo(c, spec.Size)
				}
				s.done <- r
			}()
		}
	}()
	return s, nil
}

func (s *tcpSide) addr() string { return s.ln.Addr().String() }

func (s *tcpSide) abort() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// finish waits for every connection's end of stream and sums what their
// readers found.
func (s *tcpSide) finish(ctx context.Context) (bench.Delivery, *bench.Recorder, error) {
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
			return bench.Delivery{}, nil, fmt.Errorf("bench: the TCP side did not see the end of the stream: %w", ctx.Err())
		}
	}
	return sum, s.rec, errors.Join(errs...)
}

// sinkSide is spec.count() nodes (one for each of the sending node's
// peers), whose task (1, 0) checks every message's
// sequence number and records its latency, inline on the connection's
// loop, as loadgen run --scenario transport does. Node i checks channel i
// of chk; its messages come from one sender.
type sinkSide struct {
	nodes []*transport.Node
	chk   *checker
	rec   *bench.Recorder
	last  atomic.Int64 // the latest delivery of any of the nodes
}

func startSinkSide(spec sideSpec) (*sinkSide, error) {
	count, err := spec.count()
	if err != nil {
		return nil, err
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
			a.r, a.err = parseSideReply(h.out.Bytes())
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

// maxSpecLine is the longest request line benchPeerCmd reads; a side's
// spec is a few hundred bytes.
const maxSpecLine = 64 << 10

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
		sc.Buffer(make([]byte, 4<<10), maxSpecLine)
		for sc.Scan() {
			lines <- bytes.Clone(sc.Bytes())
		}
		if err := sc.Err(); err != nil {
			scanErr <- fmt.Errorf("benchpeer: reading a request: %w (a request is one JSON line of at most %d bytes)", err, maxSpecLine)
		} else {
			scanErr <- nil
		}
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
		var r sideReply
		spec, err := parseSideSpec(line)
		if err == nil {
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
