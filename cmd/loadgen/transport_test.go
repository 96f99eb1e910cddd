package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/load"
	"github.com/sluicehq/sluice/transport"
)

func TestTransportDeliveryChoice(t *testing.T) {
	base := transportConfig{size: 100, duration: time.Second, channels: 1, connections: 1}
	for _, c := range []struct {
		delivery string
		consume  float64
		inline   bool
		err      string
	}{
		{"auto", 0, true, ""},
		{"", 0, true, ""}, // a coordinator's plan: auto
		{"auto", 1000, false, ""},
		{"inline", 0, true, ""},
		{"goroutine", 0, false, ""},
		{"goroutine", 1000, false, ""},
		{"inline", 1000, false, "cannot be combined with --consume-rate"},
		{"loop", 0, false, "--delivery must be"},
	} {
		cfg := base
		cfg.delivery, cfg.consumeRate = c.delivery, c.consume
		err := cfg.validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("--delivery %q --consume-rate %v: %v", c.delivery, c.consume, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("--delivery %q --consume-rate %v: error %v, want one saying %q", c.delivery, c.consume, err, c.err)
		case c.err == "" && cfg.inline() != c.inline:
			t.Errorf("--delivery %q --consume-rate %v: inline %v, want %v", c.delivery, c.consume, cfg.inline(), c.inline)
		}
	}
}

// --socket-buffer and --peer-budget reach the child processes of the engine
// scenarios only when they are not the default, and a size out of range is
// refused by name.
func TestNodeFlags(t *testing.T) {
	parse := func(args ...string) nodeFlags {
		t.Helper()
		var nf nodeFlags
		fs := newFlagSet("test", "", io.Discard)
		nf.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return nf
	}
	def := parse()
	if a := def.args(); len(a) != 0 {
		t.Errorf("default flags give a child %q, want nothing", a)
	}
	nf := parse("--socket-buffer", "65536")
	if got := parse(nf.args()...); got.socketBuffer != 65536 {
		t.Errorf("a child parsing %q gets --socket-buffer %d, want 65536", nf.args(), got.socketBuffer)
	}
	if _, err := nf.options(); err != nil {
		t.Fatal(err)
	}
	bad := parse("--socket-buffer", "-1")
	if _, err := bad.options(); err == nil || !strings.Contains(err.Error(), "--socket-buffer") {
		t.Errorf("--socket-buffer -1: error %v, want one naming the flag", err)
	}
	nf = parse("--peer-budget", "8388608")
	if got := parse(nf.args()...); got.peerBudget != 8<<20 {
		t.Errorf("a child parsing %q gets --peer-budget %d, want 8 MiB", nf.args(), got.peerBudget)
	}
	if _, err := nf.options(); err != nil {
		t.Fatal(err)
	}
	bad = parse("--peer-budget", "1000")
	if _, err := bad.options(); err == nil || !strings.Contains(err.Error(), "--peer-budget") {
		t.Errorf("--peer-budget 1000: error %v, want one naming the flag", err)
	}
}

// The checker counts each message once, duplicates and gaps by sequence
// number, and records one latency for each accepted message, also when it
// records a run of equal latencies as one value with its count.
func TestCheckerCountsAndRecordsEachMessage(t *testing.T) {
	k := &checker{chans: make([]chanCheck, 1)}
	rec := bench.NewRecorder()
	msg := func(sent int64, seq uint64) transport.Message {
		p := make([]byte, headerLen)
		binary.LittleEndian.PutUint64(p, uint64(sent))
		binary.LittleEndian.PutUint64(p[8:], seq)
		return transport.Message{Payload: p}
	}
	const now = 10_000_000
	// Three stamped together, one later, a duplicate, then a gap of two.
	k.observe(0, []transport.Message{
		msg(now-5000, 0), msg(now-5000, 1), msg(now-5000, 2), msg(now-2000, 3), msg(now-2000, 3), msg(now-1000, 6),
	}, now, rec)
	if d, dup, g := k.delivered.Load(), k.duplicates.Load(), k.gaps.Load(); d != 5 || dup != 1 || g != 2 {
		t.Fatalf("delivered %d, duplicates %d, gaps %d; want 5, 1, 2", d, dup, g)
	}
	h := rec.Snapshot()
	if h.TotalCount() != 5 {
		t.Fatalf("recorded %d latencies, want 5 (one per accepted message)", h.TotalCount())
	}
	want := bench.NewRecorder()
	for _, ns := range []int64{5000, 5000, 5000, 2000, 1000} {
		want.Record(ns)
	}
	if !h.Equals(want.Snapshot()) {
		t.Errorf("recorded %v, want %v", h.Distribution(), want.Snapshot().Distribution())
	}
}

