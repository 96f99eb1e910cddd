package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// loadgen bench: every figure of issue 14 in one run, each as a ratio to a
// plain-TCP baseline (or the other backend) measured in the same run, with
// its goal and whether it was met.

// benchConfig is loadgen bench's configuration.
type benchConfig struct {
	size       int
	duration   time.Duration
	rate       float64
	peers      int // the peers of the peers group's sending node
	topologies string
	groups     map[string]bool // the case groups to measure
	out        string
	json       bool
	repeat     int
}

// Topologies.
const (
	topoOne = "one process"
	topoTwo = "two processes"
)

// The goals of issue 14.
var (
	goalThroughput = bench.Goal{On: "ratio", Op: ">=", Limit: 0.8}  // of the plain-TCP ceiling
	goalFixedP99   = bench.Goal{On: "value", Op: "<=", Limit: 1000} // µs
	goalFixedP999  = bench.Goal{On: "value", Op: "<=", Limit: 2000} // µs
	goalFixedVsNet = bench.Goal{On: "ratio", Op: "<=", Limit: 1.25} // of the net backend's p99
	goalPingP50    = bench.Goal{On: "ratio", Op: "<=", Limit: 2}    // of plain TCP's
	goalPingP99    = bench.Goal{On: "ratio", Op: "<=", Limit: 4}    // of plain TCP's
)

func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", "Measures, in one run, the transport's throughput (one channel at full speed: runs as\n"+
		"'loadgen run --scenario transport' sends them, and one Send per message), its latency at a fixed rate, and\n"+
		"its ping-pong round trip, for the default and the net backend, each beside plain TCP measured in the same run\n"+
		"(the 64 KiB ideal-batching ceiling, measured before and after the transport's cases, the faster counting,\n"+
		"and the same under the flow control of the transport's default window, acks read on a goroutine of their own;\n"+
		"the same fixed-rate driver writing each message; a TCP echo, and one whose ends hand each message to another\n"+
		"goroutine, as a node's delivery does; and, as the machine's floor, the driver alone\n"+
		"and how long the CPUs stall under a thread spinning on each), in one process and across two (this binary\n"+
		"re-executed as 'loadgen benchpeer' hosts the receiving end). Prints every figure with its baseline, the\n"+
		"ratio, the goal of issue 14 and whether it was met, and writes bench.json and bench.md to --out. With\n"+
		"--repeat N it measures everything N times and adds a summary: on a small VM one run's verdict on a goal\n"+
		"near its limit can flip from one minute to the next. Exits with status 1 if a checked case lost or repeated\n"+
		"a message; goals not met do not change the exit status.", stderr)
	var c benchConfig
	fs.IntVar(&c.size, "size", 100, "payload bytes per message (at least 16: send time and sequence number)")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "how long each case runs (16 in one process and 18 across two with the default groups, 34 in all, and 5 more a topology with peers; the CPU stall probe at most 3s)")
	cases := fs.String("cases", strings.Join(defaultBenchGroups, ","), "which groups of cases to measure, each with its own baselines: "+strings.Join(benchGroups, ", ")+
		"\n(peers: one node sending to --peers peers, a channel each, with each backend; the default backend is chosen for a\nnode per process with tens of peers)")
	fs.IntVar(&c.peers, "peers", 20, fmt.Sprintf("how many peers the peers group's node sends to, 1 to %d", maxCount))
	fs.Float64Var(&c.rate, "rate", 100_000, "messages per second of the fixed-rate cases")
	fs.StringVar(&c.topologies, "topology", "both", "which topologies to measure: one (two nodes in one process), two (two processes) or both")
	fs.StringVar(&c.out, "out", filepath.Join("results", "local", "bench"), "directory for bench.json and bench.md")
	fs.BoolVar(&c.json, "json", false, "print the scorecard (with --repeat, the summary) as one JSON object on the last line of stdout")
	fs.IntVar(&c.repeat, "repeat", 1, "measure everything this many times, back to back: each run's scorecard goes to --out/N/, and a summary\n"+
		"(each row's figure in every run, their median and range, and in how many runs each goal was met) to --out/summary.json and .md")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	var topos []string
	switch c.topologies {
	case "one":
		topos = []string{topoOne}
	case "two":
		topos = []string{topoTwo}
	case "both":
		topos = []string{topoOne, topoTwo}
	default:
		return fmt.Errorf("--topology must be one, two or both, got %q", c.topologies)
	}
	c.groups = map[string]bool{}
	for _, g := range strings.Split(*cases, ",") {
		if g = strings.TrimSpace(g); !slices.Contains(benchGroups, g) {
			return fmt.Errorf("--cases: unknown group %q (want some of %s)", g, strings.Join(benchGroups, ","))
		}
		c.groups[g] = true
	}
	switch {
	case c.size < headerLen || c.size > bench.MaxSize:
		return fmt.Errorf("--size %d: want %d to %d bytes", c.size, headerLen, bench.MaxSize)
	case c.duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", c.duration)
	case !(c.rate > 0) || math.IsInf(c.rate, 0):
		return fmt.Errorf("--rate must be a positive number, got %v", c.rate)
	case c.repeat < 1:
		return fmt.Errorf("--repeat must be at least 1, got %d", c.repeat)
	case c.peers < 1 || c.peers > maxCount:
		return fmt.Errorf("--peers must be 1 to %d, got %d", maxCount, c.peers)
	}
	// Before the first case, as run and sweep do: a scorecard that cannot
	// be written is otherwise found after minutes of measuring.
	if err := (&outputFlags{out: c.out}).check(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if c.repeat == 1 {
		sc, err := benchOnce(ctx, c, topos, *cases, c.out, stdout, stderr)
		if err != nil {
			return err
		}
		return benchDone(stdout, c.json, sc, sc.ExactlyOnce)
	}
	var cards []*bench.Scorecard
	for k := 1; k <= c.repeat; k++ {
		fmt.Fprintf(stderr, "loadgen bench: run %d of %d\n", k, c.repeat)
		sc, err := benchOnce(ctx, c, topos, *cases, filepath.Join(c.out, strconv.Itoa(k)), stdout, stderr)
		if err != nil {
			return fmt.Errorf("run %d of %d: %w", k, c.repeat, err)
		}
		cards = append(cards, sc)
		fmt.Fprintln(stdout)
	}
	sum, err := bench.Summarize(cards)
	if err != nil {
		return err
	}
	if err := sum.WriteText(stdout); err != nil {
		return err
	}
	if err := bench.WriteSummary(c.out, "summary", sum); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "loadgen bench: wrote %s and %s\n", filepath.Join(c.out, "summary.json"), filepath.Join(c.out, "summary.md"))
	return benchDone(stdout, c.json, sum, sum.ExactlyOnce)
}

