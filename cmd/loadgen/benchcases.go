package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/load"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
	"github.com/sluicehq/sluice/window"
)

// bencher runs the sending halves of loadgen bench's cases against the
// receiving halves its host starts, and adds each case's run to the
// scorecard.
type bencher struct {
	cfg    benchConfig
	host   host
	topo   string
	prefix string
	sc     *bench.Scorecard
	stderr io.Writer
	// ceiling is the plain-TCP ceiling measured before the transport's
	// throughput cases, held until it is measured again after them.
	ceiling *bench.Run
}

// add records a run under the topology's prefix and prints it.
func (b *bencher) add(r bench.Run) error {
	r = b.print(r)
	return b.sc.AddRun(r)
}

// print prints a run and returns it under the topology's prefix.
func (b *bencher) print(r bench.Run) bench.Run {
	r.ID = b.prefix + r.ID
	r.Topology = b.topo
	line := fmt.Sprintf("loadgen bench: %s, %s, %s (receiver pid %d):", r.Topology, r.Case, r.Subject, r.PID)
	known := []string{"msgs_per_s", "cpu_ns_per_msg", "cpu_cores", "p50_us", "p99_us", "p999_us", "max_lag_us"}
	var rest []string
	for k := range r.Figures {
		if !slices.Contains(known, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range known {
		if v, ok := r.Figures[k]; ok {
			line += fmt.Sprintf(" %s %.1f", k, v)
		}
	}
	for _, k := range rest {
		line += fmt.Sprintf(" %s %.4g", k, r.Figures[k])
	}
	if r.ExactlyOnce != nil && !*r.ExactlyOnce {
		line += fmt.Sprintf("; NOT exactly once: %d sent, %+v", r.Sent, *r.Delivery)
	}
	fmt.Fprintln(b.stderr, line)
	return r
}

// deliveryRun fills a run's delivery check and throughput from what the
// receiver found; start is the first send on the bench.Now clock.
func deliveryRun(r bench.Run, sent int64, d bench.Delivery, start int64) bench.Run {
	ok := d.ExactlyOnce(sent)
	r.Sent, r.Delivery, r.ExactlyOnce = sent, &d, &ok
	r.DurationS = float64(max(d.LastNS-start, 1)) / 1e9
	if r.Figures == nil {
		r.Figures = map[string]float64{}
	}
	r.Figures["msgs_per_s"] = float64(d.Delivered) / r.DurationS
	return r
}

// cpuMeter measures the CPU time a case costs: this process's and, when
// the receiving side runs in another, that one's too (loadgen bench's
// second process lives across cases, so each case counts its own share).
type cpuMeter struct {
	pids  []int
	start []time.Duration // each process's CPU time at the start
	wall  int64
	err   error
}

// startCPU starts measuring this process and the side's process sidePID.
func startCPU(sidePID int) *cpuMeter {
	m := &cpuMeter{pids: []int{os.Getpid()}}
	if sidePID != m.pids[0] {
		m.pids = append(m.pids, sidePID)
	}
	m.start, m.err = m.each()
	m.wall = bench.Now()
	return m
}

// each returns the CPU time of each of m's processes, in m.pids's order.
func (m *cpuMeter) each() ([]time.Duration, error) {
	ds := make([]time.Duration, len(m.pids))
	for i, pid := range m.pids {
		d, err := bench.ProcessCPU(pid)
		if err != nil {
			return nil, err
		}
		ds[i] = d
	}
	return ds, nil
}

// figures adds the CPU used since startCPU per message delivered
// (cpu_ns_per_msg) and in cores (cpu_cores, CPU time over wall time), and,
// when the receiving side runs in a process of its own, each process's
// share per message (tx_cpu_ns_per_msg: this, the sending process;
// rx_cpu_ns_per_msg: the receiving one). It
// adds nothing where process CPU cannot be read (bench.ErrNoProcessCPU) or
// nothing was delivered, and fails if a process's CPU could not be read.
func (m *cpuMeter) figures(figures map[string]float64, delivered int64) error {
	if errors.Is(m.err, bench.ErrNoProcessCPU) || delivered <= 0 {
		return nil
	}
	if m.err != nil {
		return fmt.Errorf("bench: CPU time at the start of the case: %w", m.err)
	}
	end, err := m.each()
	if err != nil {
		return fmt.Errorf("bench: CPU time at the end of the case: %w", err)
	}
	var cpu float64
	for i := range end {
		cpu += float64(end[i] - m.start[i])
	}
	if len(end) == 2 {
		figures["tx_cpu_ns_per_msg"] = float64(end[0]-m.start[0]) / float64(delivered)
		figures["rx_cpu_ns_per_msg"] = float64(end[1]-m.start[1]) / float64(delivered)
	}
	figures["cpu_ns_per_msg"] = cpu / float64(delivered)
	figures["cpu_cores"] = cpu / float64(max(bench.Now()-m.wall, 1))
	return nil
}

// addThroughput adds a throughput run (made by deliveryRun) with the CPU
// figures cpu measured over it.
func (b *bencher) addThroughput(r bench.Run, cpu *cpuMeter) error {
	if err := cpu.figures(r.Figures, r.Delivery.Delivered); err != nil {
		return err
	}
	return b.add(r)
}

// latencyFigures adds a histogram's percentiles to figures.
func latencyFigures(figures map[string]float64, snap *hdrhistogram.Snapshot) error {
	if snap == nil {
		return errors.New("bench: the receiver recorded no latencies")
	}
	h, err := importLatency(snap)
	if err != nil {
		return fmt.Errorf("bench: the receiver's latencies: %w", err)
	}
	l := bench.LatencyOf(h)
	figures["p50_us"], figures["p99_us"], figures["p999_us"] = l.P50, l.P99, l.P999
	return nil
}

// dialTCP connects to a TCP side.
func dialTCP(ctx context.Context, addr string) (*net.TCPConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// tcpSide starts the receiving side of a plain-TCP case and dials it. The
// connection closes when ctx ends (unblocking a write or read in progress)
// or when the caller calls closeConn.
func (b *bencher) tcpSide(ctx context.Context, kind string) (conn *net.TCPConn, pid int, closeConn func(), err error) {
	spec := sideSpec{Kind: kind, Size: b.cfg.size}
	if kind == sideTCPPackedAcks {
		spec.Every = flowAckEvery(b.cfg.size)
	}
	addr, pid, err := b.host.start(ctx, spec)
	if err != nil {
		return nil, 0, nil, err
	}
	if conn, err = dialTCP(ctx, addr); err != nil {
		return nil, 0, nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	return conn, pid, func() { stop(); conn.Close() }, nil
}

// The plain-TCP ceiling is measured twice, before and after the
// transport's throughput cases, and the transport's are held against the
// faster measurement ("tcp-ceiling"; the other is "tcp-ceiling/slower").
// A machine disturbed while the ceiling ran (this VM's ceiling has read
// 14.9 and 21.4 M msgs/s two minutes apart) would otherwise make every
// ratio of that run look better than it is; a disturbance only ever slows
// a case down, so the faster reading is the nearer to what the machine
// does.

// tcpCeiling measures the ceiling before the transport's throughput cases.
func (b *bencher) tcpCeiling(ctx context.Context) error {
	r, err := b.measureCeiling(ctx, "before the transport's cases")
	if err != nil {
		return err
	}
	b.ceiling = &r
	return nil
}

// tcpCeilingAgain measures the ceiling after the transport's throughput
// cases and adds both measurements, the faster as the ceiling.
func (b *bencher) tcpCeilingAgain(ctx context.Context) error {
	if b.ceiling == nil {
		return errors.New("plain TCP ceiling: measured after the transport's cases but not before")
	}
	r, err := b.measureCeiling(ctx, "after the transport's cases")
	if err != nil {
		return err
	}
	fast, slow := *b.ceiling, r
	b.ceiling = nil
	if slow.Figures["msgs_per_s"] > fast.Figures["msgs_per_s"] {
		fast, slow = slow, fast
	}
	fast.ID, slow.ID = b.prefix+"tcp-ceiling", b.prefix+"tcp-ceiling/slower"
	return errors.Join(b.sc.AddRun(fast), b.sc.AddRun(slow))
}

// tcpFlow measures plain TCP with ideal 64 KiB batching under the flow
// control of the transport's default window ("tcp-flow"): at most as many
// messages unacknowledged as a channel's window holds, the reader
// acknowledging as often as the window asks (bench.FlowWriter), and the
// acks read on a goroutine of their own that wakes the writer, as a node's
// event loop wakes a producer. Set beside the ceiling it is what flow
// control alone costs plain TCP on the machine; the transport's runs are
// held against it too.
func (b *bencher) tcpFlow(ctx context.Context) error { return b.measureFlow(ctx, "tcp-flow", "") }

// tcpFlowOneP is tcpFlow with the sending process held to one P, as
// transportMaxOneP holds the transport's ("tcp-flow/gomaxprocs1"; two
// processes only): the Go scheduler's share of what flow control costs
// plain TCP.
func (b *bencher) tcpFlowOneP(ctx context.Context) error {
	return withOneP(func() error {
		return b.measureFlow(ctx, "tcp-flow/gomaxprocs1", ", the sending process at GOMAXPROCS=1")
	})
}

// withOneP runs f with this process held to one P, and gives it back the
// Ps it had.
func withOneP(f func() error) error {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	return f()
}

// measureFlow runs tcpFlow's case as run id, what's end added to its case.
func (b *bencher) measureFlow(ctx context.Context, id, what string) error {
	conn, pid, closeConn, err := b.tcpSide(ctx, sideTCPPackedAcks)
	if err != nil {
		return err
	}
	defer closeConn()
	w, err := bench.NewFlowWriter(conn, b.cfg.size, flowWindow(b.cfg.size))
	if err != nil {
		return err
	}
	r, err := b.packedRun(ctx, conn, pid, w, fmt.Sprintf("throughput, ideal 64 KiB batching, at most %d messages unacknowledged, an ack every %d%s", flowWindow(b.cfg.size), flowAckEvery(b.cfg.size), what))
	if err != nil {
		return fmt.Errorf("plain TCP with flow control: %w", err)
	}
	r.ID = id
	r.Figures["writer_waits"] = float64(w.Waits())
	r.Figures["sender_gomaxprocs"] = float64(runtime.GOMAXPROCS(0))
	return b.add(r)
}

// flowWindow is how many size-byte messages tcpFlow's writer may have
// unacknowledged: as many as the default window holds, in messages or in
// bytes (each with its 4-byte length here), whichever is fewer.
func flowWindow(size int) int {
	c := window.DefaultConfig()
	return max(1, min(c.MaxMessages, c.MaxBytes/(size+4)))
}

// flowAckEvery is how many size-byte messages tcpFlow's reader
// acknowledges at a time: as many as the default window sends between two
// ack requests.
func flowAckEvery(size int) int {
	return max(1, int(window.DefaultConfig().AckRequestShare*float64(flowWindow(size))))
}

// packedWriter is what measureCeiling and tcpFlow write with.
type packedWriter interface {
	Add(intended int64) error
	Flush() error
	Sent() int64
}

// measureCeiling runs plain TCP with ideal 64 KiB batching at full speed
// and returns the run, printed but not yet added; when says when it ran.
func (b *bencher) measureCeiling(ctx context.Context, when string) (bench.Run, error) {
	conn, pid, closeConn, err := b.tcpSide(ctx, sideTCPPacked)
	if err != nil {
		return bench.Run{}, err
	}
	defer closeConn()
	w, err := bench.NewPackedWriter(conn, b.cfg.size)
	if err != nil {
		return bench.Run{}, err
	}
	r, err := b.packedRun(ctx, conn, pid, w, "throughput, ideal 64 KiB batching, "+when)
	if err != nil {
		return bench.Run{}, fmt.Errorf("plain TCP ceiling: %w", err)
	}
	return b.print(r), nil
}

// packedRun writes with w to conn, whose reader is pid's, at full speed
// for the configured duration, and returns the run of case what, its ID
// not yet set.
func (b *bencher) packedRun(ctx context.Context, conn *net.TCPConn, pid int, w packedWriter, what string) (bench.Run, error) {
	cpu := startCPU(pid)
	start := bench.Now()
	end := start + int64(b.cfg.duration)
	for {
		// Look at the clock every 1024 messages: reading it for each
		// would cost the writer a good part of its speed.
		if w.Sent()&1023 == 0 && bench.Now() >= end {
			break
		}
		if err := w.Add(start); err != nil {
			return bench.Run{}, err
		}
	}
	if err := w.Flush(); err != nil {
		return bench.Run{}, err
	}
	if err := conn.CloseWrite(); err != nil {
		return bench.Run{}, err
	}
	d, err := b.host.finish(ctx)
	if err != nil {
		return bench.Run{}, err
	}
	r := deliveryRun(bench.Run{Case: what, Subject: "plain TCP", PID: pid}, w.Sent(), d.Delivery, start)
	if err := cpu.figures(r.Figures, r.Delivery.Delivered); err != nil {
		return bench.Run{}, err
	}
	return r, nil
}

// tcpFixed: the same driver at the same rate writing each message to plain
// TCP with one write.
func (b *bencher) tcpFixed(ctx context.Context) error {
	return b.tcpFixedTo(ctx, "fixed/tcp", "fixed rate", 1)
}

// tcpFixedPeers is plain TCP's fixed-rate baseline to many peers.
func (b *bencher) tcpFixedPeers(ctx context.Context) error {
	n := b.cfg.peers
	return b.tcpFixedTo(ctx, "peers/fixed/tcp", fmt.Sprintf("fixed rate to %d connections, message i to connection i mod %d", n, n), n)
}

// tcpFixedTo runs the fixed-rate driver writing message i, with one write,
// to connection i mod n of n to the receiving host, each connection
// numbering its messages from 0.
func (b *bencher) tcpFixedTo(ctx context.Context, id, what string, n int) error {
	addr, pid, err := b.host.start(ctx, sideSpec{Kind: sideTCPStamped, Size: b.cfg.size, Count: n})
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	conns := make([]*net.TCPConn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := dialTCP(ctx, addr)
		if err != nil {
			_, _ = b.host.finish(ctx)
			return fmt.Errorf("%s: %w", id, err)
		}
		conns = append(conns, c)
	}
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stop()
	msg := load.Payload(b.cfg.size)
	start := bench.Now()
	res, err := bench.FixedRate{Rate: b.cfg.rate, Duration: b.cfg.duration, Clock: load.Clock}.Run(ctx,
		func(_ context.Context, i, intended int64) error {
			bench.Stamp(msg, intended, uint64(i/int64(n)))
			_, err := conns[i%int64(n)].Write(msg)
			return err
		})
	for _, c := range conns {
		if err != nil {
			break
		}
		err = c.CloseWrite()
	}
	r, ferr := b.host.finish(ctx)
	if err = errors.Join(err, ferr); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	run := deliveryRun(bench.Run{ID: id, Case: what, Subject: "plain TCP", PID: pid}, res.Sent, r.Delivery, start)
	run.Figures["max_lag_us"] = float64(res.MaxLagNS) / 1e3
	if err := latencyFigures(run.Figures, r.Latency); err != nil {
		return err
	}
	return b.add(run)
}

// transportMax sends at full speed on one channel: runs as the transport
// scenario's producers send them (runs true), or one Send per message.
func (b *bencher) transportMax(ctx context.Context, be string, runs bool) error {
	return b.runSinkCase(ctx, maxCase(be, runs))
}

// transportMaxOneP is the default backend's runs case with the sending
// process held to one P (runtime.GOMAXPROCS(1)) while it runs; a step of
// the two-process topology only (in one process, the receiving node would
// share that P). It is a diagnostic, not a setting to use: with one P, a
// gnet loop waiting in epoll_wait holds the only P, and a fixed-rate
// driver's timers wait for the runtime to take it back (a p99 of
// milliseconds). Beside the same ceiling it says how much of the runs
// case's gap is the Go scheduler's: with two Ps the producer and the
// sending node's loop hand credit and the CPU to each other through thread
// wake-ups, each a context switch, which one P turns into a goroutine
// switch on one thread.
func (b *bencher) transportMaxOneP(ctx context.Context) error {
	c := maxCase(backendDefault, true)
	c.id, c.what = oneP, c.what+", the sending process at GOMAXPROCS=1"
	c.figures = func(f map[string]float64) { f["sender_gomaxprocs"] = float64(runtime.GOMAXPROCS(0)) }
	return withOneP(func() error { return b.runSinkCase(ctx, c) })
}

// oneP is the ID of transportMaxOneP's run.
const oneP = "max-runs/default/gomaxprocs1"

// maxCase is transportMax's case.
func maxCase(be string, runs bool) sinkCase {
	c := sinkCase{id: "max-runs/" + be, what: "throughput, runs of up to 64 (the transport scenario's producers)", be: be, sinks: 1, send: sendRuns}
	if !runs {
		c.id, c.what = "max-send/"+be, "throughput, one Send per message"
		c.send = func(ctx context.Context, cfg load.Config, senders []*transport.Sender) (bench.Result, error) {
			sent, err := load.Each(ctx, cfg, senders[0])
			return bench.Result{Sent: sent}, err
		}
	}
	return c
}

// transportFixed sends at the fixed rate on one channel, as 'loadgen run
// --scenario transport --rate R' does.
func (b *bencher) transportFixed(ctx context.Context, be string) error {
	return b.runSinkCase(ctx, sinkCase{id: "fixed/" + be, what: "fixed rate", be: be, sinks: 1, fixed: true, send: load.FixedRate})
}

// transportPeers sends from one node to b.cfg.peers peers, one channel to
// each: at full speed in runs as the transport scenario's producers send
// them, or (fixed) at the fixed rate, message i to peer i mod peers. It is
// the node of a process with tens of peers, which is what the default
// backend is chosen for.
func (b *bencher) transportPeers(ctx context.Context, be string, fixed bool) error {
	n := b.cfg.peers
	if fixed {
		return b.runSinkCase(ctx, sinkCase{id: "peers/fixed/" + be, be: be, sinks: n, fixed: true, reached: true, send: load.FixedRate,
			what: fmt.Sprintf("fixed rate to %d peers, a channel each, message i to peer i mod %d", n, n)})
	}
	return b.runSinkCase(ctx, sinkCase{id: "peers/" + be, be: be, sinks: n, reached: true, send: sendRuns,
		what: fmt.Sprintf("throughput to %d peers, a channel each, runs of up to 64", n)})
}

// sendRuns sends at full speed in runs, as the transport scenario's
// producers do (load.MaxRate).
func sendRuns(ctx context.Context, cfg load.Config, senders []*transport.Sender) (bench.Result, error) {
	sent, err := load.MaxRate(ctx, cfg, senders)
	return bench.Result{Sent: sent}, err
}

// sinkCase is a case of a node of backend be sending, with send, to sinks
// nodes of the receiving host (node-sink), a channel to each (its process
// in the two-process topology). A fixed case keeps a schedule and reports
// latency; the others go at full speed and report throughput and CPU.
// reached records how many of the sinks the messages went to: all of them,
// or the case measured something else.
type sinkCase struct {
	id, what, be   string
	sinks          int
	fixed, reached bool
	send           func(context.Context, load.Config, []*transport.Sender) (bench.Result, error)
	figures        func(map[string]float64) // adds figures of its own, if not nil
}

func (b *bencher) runSinkCase(ctx context.Context, c sinkCase) error {
	addrs, pid, err := b.host.start(ctx, sideSpec{Kind: sideNodeSink, Backend: c.be, Size: b.cfg.size, Count: c.sinks})
	if err != nil {
		return fmt.Errorf("%s: %w", c.id, err)
	}
	tx, senders, err := b.connectPeers(ctx, c.be, strings.Split(addrs, ","))
	if err != nil {
		_, _ = b.host.finish(ctx)
		return fmt.Errorf("%s: %w", c.id, err)
	}
	defer tx.Abort()
	cfg := transportConfig{size: b.cfg.size, duration: b.cfg.duration, channels: len(senders), connections: 1, delivery: "auto"}
	if c.fixed {
		cfg.rate = b.cfg.rate
	}
	cpu := startCPU(pid)
	start := bench.Now()
	res, err := c.send(ctx, cfg.loadConfig(), senders)
	for _, s := range senders {
		if err != nil {
			break
		}
		err = s.Flush(ctx)
	}
	r, ferr := b.host.finish(ctx)
	if err = errors.Join(err, ferr); err != nil {
		return fmt.Errorf("%s: %w", c.id, err)
	}
	run := deliveryRun(bench.Run{ID: c.id, Case: c.what, Subject: c.be + " backend", PID: pid}, res.Sent, r.Delivery, start)
	if c.reached {
		reached := 0
		for _, p := range tx.Stats().Peers {
			if p.Traffic.MessagesOut > 0 {
				reached++
			}
		}
		run.Figures["peers_reached"] = float64(reached)
	}
	if c.figures != nil {
		c.figures(run.Figures)
	}
	if !c.fixed {
		return b.addThroughput(run, cpu)
	}
	run.Figures["max_lag_us"] = float64(res.MaxLagNS) / 1e3
	if err := latencyFigures(run.Figures, r.Latency); err != nil {
		return err
	}
	return b.add(run)
}

// connectPeers starts a node of backend be and opens a channel from task
// (0, i) to echoTask on the node at addrs[i], for each i.
func (b *bencher) connectPeers(ctx context.Context, be string, addrs []string) (*transport.Node, []*transport.Sender, error) {
	opts, err := backendOptions(be)
	if err != nil {
		return nil, nil, err
	}
	n, err := transport.NewNode(opts...)
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	senders := make([]*transport.Sender, len(addrs))
	for i, addr := range addrs {
		p, err := n.Peer(addr)
		if err == nil {
			err = p.WaitConnected(wctx)
		}
		if err == nil {
			senders[i], err = p.OpenSender(wctx, taskid.ID{Index: uint32(i)}, echoTask)
		}
		if err != nil {
			n.Abort()
			return nil, nil, fmt.Errorf("peer %d of %d (%s): %w", i+1, len(addrs), addr, err)
		}
	}
	return n, senders, nil
}

// stallProbe is the longest the stall probe spins on each CPU: long
// enough to catch the VM's own work (10-30 stalls of 1-7 ms in any ten
// seconds on the 2-core AMD EPYC VM measured), short beside the cases.
const stallProbe = 3 * time.Second

// vcpuStalls measures what the machine takes from its CPUs
// (bench.MeasureStalls) for the fixed-rate cases' scorecard; where the
// probe cannot run (not Linux) the rows are left out.
func (b *bencher) vcpuStalls(ctx context.Context) error {
	s, err := bench.MeasureStalls(ctx, min(b.cfg.duration, stallProbe))
	if errors.Is(err, bench.ErrNoStallProbe) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fixed/stalls: %w", err)
	}
	return b.add(bench.Run{ID: "fixed/stalls", Case: "CPU stalls", Subject: fmt.Sprintf("a thread spinning on each of %d CPUs for %v", s.CPUs, s.Duration.Round(time.Millisecond)),
		PID: os.Getpid(), DurationS: s.Duration.Seconds(), Figures: s.Figures()})
}

// driverAlone runs the fixed-rate driver with nothing to send, recording
// how late it hands each message over: the floor of every fixed-rate figure
// on this machine, as BenchmarkFixedRate100kDriverAlone measures it.
func (b *bencher) driverAlone(ctx context.Context) error {
	rec := bench.NewRecorder()
	start := time.Now()
	res, err := bench.FixedRate{Rate: b.cfg.rate, Duration: b.cfg.duration, Clock: load.Clock, Recorder: rec}.Run(ctx,
		func(context.Context, int64, int64) error { return nil })
	if err != nil {
		return fmt.Errorf("fixed/driver: %w", err)
	}
	l := rec.Latency()
	return b.add(bench.Run{ID: "fixed/driver", Case: "fixed rate", Subject: "the driver alone, sending nothing", PID: os.Getpid(),
		Sent: res.Sent, DurationS: time.Since(start).Seconds(),
		Figures: map[string]float64{"p50_us": l.P50, "p99_us": l.P99, "p999_us": l.P999, "max_lag_us": float64(res.MaxLagNS) / 1e3}})
}

// tcpPingPong: one message there and back over plain TCP, for the
// duration. With handOff each end reads on one goroutine and answers on
// another (bench.NewHandOffPinger, bench.EchoHandOff), the hand-offs a
// node's delivery makes: the pinger's task takes each pong from the
// connection's reader, and the echo's task each ping.
func (b *bencher) tcpPingPong(ctx context.Context, handOff bool) error {
	id, subject, kind, newPinger := "pingpong/tcp", "plain TCP", sideTCPEcho, bench.NewPinger
	if handOff {
		id, subject, kind, newPinger = "pingpong/tcp/hand-off", "plain TCP, each message read on one goroutine and answered on another",
			sideTCPEchoHO, bench.NewHandOffPinger
	}
	conn, pid, closeConn, err := b.tcpSide(ctx, kind)
	if err != nil {
		return err
	}
	defer closeConn()
	p, err := newPinger(conn, b.cfg.size)
	if err != nil {
		return err
	}
	rec := bench.NewRecorder()
	var n int64
	start := time.Now()
	for end := bench.Now() + int64(b.cfg.duration); bench.Now() < end; n++ {
		rtt, err := p.Ping()
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		rec.Record(int64(rtt))
	}
	if err := conn.CloseWrite(); err != nil {
		return err
	}
	if _, err := b.host.finish(ctx); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	return b.add(pingRun(id, subject, pid, n, rec, time.Since(start)))
}

// pingRun is the run of n round trips recorded into rec over elapsed.
func pingRun(id, subject string, pid int, n int64, rec *bench.Recorder, elapsed time.Duration) bench.Run {
	l := rec.Latency()
	return bench.Run{ID: id, Case: "ping-pong, one message there and back", Subject: subject, PID: pid,
		Sent: n, DurationS: elapsed.Seconds(),
		Figures: map[string]float64{"p50_us": l.P50, "p99_us": l.P99, "p999_us": l.P999}}
}

// transportPingPong: one message there and back through two nodes, each
// way a channel of its own. The pinger is node a's task, as the echo is the
// other node's: its handler, on the task's own goroutine (Node.Handle),
// takes each pong and sends the next ping, as plain TCP's pinger reads its
// pong and writes the next ping on one goroutine. With handOff the handler
// instead hands each pong to a goroutine waiting for it, which sends the
// next ping (as BenchmarkTransportPingPong does): a hand-off between
// goroutines more a round trip, the harness's own, reported beside it.
func (b *bencher) transportPingPong(ctx context.Context, be string, handOff bool) error {
	a, err := listeningNode(be)
	if err != nil {
		return err
	}
	defer a.Abort()
	pinger := newTaskPinger(b.cfg.size)
	if err := a.Handle(pingTask, pinger.handler(ctx, handOff)); err != nil {
		return err
	}
	addr, pid, err := b.host.start(ctx, sideSpec{Kind: sideNodeEcho, Backend: be, Size: b.cfg.size, ReplyTo: a.Addr()})
	if err != nil {
		return err
	}
	id, subject := "pingpong/"+be, be+" backend"
	if handOff {
		id, subject = id+"/hand-off", subject+", each pong handed to a waiting goroutine"
	}
	rec := bench.NewRecorder()
	start := time.Now()
	var n int64
	if handOff {
		n, err = b.pingNodes(ctx, a, addr, pinger.pong, rec)
	} else {
		n, err = pinger.run(ctx, a, addr, b.cfg.duration, rec)
	}
	elapsed := time.Since(start)
	_, ferr := b.host.finish(ctx)
	if err = errors.Join(err, ferr); err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	return b.add(pingRun(id, subject, pid, n, rec, elapsed))
}

// taskPinger pings from its node's task: the handler that takes a pong
// (onPong) records the round trip and sends the next ping, until the end.
// Its handler is installed before run, which sends the first ping.
type taskPinger struct {
	size int
	pong chan uint64   // the hand-off variant's pongs (pingNodes)
	done chan struct{} // closed when the last pong is in, or a ping failed

	mu    sync.Mutex // run's setup and end against the handler
	there *transport.Sender
	msg   []byte
	rec   *bench.Recorder
	end   int64 // bench.Now after which no ping is sent
	pongs int64 // pongs taken: ping number pongs is the one in flight
	sent  int64 // when the ping in flight was sent (bench.Now)
	err   error
}

func newTaskPinger(size int) *taskPinger {
	return &taskPinger{size: size, pong: make(chan uint64, 1), done: make(chan struct{})}
}

// handler is the pinging task's: it takes each pong and sends the next
// ping (onPong), or with handOff passes the pong's sequence number to
// p.pong for pingNodes.
func (p *taskPinger) handler(ctx context.Context, handOff bool) transport.Handler {
	return func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			var seq uint64
			if len(m.Payload) >= headerLen {
				_, seq = bench.Stamped(m.Payload)
			}
			if handOff {
				// One ping is in flight at a time, so the pong never
				// waits for room.
				p.pong <- seq
			} else {
				p.onPong(ctx, seq)
			}
		}
	}
}

// run opens the channel to the echo at addr, sends the first ping and
// waits until the handler has taken the last pong after dur, or ctx ends.
// It returns how many round trips it recorded into rec.
func (p *taskPinger) run(ctx context.Context, a *transport.Node, addr string, dur time.Duration, rec *bench.Recorder) (int64, error) {
	there, err := openPing(ctx, a, addr)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	p.there, p.msg, p.rec, p.end = there, load.Payload(p.size), rec, bench.Now()+int64(dur)
	if p.err = p.pingLocked(ctx); p.err != nil {
		close(p.done)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && !p.finished() {
		p.err = fmt.Errorf("no pong for ping %d: %w", p.pongs, ctx.Err())
		close(p.done) // a late pong finds the pinger stopped
	}
	return p.pongs, p.err
}

// onPong is the pinging task's handler for the pong of ping seq.
func (p *taskPinger) onPong(ctx context.Context, seq uint64) {
	now := bench.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished() {
		return
	}
	if seq != uint64(p.pongs) {
		p.err = fmt.Errorf("%w: pong %d for ping %d", bench.ErrBadEcho, seq, p.pongs)
		close(p.done)
		return
	}
	p.rec.Record(now - p.sent)
	p.pongs++
	if now >= p.end {
		close(p.done)
		return
	}
	if p.err = p.pingLocked(ctx); p.err != nil {
		close(p.done)
	}
}

// pingLocked sends ping number p.pongs. The caller holds p.mu.
func (p *taskPinger) pingLocked(ctx context.Context) error {
	p.sent = bench.Now()
	bench.Stamp(p.msg, p.sent, uint64(p.pongs))
	return p.there.Send(ctx, p.sent, p.msg)
}

// finished reports whether the pinger has stopped. The caller holds p.mu.
func (p *taskPinger) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// openPing opens the pings' channel from a's pingTask to the echo at addr.
func openPing(ctx context.Context, a *transport.Node, addr string) (*transport.Sender, error) {
	p, err := a.Peer(addr)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.OpenSender(octx, pingTask, echoTask)
}

// pingNodes pings the echo node at addr from a for the duration and
// returns how many round trips it recorded into rec; a delivers each
// pong's sequence number to pong.
func (b *bencher) pingNodes(ctx context.Context, a *transport.Node, addr string, pong <-chan uint64, rec *bench.Recorder) (int64, error) {
	there, err := openPing(ctx, a, addr)
	if err != nil {
		return 0, err
	}
	msg := load.Payload(b.cfg.size)
	var n int64
	for end := bench.Now() + int64(b.cfg.duration); bench.Now() < end; n++ {
		t0 := bench.Now()
		bench.Stamp(msg, t0, uint64(n))
		if err := there.Send(ctx, t0, msg); err != nil {
			return n, err
		}
		select {
		case seq := <-pong:
			if seq != uint64(n) {
				return n, fmt.Errorf("%w: pong %d for ping %d", bench.ErrBadEcho, seq, n)
			}
		case <-ctx.Done():
			return n, fmt.Errorf("no pong for ping %d: %w", n, ctx.Err())
		}
		rec.Record(bench.Now() - t0)
	}
	return n, nil
}
