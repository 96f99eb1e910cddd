package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/load"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// headerLen is the part of every loadgen payload that carries its intended
// send time and its per-channel sequence number (bench.Stamp's layout, which
// the plain-TCP baselines use too); the rest is filler.
const headerLen = bench.StampLen

// Limits of the load loadgen puts on a transport, from a plan or from the
// flags: beyond them the receiving side refuses what is sent, and a plan
// from the network could make an agent allocate without bound.
const (
	// maxSize is the largest payload a channel's window holds (the
	// window keeps each message with its head) with the transport's
	// default window, which loadgen's nodes keep.
	maxSize = transport.DefaultWindowBytes - transport.MaxMessageHead
	// maxChannels: a receiving node takes at most 65,536 channels from a
	// peer on one connection (transport.WithMaxChannels' default, which
	// loadgen's nodes keep), and send's report request to serve opens one
	// more.
	maxChannels = 65536 - 1
	// maxConnections is how many connections a receiving node accepts
	// from one host at a time (transport.WithMaxConnsPerAddr's default).
	maxConnections = 64
)

// transportConfig is the transport scenario's configuration.
type transportConfig struct {
	size        int
	duration    time.Duration
	rate        float64
	channels    int
	connections int
	faults      string
	seed        uint64
	consumeRate float64
	delivery    string
	producers   int // 0: auto, see producerCount
	// shift, when set, is what senders add to the send times they stamp,
	// to stamp them in the receiver's clock (see clockCorrector).
	shift *atomic.Int64
}

func (c *transportConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.size, "size", 100, fmt.Sprintf("payload bytes per message, %d (send time and sequence number) to %d (what a channel's window holds)", headerLen, maxSize))
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to send")
	fs.Float64Var(&c.rate, "rate", 0, "messages per second over all channels; 0 sends as fast as the transport allows")
	fs.IntVar(&c.channels, "channels", 1, fmt.Sprintf("channels (source task -> target task) to spread the load over, at most %d", maxChannels))
	fs.IntVar(&c.connections, "connections", 1, fmt.Sprintf("TCP connections between the two nodes, at most %d", maxConnections))
	fs.StringVar(&c.faults, "faults", "", "faults to inject, e.g. drop=0.05,ctrldrop=0.05,dup=0.01,reset=2s,delay=2ms,jitter=1ms,bw=10MB,ge=0.01:0.3:0.5,partition=3s@5s (see transport.ParseFaults; --scenario transport times reset and partition from the start of its run, the engine scenarios from each node's start)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the fault generator")
	fs.Float64Var(&c.consumeRate, "consume-rate", 0, "messages per second the receiving tasks consume at most, over all channels; 0: no limit")
	fs.IntVar(&c.producers, "producers", 0, "goroutines sending at --rate 0, each to its share of the channels; 0: half the cores (at least one), leaving the rest to the transport's event loops")
	fs.StringVar(&c.delivery, "delivery", "auto", deliveryUsage)
}

const deliveryUsage = "how received runs reach the receiving tasks: inline (on the connection's event loop, Node.HandleInline), goroutine (each task's own goroutine, Node.Handle), or auto: inline unless --consume-rate makes the tasks wait"

// deliveryName is how the receiving tasks get their runs, for the report.
func (c *transportConfig) deliveryName() string {
	if c.inline() {
		return "inline"
	}
	return "goroutine"
}

// producerCount is how many goroutines send: at a fixed rate one, the
// driver; at full speed --producers, or half of GOMAXPROCS (at least
// one). A producer busy pushing into a full
// budget takes CPU from the event loops that drain it: on two cores (48 MiB
// budget, one TrySend per message) one producer moved 6.0 M msgs/s of 100 B
// over 10,000 channels, two 4.2 M and four 3.8 M.
func (c *transportConfig) producerCount() int {
	if c.rate > 0 {
		return 1
	}
	if c.producers > 0 {
		return c.producers
	}
	return max(1, runtime.GOMAXPROCS(0)/2)
}

// inline reports whether the receiving tasks run inline. An empty delivery
// (a plan from a coordinator) means auto.
func (c *transportConfig) inline() bool { return inlineDelivery(c.delivery, c.consumeRate) }