// benchDone prints v, the scorecard or the summary, as one line of JSON
// if asked to, and fails with errFailed unless every checked run was
// exactly once.
func benchDone(stdout io.Writer, asJSON bool, v any, exactlyOnce bool) error {
	if asJSON {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("bench: encoding the results: %w", err)
		}
		if _, err := stdout.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	if !exactlyOnce {
		return errFailed
	}
	return nil
}

// benchOnce measures every selected case once, prints the scorecard and
// writes it to out as bench.json and bench.md.
func benchOnce(ctx context.Context, c benchConfig, topos []string, cases, out string, stdout, stderr io.Writer) (*bench.Scorecard, error) {
	title := fmt.Sprintf("loadgen bench: %d B messages, one channel", c.size)
	if c.groups["peers"] {
		title += fmt.Sprintf(" (peers: %d peers, a channel each)", c.peers)
	}
	sc := bench.NewScorecard(title, map[string]any{
		"size": c.size, "duration_per_case": c.duration.String(), "fixed_rate": c.rate, "topologies": topos, "cases": cases, "peers": c.peers,
	})
	sc.Notes = append(sc.Notes,
		"throughput is messages delivered and checked by the receiver divided by the time from the first send to the last delivery",
		"the receiving transport tasks run inline (Node.HandleInline) in the throughput and fixed-rate cases, as loadgen run --scenario transport does by default; the ping-pong tasks run on their own goroutines (Node.Handle): the echo's handler sends each pong, the pinger's takes it and sends the next ping (plain TCP's pinger reads and writes on one goroutine); the hand-off rows are the harness before, whose handler handed each pong to a waiting goroutine that sent the next ping, as BenchmarkTransportPingPong does; plain TCP with hand-offs reads each message on one goroutine and hands it to another that answers it (the pinger's pong to the goroutine that sends the next ping, the echo's ping to the goroutine that writes it back): the hand-offs a node's delivery to its tasks makes, which plain TCP's one-goroutine pinger and echo do not",
		fmt.Sprintf("the fixed-rate driver sleeps on a Go timer and then in the kernel (nanosleep) for the last 2 ms of each wait, never spinning, and sends what fell due in a burst (bench.FixedRate, load.Clock), for the transport and plain TCP alike; latency is from each message's intended send time; the driver alone, sending nothing, is how late this machine lets it hand messages over, a floor under every fixed-rate figure; plain TCP writes each message with a system call of its own, the best latency while the machine keeps up with %v writes a second, and the worst once it does not (its driver lag says which)", c.rate),
		"CPU stalls: before the fixed-rate cases a thread pinned to each CPU spins for up to 3 s and counts every gap of 50 µs or more between its clock reads (bench.MeasureStalls): the guest's, when its kernel ran something else there, or the host's, when the thread was not switched out and the (virtual) CPU itself stopped; a p99.9 of 1 M messages at 100 k msgs/s is the 1000th latest, within reach of a few such stalls",
		"goals are the default backend's (issue 14); the net backend's rows are for comparison",
		"plain TCP with flow control: the ceiling's writer and reader, but the writer keeps at most as many messages unacknowledged as a channel's default window holds and the reader acknowledges as often as that window asks for acks (bench.FlowWriter, bench.ReadPackedAcking), the acks read on a goroutine of the writer's own that wakes it when it waits, as a node's event loop wakes a producer waiting for credit: what a window and its acks cost any TCP sender on this machine, beside which the transport's runs are held too (no goal)")
	if c.groups["peers"] {
		sc.Notes = append(sc.Notes, fmt.Sprintf("peers: one node sends to %d nodes, a channel to each, at full speed (runs as the transport scenario's producers send them) and at the fixed rate (message i to node i mod %d); the %d receiving nodes all run in the receiving process (its loops shared, as any process's nodes share them), the sending node alone in its own in the two-process topology; issue 14 asks for the default backend to be the one that measures best for a node per process with tens of peers, so these rows set the default backend against the net backend in the same run", c.peers, c.peers, c.peers))
	}
	if c.topologies != "one" {
		sc.Notes = append(sc.Notes, "two processes: this binary re-executed as 'loadgen benchpeer' (os.Executable) hosts the receiving node, TCP reader or echo; it is driven over a pipe of JSON lines")
		if c.groups["throughput"] {
			sc.Notes = append(sc.Notes, "two processes: the runs case, and plain TCP with flow control, are measured once more with the sending process at GOMAXPROCS=1 (runtime.GOMAXPROCS, for that case only), diagnostics with no goal: the same writer, but it and whatever reads its acks hand credit and the CPU to each other on one thread instead of waking each other's threads; it is not a setting to use (with one P a gnet loop waiting in epoll_wait holds it, and fixed-rate latency reads milliseconds)")
		}
	}
	steps := 0
	for _, t := range topos {
		prefix := prefixOne
		if t == topoTwo {
			prefix = prefixTwo
		}
		steps += len((&bencher{cfg: c, prefix: prefix}).steps())
	}
	// The fixed group's CPU stall probe, one a topology, runs at most
	// stallProbe and is not among the cases --duration documents.
	probes := ""
	if c.groups["fixed"] {
		steps -= len(topos)
		probes = fmt.Sprintf(" and %d CPU stall probe(s) of %v", len(topos), min(c.duration, stallProbe))
	}
	fmt.Fprintf(stderr, "loadgen bench: %s; %d cases of %v each%s\n", sc.Machine, steps, c.duration, probes)
	start := time.Now()
	for _, topo := range topos {
		if err := benchTopology(ctx, c, topo, sc, stderr); err != nil {
			return nil, err
		}
	}
	sc.DurationS = time.Since(start).Seconds()
	if err := sc.WriteText(stdout); err != nil {
		return nil, err
	}
	if err := bench.WriteScorecard(out, "bench", sc); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "loadgen bench: wrote %s and %s\n", filepath.Join(out, "bench.json"), filepath.Join(out, "bench.md"))
	return sc, nil
}