// A payload too short for the header is counted as malformed, apart: it is
// not delivered, and not a gap (the sequence number it should have carried
// is, once the next arrives).
func TestCheckerCountsShortPayloadsAsMalformed(t *testing.T) {
	k := &checker{chans: make([]chanCheck, 1)}
	stamped := func(seq uint64) transport.Message {
		p := make([]byte, headerLen)
		binary.LittleEndian.PutUint64(p[8:], seq)
		return transport.Message{Payload: p}
	}
	k.observe(0, []transport.Message{stamped(0), {Payload: []byte("short")}, stamped(2)}, 0, bench.NewRecorder())
	if d, g, m := k.delivered.Load(), k.gaps.Load(), k.malformed.Load(); d != 2 || g != 1 || m != 1 {
		t.Fatalf("delivered %d, gaps %d, malformed %d; want 2 delivered, 1 gap (sequence 1) and 1 malformed", d, g, m)
	}
}

// A payload whose filler is not loadgen's (a byte changed on the way, a
// payload cut short) is malformed too: not delivered, so that the run's
// check fails. The good payloads come from load.Payload, the senders' own.
func TestCheckerCountsPayloadsWithAChangedByteAsMalformed(t *testing.T) {
	k := &checker{chans: make([]chanCheck, 1)}
	stamped := func(seq uint64) transport.Message {
		p := load.Payload(100)
		bench.Stamp(p, 0, seq)
		return transport.Message{Payload: p}
	}
	changed := stamped(1)
	changed.Payload[99] ^= 1
	cut := stamped(3)
	cut.Payload = cut.Payload[:99]
	cut.Payload[98] ^= 1
	k.observe(0, []transport.Message{stamped(0), changed, stamped(2), cut, stamped(4)}, 0, bench.NewRecorder())
	if d, g, m := k.delivered.Load(), k.gaps.Load(), k.malformed.Load(); d != 3 || g != 2 || m != 2 {
		t.Fatalf("delivered %d, gaps %d, malformed %d; want 3 delivered, 2 gaps (sequences 1 and 3) and 2 malformed", d, g, m)
	}
	if !bench.Filled(load.Payload(maxSize)) || !bench.Filled(load.Payload(headerLen)) {
		t.Error("load.Payload's own payloads are not well formed")
	}
}

// --producers sets the full-speed senders; 0 means half the cores, at
// least one; a negative count is refused.
func TestProducerCount(t *testing.T) {
	base := transportConfig{size: 100, duration: time.Second, channels: 10, connections: 1}
	c := base
	c.producers = 3
	if got := c.producerCount(); got != 3 {
		t.Errorf("--producers 3 gives %d producers", got)
	}
	c.producers = 0
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for procs, want := range map[int]int{1: 1, 2: 1, 3: 1, 4: 2, 8: 4} {
		runtime.GOMAXPROCS(procs)
		if got := c.producerCount(); got != want {
			t.Errorf("auto with GOMAXPROCS %d gives %d producers, want %d", procs, got, want)
		}
	}
	c.producers = -1
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "--producers") {
		t.Errorf("--producers -1: %v, want an error naming the flag", err)
	}
}