// inlineDelivery reports whether --delivery, with --consume-rate, runs the
// receiving tasks inline.
func inlineDelivery(delivery string, consumeRate float64) bool {
	auto := delivery == "auto" || delivery == ""
	return delivery == "inline" || (auto && consumeRate == 0)
}

// checkDelivery checks how the receiving tasks take their runs: --delivery,
// --consume-rate and their combination.
func checkDelivery(delivery string, consumeRate float64) error {
	switch {
	case consumeRate < 0:
		return fmt.Errorf("--consume-rate must not be negative, got %v", consumeRate)
	case !finite(consumeRate):
		return fmt.Errorf("--consume-rate must be a finite number of messages per second, got %v", consumeRate)
	case delivery != "" && delivery != "auto" && delivery != "inline" && delivery != "goroutine":
		return fmt.Errorf("--delivery must be auto, inline or goroutine, got %q", delivery)
	case delivery == "inline" && consumeRate > 0:
		return fmt.Errorf("--delivery inline cannot be combined with --consume-rate: a task limited to a rate waits, and an inline task must never wait")
	}
	return nil
}

func (c *transportConfig) validate() error {
	switch {
	case c.size < headerLen:
		return fmt.Errorf("--size %d is below %d, the bytes loadgen needs for the send time and sequence number", c.size, headerLen)
	case c.size > maxSize:
		return fmt.Errorf("--size %d is above %d, the largest payload a channel's window of %d bytes holds with its %d-byte head", c.size, maxSize, transport.DefaultWindowBytes, transport.MaxMessageHead)
	case c.duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", c.duration)
	case c.rate < 0:
		return fmt.Errorf("--rate must not be negative, got %v", c.rate)
	case !finite(c.rate):
		return fmt.Errorf("--rate must be a finite number of messages per second, got %v", c.rate)
	case c.channels < 1 || c.channels > maxChannels:
		return fmt.Errorf("--channels must be 1 to %d (a receiving node takes 65,536 channels from a peer on one connection, and send's report request needs one), got %d", maxChannels, c.channels)
	case c.connections < 1 || c.connections > maxConnections:
		return fmt.Errorf("--connections must be 1 to %d (the connections a receiving node accepts from one host), got %d", maxConnections, c.connections)
	case c.producers < 0:
		return fmt.Errorf("--producers must not be negative, got %d", c.producers)
	case c.producers > 0 && c.rate > 0:
		return fmt.Errorf("--producers is for --rate 0: a fixed rate is sent by one driver goroutine, got --producers %d with --rate %v", c.producers, c.rate)
	}
	return checkDelivery(c.delivery, c.consumeRate)
}

// finite reports whether a rate from the flags is a number and not
// infinite, which flag.Float64 accepts ("NaN", "Inf") and which neither the
// drivers nor the report's JSON can take.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// loadConfig is what the senders of this configuration send.
func (c *transportConfig) loadConfig() load.Config {
	return load.Config{Size: c.size, Duration: c.duration, Rate: c.rate, Producers: c.producerCount(), Shift: c.shift}
}

func (c *transportConfig) asMap() map[string]any {
	return map[string]any{
		"size": c.size, bench.ConfigMsgSize: c.size, "duration": c.duration.String(), "rate": c.rate, "channels": c.channels,
		"connections": c.connections, "faults": c.faults, "seed": c.seed, "consume_rate": c.consumeRate,
		"delivery": c.deliveryName(), "producers": c.producerCount(),
	}
}

// checker verifies, per channel, that loadgen's own sequence numbers arrive
// exactly once and in order. Each channel has a target of its own, whose
// handler the transport calls one run at a time, so its counters need no
// lock. A payload too short to hold the header is malformed: it has no
// sequence number, so it is neither delivered nor a gap (the number it
// should have carried shows as one once the next arrives).
type checker struct {
	chans      []chanCheck
	delivered  atomic.Int64
	duplicates atomic.Int64
	gaps       atomic.Int64
	malformed  atomic.Int64
	bytes      atomic.Int64
}

// malformedNote is what a report says of n malformed payloads.
func malformedNote(n int64) string {
	return fmt.Sprintf("%d messages arrived with payloads shorter than the %d-byte header (send time and sequence number) or whose filler is not what loadgen sends: malformed, counted neither as delivered nor as missing", n, headerLen)
}