// benchGroups are the groups of cases, in the order they run: each group
// holds its own baselines, so any of them can run alone. The groups of
// issue 14's figures run by default; peers only when asked for.
var (
	benchGroups        = []string{"throughput", "fixed", "pingpong", "peers"}
	defaultBenchGroups = benchGroups[:3]
)

// benchStep is one case: a run of its group.
type benchStep struct {
	group string
	run   func(context.Context) error
}

// steps lists the cases of the groups b.cfg selects.
func (b *bencher) steps() []benchStep {
	// The runs case and plain TCP with flow control once more with the
	// sending process at one P: two processes only (in one, the receiving
	// node would share the P).
	var onePSteps []benchStep
	if b.prefix == prefixTwo {
		onePSteps = []benchStep{{"throughput", b.transportMaxOneP}, {"throughput", b.tcpFlowOneP}}
	}
	all := slices.Concat([]benchStep{
		{"throughput", b.tcpCeiling},
		{"throughput", b.tcpFlow},
		{"throughput", func(ctx context.Context) error { return b.transportMax(ctx, backendDefault, true) }},
		{"throughput", func(ctx context.Context) error { return b.transportMax(ctx, backendNet, true) }},
		{"throughput", func(ctx context.Context) error { return b.transportMax(ctx, backendDefault, false) }},
		{"throughput", func(ctx context.Context) error { return b.transportMax(ctx, backendNet, false) }},
	}, onePSteps, []benchStep{
		{"throughput", b.tcpCeilingAgain},
		{"fixed", b.vcpuStalls},
		{"fixed", b.driverAlone},
		{"fixed", b.tcpFixed},
		{"fixed", func(ctx context.Context) error { return b.transportFixed(ctx, backendDefault) }},
		{"fixed", func(ctx context.Context) error { return b.transportFixed(ctx, backendNet) }},
		{"pingpong", func(ctx context.Context) error { return b.tcpPingPong(ctx, false) }},
		{"pingpong", func(ctx context.Context) error { return b.tcpPingPong(ctx, true) }},
		{"pingpong", func(ctx context.Context) error { return b.transportPingPong(ctx, backendDefault, false) }},
		{"pingpong", func(ctx context.Context) error { return b.transportPingPong(ctx, backendDefault, true) }},
		{"pingpong", func(ctx context.Context) error { return b.transportPingPong(ctx, backendNet, false) }},
		{"peers", func(ctx context.Context) error { return b.transportPeers(ctx, backendDefault, false) }},
		{"peers", func(ctx context.Context) error { return b.transportPeers(ctx, backendNet, false) }},
		{"peers", b.tcpFixedPeers},
		{"peers", func(ctx context.Context) error { return b.transportPeers(ctx, backendDefault, true) }},
		{"peers", func(ctx context.Context) error { return b.transportPeers(ctx, backendNet, true) }},
	})
	var out []benchStep
	for _, s := range all {
		if b.cfg.groups[s.group] {
			out = append(out, s)
		}
	}
	return out
}