// A transport run with a partition marks on its timeline when the partition
// began and when it healed, and every message still arrives once; the other
// new faults are counted in the report. The partition holds some of the
// run's traffic however slow the machine: it is timed from the start of
// the run, not from the node's, and it begins with the node's first write
// or read once due. On a loaded machine (2 cores busy with four CPU-bound
// processes, this one at nice 15, -race) it held nothing in 3 runs of 30
// when timed from the node's start (the dial and the channels' opening
// took up to 1.6 s, and it was over before the senders began), and in 7 of
// 30 when timed from the run's start only (the node wrote in bursts 100 to
// 600 ms apart, none inside the 300 ms). The heal may come after the
// sending, the partition having begun late, and is marked all the same.
func TestTransportRunMarksThePartitionOnItsTimeline(t *testing.T) {
	cfg := transportConfig{size: 100, duration: time.Second, rate: 20000, channels: 4, connections: 1, seed: 3,
		faults: "delay=1ms,jitter=500us,ge=0.01:0.3:0.5,partition=300ms@300ms", delivery: "auto"}
	r, _, err := runTransport(t.Context(), cfg, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r.ExactlyOnce == nil || !*r.ExactlyOnce {
		t.Fatalf("not exactly once: sent %d, delivered %d, %d lost, %d duplicates", r.MessagesSent, r.MessagesDelivered, r.Lost, r.Duplicates)
	}
	began, healed := -1, -1
	for i, e := range r.Events {
		switch e.Kind {
		case "partition":
			began = i
		case "heal":
			healed = i
		}
	}
	if began < 0 || healed < began || r.Events[began].T < 0.3 {
		t.Errorf("events %+v: want a partition 300 ms or more into the run, then its heal", r.Events)
	}
	for _, k := range []string{"delayed", "ge_drop", "partition_held", "partition_ms"} {
		if r.Faults[k] == 0 {
			t.Errorf("the report's faults %v count no %s", r.Faults, k)
		}
	}
	if len(r.Failures) > 0 {
		t.Errorf("the run failed: %q", r.Failures)
	}
	var svg strings.Builder
	if err := bench.WriteTimelineSVG(&svg, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(svg.String(), ">partition<") || !strings.Contains(svg.String(), ">heal<") {
		t.Error("timeline.svg does not label the partition and its heal")
	}
}

// run refuses the flags of another scenario and values out of range,
// rather than ignoring them or running with a default the report does not
// record.
func TestRunRefusesFlagsOfAnotherScenarioAndValuesOutOfRange(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.txt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rate", "1000"}, "run: --rate is for --scenario transport, not pipeline"},
		{[]string{"--scenario", "pipeline", "--channels", "4"}, "--channels is for --scenario transport, not pipeline"},
		{[]string{"--scenario", "pipeline", "--connections", "2"}, "--connections is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--producers", "2"}, "--producers is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--delivery", "inline"}, "--delivery is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--consume-rate", "10"}, "--consume-rate is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--input", "x"}, "--input is for --scenario wordcount, not pipeline"},
		{[]string{"--scenario", "wordcount", "--input", "x", "--output", "y", "--rate", "10"}, "--rate is for --scenario transport, not wordcount"},
		{[]string{"--scenario", "wordcount", "--input", "x", "--output", "y", "--size", "200"}, "--size is for --scenario transport or pipeline, not wordcount"},
		{[]string{"--scenario", "wordcount", "--input", "x", "--output", "y", "--duration", "3s"}, "--duration is for --scenario transport or pipeline"},
		{[]string{"--scenario", "transport", "--nodes", "3"}, "--nodes is for --scenario wordcount or pipeline, not transport"},
		{[]string{"--scenario", "transport", "--parallelism", "4"}, "--parallelism is for --scenario wordcount or pipeline"},
		{[]string{"--scenario", "pipeline", "--parallelism", "0"}, "run: --parallelism must be >= 1, got 0"},
		{[]string{"--scenario", "wordcount", "--input", "x", "--output", "y", "--parallelism", "-2"}, "--parallelism must be >= 1, got -2"},
		{[]string{"--scenario", "pipeline", "--nodes", "0"}, "--nodes must be >= 1, got 0"},
		{[]string{"--scenario", "pipeline", "--checkpoint-every", "0s"}, "--checkpoint-every must be positive, got 0s"},
		{[]string{"--scenario", "pipeline", "--max-restarts", "-1"}, "--max-restarts must not be negative"},
		{[]string{"--scenario", "pipeline", "--duration", "0s"}, "--duration must be positive, got 0s"},
		{[]string{"--scenario", "sort"}, "unknown scenario \"sort\""},
		{[]string{"--scenario", "wordcount", "--input", missing, "--output", "y"}, "run: --input: open " + missing},
		{[]string{"--scenario", "wordcount", "--input", t.TempDir(), "--output", "y"}, "run: --input: "}, // a directory
	} {
		err := run(context.Background(), append([]string{"run"}, c.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadgen run %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// The largest payload the flags allow goes through the transport whole.
func TestTheLargestSizeAllowedIsSent(t *testing.T) {
	cfg := transportConfig{size: maxSize, duration: 200 * time.Millisecond, rate: 20, channels: 1, connections: 1, delivery: "auto"}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	r, _, err := runTransport(t.Context(), cfg, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if r.MessagesSent == 0 || r.ExactlyOnce == nil || !*r.ExactlyOnce {
		t.Fatalf("%d messages of %d bytes sent, %d delivered, %d lost: want every one delivered", r.MessagesSent, maxSize, r.MessagesDelivered, r.Lost)
	}
}

// send refuses the transport flags that belong to run or to serve rather
// than ignoring them, and serve checks its delivery flags as run does.
func TestServeAndSendRefuseFlagsThatAreNotTheirs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--duration", "3s"}, "send is bounded by --messages"},
		{[]string{"send", "--consume-rate", "1000"}, "give it to 'loadgen serve'"},
		{[]string{"send", "--delivery", "goroutine"}, "give it to 'loadgen serve'"},
		{[]string{"send", "--seed", "3"}, "--seed seeds --faults"},
		{[]string{"send", "--faults", "drop=0.1"}, "--faults is for 'loadgen run'"},
		{[]string{"send", "--messages", "0"}, "--messages must be >= 1"},
		{[]string{"send", "--size", "2000000"}, "--size 2000000 is above 1048561"},
		{[]string{"send", "--channels", "100000"}, "--channels must be 1 to 65535"},
		{[]string{"serve", "--delivery", "inline", "--consume-rate", "10"}, "cannot be combined with --consume-rate"},
		{[]string{"serve", "--delivery", "sometimes"}, "--delivery must be auto, inline or goroutine"},
		{[]string{"serve", "--consume-rate", "-1"}, "--consume-rate must not be negative"},
	} {
		err := run(context.Background(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadgen %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// bench's receiving side fails its case when malformed payloads arrived,
// saying how many, rather than count them as missing.
func TestBenchSinkFailsOnMalformedPayloads(t *testing.T) {
	s, err := startSinkSide(sideSpec{Kind: sideNodeSink, Backend: "default", Size: headerLen})
	if err != nil {
		t.Fatal(err)
	}
	s.chk.observe(0, []transport.Message{{Payload: []byte("short")}}, 0, s.rec)
	if _, _, err := s.finish(t.Context()); err == nil || !strings.Contains(err.Error(), "1 messages arrived with payloads shorter than the 16-byte header") {
		t.Fatalf("finish: %v, want an error counting the malformed payload", err)
	}
}

// A rate that is not a number, or infinite, is refused before anything
// runs: NaN passed the checks, ran the whole --duration at full speed
// (NaN > 0 is false) and then failed writing a report whose configuration
// JSON cannot hold.
func TestRatesThatAreNotFiniteAreRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--scenario", "transport", "--rate", "NaN"}, "--rate must be"},
		{[]string{"run", "--scenario", "transport", "--rate", "+Inf"}, "--rate must be"},
		{[]string{"run", "--scenario", "transport", "--consume-rate", "NaN"}, "--consume-rate must be"},
		{[]string{"run", "--scenario", "transport", "--consume-rate", "Inf"}, "--consume-rate must be"},
		{[]string{"send", "--to", closedAddr(t), "--rate", "NaN"}, "--rate must be"},
		{[]string{"serve", "--consume-rate", "NaN"}, "--consume-rate must be"},
		{[]string{"sweep", "--sizes", "100", "--channel-counts", "1", "--rate", "NaN"}, "--rate must be"},
	} {
		// serve runs until its context ends: one that has ended already
		// makes a serve that took the flag return at once.
		ctx, cancel := context.WithCancel(t.Context())
		if c.args[0] == "serve" {
			cancel()
		}
		args := append(c.args, "--out", t.TempDir())
		if c.args[0] == "run" || c.args[0] == "sweep" {
			args = append(args, "--duration", "100ms")
		}
		if c.args[0] == "serve" {
			args = append(c.args, "--listen", "127.0.0.1:0")
		}
		err := run(ctx, args, io.Discard, io.Discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadgen %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// --producers sets the goroutines of a full-speed run only: a fixed rate
// is sent by one driver goroutine, so the flag is refused with --rate, and
// a fixed-rate report records the one producer it had, not half the cores.
func TestProducersAreForTheFullSpeedRunOnly(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--scenario", "transport", "--rate", "1000", "--producers", "2", "--duration", "100ms"},
		{"send", "--to", closedAddr(t), "--rate", "1000", "--producers", "2"},
	} {
		err := run(t.Context(), append(args, "--out", t.TempDir()), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--producers") {
			t.Errorf("loadgen %v: error %v, want one naming --producers", args, err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	c := transportConfig{size: 100, duration: time.Second, rate: 1000, channels: 8, connections: 1}
	if got := c.asMap()["producers"]; got != 1 {
		t.Errorf("a fixed-rate run's configuration records %v producers on 4 cores; its one driver sends everything", got)
	}
}

// An --out that cannot be a directory is refused before the run, naming
// the flag: it was found only when the report was written, after the whole
// run, whose summary was then not printed either ('mkdir X: not a
// directory', and nothing on stdout).
func TestAnOutputDirectoryThatCannotBeWrittenIsRefusedBeforeTheRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--scenario", "transport", "--duration", "100ms"},
		{"sweep", "--sizes", "100", "--channel-counts", "1", "--duration", "100ms"},
		{"send", "--to", closedAddr(t)},
		{"coordinate", "--agents", closedAddr(t) + "," + closedAddr(t), "--scenario", "transport", "--duration", "100ms"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), append(args, "--out", file), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "--out "+file) {
			t.Errorf("loadgen %v --out %s: error %v, want one naming --out", args, file, err)
		}
		if strings.Contains(stderr.String(), "messages") || stdout.Len() > 0 {
			t.Errorf("loadgen %v --out %s ran before refusing it:\n%s%s", args, file, stderr.String(), stdout.String())
		}
	}
}

// A transport run interrupted (Ctrl-C, SIGTERM: its context ends) while
// sending still writes its report, but the report says the run was cut
// short and the exit status is not success: it used to exit 0 with a
// report like a complete run's, its configuration giving the duration
// asked for and nothing saying it ran a fraction of it.
func TestAnInterruptedTransportRunSaysSoAndFails(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	progress := &syncBuffer{}
	go func() { // interrupt once the first second's progress line shows it is sending
		for !strings.Contains(progress.String(), "t=1s") && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	var stdout bytes.Buffer
	err := run(ctx, []string{"run", "--scenario", "transport", "--rate", "20000", "--duration", "1h", "--json", "--out", t.TempDir()}, &stdout, progress)
	if !errors.Is(err, errFailed) || exitCode(err) == 0 {
		t.Errorf("an interrupted run returned %v (exit status %d), want a failed run's", err, exitCode(err))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r bench.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("no report: %v\n%s", err, stdout.String())
	}
	if f := strings.Join(r.Failures, "; "); !strings.Contains(f, "interrupted") {
		t.Errorf("the report's failures %q do not say the run was interrupted", f)
	}
	if md := stdout.String(); !strings.Contains(md, "The run FAILED: interrupted") {
		t.Errorf("the summary does not say the run was interrupted:\n%s", md)
	}
}