type chanCheck struct {
	bench.Delivery
	_ [64]byte // keep channels on their own cache lines
}

func (k *checker) observe(ch int, msgs []transport.Message, now int64, rec *bench.Recorder) {
	c := &k.chans[ch]
	dupsBefore, missingBefore := c.Duplicates, c.Missing
	var delivered, malformed, bytes int64
	var lats latencyGroup
	for _, m := range msgs {
		p := m.Payload
		if !bench.Filled(p) {
			malformed++
			continue
		}
		intended, seq := bench.Stamped(p)
		if !c.Observe(seq) {
			continue
		}
		delivered++
		if lat, n := lats.add(now - intended); n > 0 {
			rec.RecordN(lat, n)
		}
		bytes += int64(len(p))
	}
	rec.RecordN(lats.lat, lats.n)
	dups, gaps := c.Duplicates-dupsBefore, c.Missing-missingBefore
	k.delivered.Add(delivered)
	k.bytes.Add(bytes)
	if dups > 0 {
		k.duplicates.Add(dups)
	}
	if gaps > 0 {
		k.gaps.Add(gaps)
	}
	if malformed > 0 {
		k.malformed.Add(malformed)
	}
}

// latencyGroup groups the latencies of one received run for a Recorder:
// messages stamped with one clock read (loadgen's producers read it once
// per 64 messages) and received in one run have one latency, recorded once
// with its count rather than once per message.
type latencyGroup struct {
	lat, n int64 // the group being counted; n is 0 before the first add
}

// add counts a message of latency lat. When lat ends the group being
// counted, add returns that group's latency and count (n 0 otherwise); the
// last group is left in the fields for the caller to record.
func (g *latencyGroup) add(lat int64) (prev, n int64) {
	if lat == g.lat && g.n > 0 {
		g.n++
		return 0, 0
	}
	prev, n = g.lat, g.n
	g.lat, g.n = lat, 1
	return prev, n
}