// The prefixes of the run IDs of each topology.
const (
	prefixOne = "1p/"
	prefixTwo = "2p/"
)

// benchTopology measures the selected cases of one topology and adds their
// runs and rows to sc.
func benchTopology(ctx context.Context, c benchConfig, topo string, sc *bench.Scorecard, stderr io.Writer) error {
	var h host = &localHost{}
	var ch *childHost
	prefix := prefixOne
	if topo == topoTwo {
		var err error
		if ch, err = startChildHost(stderr); err != nil {
			return err
		}
		h, prefix = ch, prefixTwo
		var stop context.CancelFunc
		ctx, stop = ch.watch(ctx)
		defer stop()
	}
	defer h.close()
	b := &bencher{cfg: c, host: h, topo: topo, prefix: prefix, sc: sc, stderr: stderr}
	for _, step := range b.steps() {
		cctx, cancel := context.WithTimeout(ctx, 3*c.duration+time.Minute)
		err := step.run(cctx)
		cancel()
		if err != nil {
			if ch != nil {
				// A case that failed because the second process died
				// says so, even if the socket noticed first.
				select {
				case <-ch.exited:
					if gone := ch.gone(); !errors.Is(err, gone) {
						err = fmt.Errorf("%w (%w)", err, gone)
					}
				case <-time.After(time.Second):
				}
			}
			return fmt.Errorf("bench: %s: %w", topo, err)
		}
	}

	for _, r := range benchRows(prefix, c.rate, c.peers) {
		if !c.groups[r.group] {
			continue
		}
		if (r.fig.Metric == "cpu_ns_per_msg" || r.fig.Run == prefix+"fixed/stalls") && !sc.HasFigures(r.fig) {
			continue // process CPU time and the stall probe need Linux
		}
		if err := sc.Compare(r.what, r.fig, r.base, r.baseName, r.goal); err != nil {
			return err
		}
	}
	return nil
}

// benchRow is one comparison of a topology's scorecard.
type benchRow struct {
	group    string
	what     string
	fig      bench.Ref
	base     *bench.Ref
	baseName string
	goal     *bench.Goal
}

// benchRows lists the comparisons of the runs whose IDs start with prefix.
func benchRows(prefix string, rate float64, peers int) []benchRow {
	ref := func(run, metric string) bench.Ref { return bench.Ref{Run: prefix + run, Metric: metric} }
	refp := func(run, metric string) *bench.Ref { r := ref(run, metric); return &r }
	const ceiling, tcp = "plain TCP ceiling", "plain TCP"
	rows := []benchRow{
		{"throughput", "throughput: plain TCP, ideal 64 KiB batching (the ceiling: the faster of two runs)", ref("tcp-ceiling", "msgs_per_s"), nil, "", nil},
		{"throughput", "throughput: plain TCP, ideal 64 KiB batching (the slower run)", ref("tcp-ceiling/slower", "msgs_per_s"), nil, "", nil},
		{"throughput", "throughput: plain TCP, ideal 64 KiB batching, with the default window's flow control (acks read on a goroutine of their own)", ref("tcp-flow", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, nil},
		{"throughput", "throughput: runs (as loadgen run --scenario transport), default backend", ref("max-runs/default", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, &goalThroughput},
		{"throughput", "throughput: runs, default backend, against plain TCP with the same flow control", ref("max-runs/default", "msgs_per_s"), refp("tcp-flow", "msgs_per_s"), "plain TCP with flow control", nil},
		{"throughput", "throughput: one Send per message, default backend", ref("max-send/default", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, &goalThroughput},
		{"throughput", "throughput: runs (as loadgen run --scenario transport), net backend", ref("max-runs/net", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, nil},
		{"throughput", "throughput: one Send per message, net backend", ref("max-send/net", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, nil},
	}
	if prefix == prefixTwo {
		rows = append(rows,
			benchRow{"throughput", "throughput: runs, default backend, the sending process at GOMAXPROCS=1 (a diagnostic: the Go scheduler's share of the gap)", ref(oneP, "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, nil},
			benchRow{"throughput", "throughput: plain TCP with the default window's flow control, the sending process at GOMAXPROCS=1 (a diagnostic)", ref("tcp-flow/gomaxprocs1", "msgs_per_s"), refp("tcp-ceiling", "msgs_per_s"), ceiling, nil})
	}
	// CPU per message, both ends together: where process CPU time can be
	// read (Linux), each throughput case's beside the ceiling's.
	rows = append(rows, benchRow{"throughput", "CPU per message: plain TCP, ideal 64 KiB batching", ref("tcp-ceiling", "cpu_ns_per_msg"), nil, "", nil})
	for _, c := range []struct{ run, what string }{
		{"max-runs/default", "runs, default backend"}, {"max-send/default", "one Send per message, default backend"},
		{"max-runs/net", "runs, net backend"}, {"max-send/net", "one Send per message, net backend"},
	} {
		rows = append(rows, benchRow{"throughput", "CPU per message: " + c.what, ref(c.run, "cpu_ns_per_msg"), refp("tcp-ceiling", "cpu_ns_per_msg"), ceiling, nil})
	}
	fixed := "fixed " + strconv.FormatFloat(rate, 'f', -1, 64) + " msgs/s"
	for _, m := range []struct{ metric, name string }{{"p50_us", "p50"}, {"p99_us", "p99"}, {"p999_us", "p99.9"}, {"max_lag_us", "max lag"}} {
		rows = append(rows, benchRow{"fixed", fixed + ": " + m.name + ", the driver alone (the machine's floor)", ref("fixed/driver", m.metric), nil, "", nil})
	}
	for _, m := range []struct{ metric, name string }{
		{"longest_us", "longest"}, {"over_1ms_count", "how many over 1 ms"}, {"host_longest_us", "the host's longest"},
		{"host_over_1ms_count", "how many of the host's over 1 ms"}, {"lost_share", "share of CPU time lost"},
	} {
		rows = append(rows, benchRow{"fixed", "CPU stalls, " + m.name + " (what the machine takes from any program)", ref("fixed/stalls", m.metric), nil, "", nil})
	}
	for _, be := range []string{backendDefault, backendNet} {
		run := "fixed/" + be
		var p99, p999 *bench.Goal
		if be == backendDefault {
			p99, p999 = &goalFixedP99, &goalFixedP999
		}
		rows = append(rows,
			benchRow{"fixed", fixed + ": p50, " + be + " backend", ref(run, "p50_us"), refp("fixed/tcp", "p50_us"), tcp, nil},
			benchRow{"fixed", fixed + ": p99, " + be + " backend", ref(run, "p99_us"), refp("fixed/tcp", "p99_us"), tcp, p99})
		if be == backendDefault {
			rows = append(rows, benchRow{"fixed", fixed + ": p99, default vs net backend", ref(run, "p99_us"), refp("fixed/net", "p99_us"), "net backend", &goalFixedVsNet})
		}
		rows = append(rows,
			benchRow{"fixed", fixed + ": p99.9, " + be + " backend", ref(run, "p999_us"), refp("fixed/tcp", "p999_us"), tcp, p999},
			benchRow{"fixed", fixed + ": driver's max lag, " + be + " backend", ref(run, "max_lag_us"), refp("fixed/tcp", "max_lag_us"), tcp, nil})
	}
	for _, c := range []struct{ run, name string }{
		{"pingpong/" + backendDefault, backendDefault + " backend"},
		{"pingpong/" + backendDefault + "/hand-off", backendDefault + " backend, each pong handed to a waiting goroutine"},
		{"pingpong/" + backendNet, backendNet + " backend"},
	} {
		var p50, p99 *bench.Goal
		if c.run == "pingpong/"+backendDefault {
			p50, p99 = &goalPingP50, &goalPingP99
		}
		rows = append(rows,
			benchRow{"pingpong", "ping-pong: p50, " + c.name, ref(c.run, "p50_us"), refp("pingpong/tcp", "p50_us"), tcp, p50},
			benchRow{"pingpong", "ping-pong: p99, " + c.name, ref(c.run, "p99_us"), refp("pingpong/tcp", "p99_us"), tcp, p99})
	}
	// What the hand-offs of a node's delivery cost plain TCP, and the
	// default backend beside that: a reference, the goals stay plain TCP's.
	const handOffs = "plain TCP with hand-offs"
	for _, m := range []struct{ metric, name string }{{"p50_us", "p50"}, {"p99_us", "p99"}} {
		rows = append(rows,
			benchRow{"pingpong", "ping-pong: " + m.name + ", plain TCP, each message read on one goroutine and answered on another", ref("pingpong/tcp/hand-off", m.metric), refp("pingpong/tcp", m.metric), tcp, nil},
			benchRow{"pingpong", "ping-pong: " + m.name + ", default backend vs plain TCP with the same hand-offs", ref("pingpong/"+backendDefault, m.metric), refp("pingpong/tcp/hand-off", m.metric), handOffs, nil})
	}
	// One node sending to many peers: the default backend against the
	// net backend, which is what choosing the default rests on.
	to := fmt.Sprintf("%d peers", peers)
	rows = append(rows,
		benchRow{"peers", "throughput to " + to + ": runs, net backend", ref("peers/net", "msgs_per_s"), nil, "", nil},
		benchRow{"peers", "throughput to " + to + ": runs, default vs net backend", ref("peers/default", "msgs_per_s"), refp("peers/net", "msgs_per_s"), "net backend", nil},
		benchRow{"peers", "CPU per message to " + to + ": net backend", ref("peers/net", "cpu_ns_per_msg"), nil, "", nil},
		benchRow{"peers", "CPU per message to " + to + ": default vs net backend", ref("peers/default", "cpu_ns_per_msg"), refp("peers/net", "cpu_ns_per_msg"), "net backend", nil},
	)
	tcpConns := fmt.Sprintf("plain TCP, %d connections", peers)
	for _, m := range []struct{ metric, name string }{{"p50_us", "p50"}, {"p99_us", "p99"}, {"p999_us", "p99.9"}} {
		rows = append(rows,
			benchRow{"peers", fixed + " to " + to + ": " + m.name + ", " + tcpConns, ref("peers/fixed/tcp", m.metric), nil, "", nil},
			benchRow{"peers", fixed + " to " + to + ": " + m.name + ", net backend", ref("peers/fixed/net", m.metric), refp("peers/fixed/tcp", m.metric), tcpConns, nil},
			benchRow{"peers", fixed + " to " + to + ": " + m.name + ", default backend", ref("peers/fixed/default", m.metric), refp("peers/fixed/tcp", m.metric), tcpConns, nil},
			benchRow{"peers", fixed + " to " + to + ": " + m.name + ", default vs net backend", ref("peers/fixed/default", m.metric), refp("peers/fixed/net", m.metric), "net backend", nil})
	}
	return rows
}