// runTransport runs two nodes in this process over loopback and sends
// through them.
func runTransport(ctx context.Context, cfg transportConfig, stdout, stderr io.Writer, opts ...transport.Option) (*bench.Report, *bench.Recorder, error) {
	faults, rest, err := transport.ParseFaults(cfg.faults, cfg.seed)
	if err != nil {
		return nil, nil, err
	}
	if len(rest) > 0 {
		return nil, nil, fmt.Errorf("faults %s are not transport faults; the transport scenario takes drop, ctrldrop, dup, reset, delay, jitter, bw, ge and partition", strings.Join(rest, ","))
	}
	rxFaults := injectFaults(faults)
	rxFaults.Seed = cfg.seed + 0x9e3779b97f4a7c15
	rxFaults.Reset = 0 // one side resets, or every reset would count twice
	// One side partitions: it cuts the connection both ways.
	rxFaults.PartitionAt, rxFaults.PartitionFor = 0, 0
	rx, err := transport.NewNode(append([]transport.Option{transport.WithListen("127.0.0.1:0"), transport.WithFaults(rxFaults)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	defer rx.Abort()
	// The timed faults (reset, partition) count from the start of the run,
	// where its timeline starts, not from the node's: the setup before it
	// (dialing, the handshake) takes as long as the machine makes it, and a
	// partition timed from the node's start fell in it on a loaded machine,
	// holding nothing of the run's traffic.
	tx, err := transport.NewNode(append([]transport.Option{transport.WithConnectionsPerPeer(cfg.connections), transport.WithFaults(injectFaults(faults)),
		transport.WithDeferredFaultClock()}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Abort()
	defer metricsHub.addNode(rx, "rx")()
	defer metricsHub.addNode(tx, "tx")()

	rec := bench.NewRecorder()
	chk := &checker{chans: make([]chanCheck, cfg.channels)}
	lim := load.NewLimiter(cfg.consumeRate)
	handleAll := rx.HandleAll
	if cfg.inline() {
		handleAll = rx.HandleAllInline
	}
	handleAll(func(target taskid.ID) transport.Handler {
		idx := int(target.Index)
		if target.Processor != 1 || idx >= cfg.channels {
			return func(taskid.Channel, uint64, []transport.Message) {}
		}
		return func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
			lim.Wait(len(msgs))
			chk.observe(idx, msgs, bench.Now(), rec)
		}
	})

	peer, err := tx.Peer(rx.Addr())
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = peer.WaitConnected(wctx)
	cancel()
	if err != nil {
		return nil, nil, err
	}
	senders := make([]*transport.Sender, cfg.channels)
	for i := range senders {
		if senders[i], err = peer.OpenSender(ctx, taskid.ID{Processor: 0, Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i)}); err != nil {
			return nil, nil, err
		}
	}

	report := bench.NewReport("transport", cfg.asMap())
	prog := bench.NewProgress(stderr, &chk.delivered, rec)
	start := time.Now()
	prog.Start()
	tx.StartFaultClock() // after the timeline's start: a fault is marked after it
	faultsStart := time.Now()
	mem := startMemSampler(tx)
	stopMarks := markFaults(prog, tx, rx)
	var sent int64
	var sendErr error
	if cfg.rate > 0 {
		var res bench.Result
		res, sendErr = load.FixedRate(ctx, cfg.loadConfig(), senders)
		sent = res.Sent
	} else {
		sent, sendErr = load.MaxRate(ctx, cfg.loadConfig(), senders)
	}
	if sendErr != nil && !errors.Is(sendErr, context.Canceled) {
		prog.Stop()
		return nil, nil, sendErr
	}
	sendEnd := time.Since(start)
	// Ended early by ctx (Ctrl-C, SIGTERM): the report still gives what was
	// measured, and fails the run so that it does not pass for a complete one.
	interrupted := ctx.Err() != nil
	report.Notes = append(report.Notes, mem.stop())
	if lim != nil {
		lim.Lift()
		report.Notes = append(report.Notes, fmt.Sprintf("consumption was limited to %.0f msgs/s while sending (%.1f s), then ran free to drain the backlog", cfg.consumeRate, sendEnd.Seconds()))
	}
	// Wait until the receiver has consumed and acknowledged everything:
	// also after an interrupt, which ended ctx, until a second one ends
	// abortOf(ctx).
	if interrupted {
		fmt.Fprintln(stderr, "loadgen: interrupted; waiting for the receiver to acknowledge what was sent (interrupt again to stop waiting)")
	}
	drainStart := time.Now()
	drainCtx, cancel := context.WithTimeout(abortOf(ctx), drainTimeout(cfg))
	var drainErr error
	for _, s := range senders {
		if err := s.Flush(drainCtx); err != nil {
			drainErr = err
			break
		}
	}
	cancel()
	drained := time.Since(drainStart)
	// Cut short by the user, not by the timeout: what had not arrived was
	// not waited for, so it is not known to be lost.
	aborted := drainErr != nil && abortOf(ctx).Err() != nil
	elapsed := time.Since(start)
	// The faults are marked until everything sent was acknowledged: a
	// partition that began late (it waits for the node's first write or
	// read once due) may heal after the sending, and holds what it held
	// until then.
	stopMarks()
	prog.Stop()

	txs, rxs := tx.Stats(), rx.Stats()
	report.DurationS = elapsed.Seconds()
	report.MessagesSent = sent
	report.MessagesDelivered = chk.delivered.Load()
	report.Duplicates = chk.duplicates.Load()
	report.Lost = max(sent-report.MessagesDelivered, chk.gaps.Load())
	report.WireBytes = int64(txs.Totals().WireOut + rxs.Totals().WireOut)
	for _, c := range tx.ChannelStats() {
		report.Resent += int64(c.Resent)
	}
	report.Faults = faultMap(faults, txs.Faults, rxs.Faults)
	txt, rxt := txs.Totals(), rxs.Totals()
	chances := faultChances{dataFrames: int64(txt.DataFrames + rxt.DataFrames), ctrlFrames: int64(txt.CtrlFrames + rxt.CtrlFrames),
		ran: time.Since(faultsStart)}
	report.Failures = checkTransportFaults(faults, txs.Faults.Add(rxs.Faults), chances)
	if interrupted {
		f := fmt.Sprintf("interrupted after %.1f s of the %v asked for: what it measured is a shorter run's", sendEnd.Seconds(), cfg.duration)
		if aborted {
			f += fmt.Sprintf("; a second interrupt ended the wait for acknowledgements after %.1f s, when %d of the %d messages sent had not reached the receiver (counted neither as delivered nor as lost)",
				drained.Seconds(), sent-report.MessagesDelivered, sent)
		}
		report.Failures = append(report.Failures, f)
	}
	if n := chancesNote(faults, chances); n != "" {
		report.Notes = append(report.Notes, n)
	}
	report.Timeline = prog.Samples()
	report.Events = prog.Events()
	report.Finish(rec)
	report.ThroughputBytesPerS = float64(chk.bytes.Load()) / elapsed.Seconds()
	ok := report.Duplicates == 0 && report.Lost == 0 && report.MessagesDelivered == sent
	report.ExactlyOnce = &ok
	if aborted {
		// Only what the receiver saw can be judged: a gap or a duplicate
		// still fails exactly-once; otherwise it was not checked.
		report.Lost = chk.gaps.Load()
		if report.Duplicates == 0 && report.Lost == 0 {
			report.ExactlyOnce = nil
		}
	} else if drainErr != nil {
		report.Notes = append(report.Notes, fmt.Sprintf("not every message was acknowledged within %v: %v", drainTimeout(cfg), drainErr))
	}
	if rec.Clamped() > 0 {
		report.Notes = append(report.Notes, fmt.Sprintf("%d latencies were beyond the histogram's range and clamped", rec.Clamped()))
	}
	if n := chk.malformed.Load(); n > 0 {
		report.Notes = append(report.Notes, malformedNote(n))
	}
	return report, rec, nil
}

// markFaults marks on the run's timeline each connection reset the nodes
// inject and when a partition started and healed, as they happen (drops,
// duplicates and delays are too many to mark; the report counts them). It
// returns the function that stops it, after a last look: what happened
// since the last tick is marked too, where a select that found both the
// tick and the stop ready would have left it out half the time.
func markFaults(prog *bench.Progress, nodes ...*transport.Node) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var resets uint64
		started := make([]bool, len(nodes))
		healed := make([]bool, len(nodes))
		for stopped := false; !stopped; {
			select {
			case <-stop:
				stopped = true
			case <-t.C:
			}
			var now uint64
			for i, n := range nodes {
				f := n.Stats().Faults
				now += f.Resets
				if p := n.Faults().PartitionFor; p > 0 {
					if !started[i] && f.PartitionTime > 0 {
						started[i] = true
						prog.Mark("partition", fmt.Sprintf("partition of %v began", p))
					}
					if !healed[i] && f.PartitionTime == p {
						healed[i] = true
						prog.Mark("heal", "the partition healed")
					}
				}
			}
			for range now - resets {
				prog.Mark("reset", "connection reset by the fault injector")
			}
			resets = now
		}
	}()
	return func() { close(stop); <-done }
}

func drainTimeout(transportConfig) time.Duration { return 2 * time.Minute }

// faultMap is the report's count of each fault kind the nodes injected
// (stats): those that happened, and those configured in f, happened or
// not, so that a report shows a configured fault's 0.
func faultMap(f transport.Faults, stats ...transport.FaultStats) map[string]int64 {
	var s transport.FaultStats
	for _, f := range stats {
		s = s.Add(f)
	}
	m := map[string]int64{
		"drop": int64(s.DataDropped), "ctrldrop": int64(s.CtrlDropped), "dup": int64(s.Duplicated),
		"reset": int64(s.Resets), "ge_drop": int64(s.GEDropped), "delayed": int64(s.Delayed),
		"throttled_bytes": int64(s.Throttled), "partition_held": int64(s.PartitionHeld),
		"partition_reads": int64(s.PartitionReads), "partition_ms": s.PartitionTime.Milliseconds(),
	}
	configured := map[string]bool{
		"drop": f.Drop > 0, "ctrldrop": f.CtrlDrop > 0, "dup": f.Dup > 0, "reset": f.Reset > 0,
		"ge_drop": f.GE != (transport.GilbertElliott{}), "delayed": f.Delay > 0 || f.Jitter > 0,
		"throttled_bytes": f.Bandwidth > 0, "partition_held": f.PartitionFor > 0, "partition_ms": f.PartitionFor > 0,
	}
	for k, v := range m {
		if v == 0 && !configured[k] {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}
