// Command compare measures Sluice's peers on loopback with the same message size and
// duration, one stream each, one peer after another: plain TCP with ideal batching (the
// ceiling), gRPC bidirectional streaming (one message per Send, and packed 64 KiB frames),
// and core NATS through an embedded server. Each peer gets a throughput run and a
// ping-pong latency run, after a short warm-up.
//
//	go run . --size 100 --duration 5s --json
//
// It prints a progress line per run, a table, and with --json the report as the last
// stdout line; it also writes compare.json and compare.md to --out. This is its own Go
// module so that the peers' dependencies stay out of the library's go.mod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "compare:", err)
		}
		os.Exit(1)
	}
}

// options are the command line's flags.
type options struct {
	size     int
	duration time.Duration
	pings    int
	rounds   int
	peers    string
	json     bool
	out      string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.size, "size", 100, "message payload size in bytes")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "throughput run per peer per round")
	fs.IntVar(&o.pings, "pings", 20000, "ping-pong round trips per peer per round")
	fs.IntVar(&o.rounds, "rounds", 1, "rounds; each round runs every peer once, in turn")
	fs.StringVar(&o.peers, "peers", "", "comma-separated peers to run (default all: "+strings.Join(peerNames(), ",")+")")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON on the last stdout line")
	fs.StringVar(&o.out, "out", "", "directory for compare.json and compare.md (default results/local/compare under the repo root)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.size < 1 || o.size > 1<<20:
		return o, fmt.Errorf("--size %d: want 1 to %d bytes", o.size, 1<<20)
	case o.duration <= 0:
		return o, fmt.Errorf("--duration %v: want a positive duration", o.duration)
	case o.pings < 1:
		return o, fmt.Errorf("--pings %d: want at least 1", o.pings)
	case o.rounds < 1:
		return o, fmt.Errorf("--rounds %d: want at least 1", o.rounds)
	}
	return o, nil
}

// warmup is how long a peer runs before its measured throughput run: a tenth of the
// duration, between 20 ms and 1 s.
func warmup(d time.Duration) time.Duration {
	return min(max(d/10, 20*time.Millisecond), time.Second)
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseOptions(args, os.Stderr)
	if err != nil {
		return err
	}
	var names []string
	if o.peers != "" {
		names = strings.Split(o.peers, ",")
	}
	peers, err := buildPeers(names, peerConfig{})
	if err != nil {
		return err
	}
	if len(peers) == 0 {
		return errors.New("no peers to run")
	}
	out := o.out
	if out == "" {
		out = filepath.Join(repoRoot(), "results", "local", "compare")
	}

	r := &report{
		Size:      o.size,
		DurationS: o.duration.Seconds(),
		Pings:     o.pings,
		Rounds:    o.rounds,
		Started:   time.Now().UTC().Format(time.RFC3339),
		Machine:   thisMachine(),
		Peers:     map[string]peerResult{},
		About:     map[string]string{},
	}
	m := r.Machine
	fmt.Fprintf(stdout, "compare: %d-byte messages, %v per peer, %d pings, %d round(s); %s, %d cores, %s, load %s\n",
		o.size, o.duration, o.pings, o.rounds, orUnknown(m.CPU), m.Cores, m.GoVersion, orUnknown(m.LoadAvg))

	rates := map[string][]float64{}
	hists := map[string]hist{}
	for _, p := range peers {
		r.Order = append(r.Order, p.Name())
		hists[p.Name()] = newHist()
		if a, ok := p.(interface{ about() string }); ok {
			r.About[p.Name()] = a.about()
		}
	}
	for round := 1; round <= o.rounds; round++ {
		for _, p := range peers {
			rate, h, err := measure(ctx, p, o)
			if err != nil {
				return err
			}
			rates[p.Name()] = append(rates[p.Name()], rate)
			hists[p.Name()].merge(h)
			l := h.percentiles()
			fmt.Fprintf(stdout, "round %d %-12s %12.0f msgs/s %8.1f MB/s  rtt p50 %.1f µs p99 %.1f µs p99.9 %.1f µs\n",
				round, p.Name(), rate, rate*float64(o.size)/1e6, l.P50, l.P99, l.P999)
		}
	}
	for _, name := range r.Order {
		rs := append([]float64(nil), rates[name]...)
		med := median(rs)
		r.Peers[name] = peerResult{
			ThroughputMsgsPerS:  med,
			ThroughputBytesPerS: med * float64(o.size),
			RoundsMsgsPerS:      rates[name],
			LatencyUS:           hists[name].percentiles(),
		}
	}
	r.fillRatios()
	r.Machine.LoadAvgEnd = loadAvg()

	fmt.Fprintln(stdout)
	r.writeTable(stdout)
	fmt.Fprintf(stdout, "load average %s at the start, %s at the end\n", orUnknown(r.Machine.LoadAvg), orUnknown(r.Machine.LoadAvgEnd))
	js, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "compare.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	cmdline := "go run . " + strings.Join(args, " ")
	if err := os.WriteFile(filepath.Join(out, "compare.md"), []byte(r.markdown(cmdline)), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and compare.md\n", filepath.Join(out, "compare.json"))
	if o.json {
		fmt.Fprintf(stdout, "%s\n", js)
	}
	return nil
}

// measure runs one peer: a throughput warm-up, the throughput run, a latency warm-up and
// the latency run. It returns messages per second and the round-trip histogram.
func measure(ctx context.Context, p peer, o options) (float64, hist, error) {
	if _, _, err := p.Throughput(ctx, o.size, warmup(o.duration)); err != nil {
		return 0, hist{}, fmt.Errorf("%s warm-up: %w", p.Name(), err)
	}
	msgs, elapsed, err := p.Throughput(ctx, o.size, o.duration)
	if err != nil {
		return 0, hist{}, err
	}
	if elapsed <= 0 {
		return 0, hist{}, fmt.Errorf("%s: no time elapsed", p.Name())
	}
	if _, err := p.Latency(ctx, o.size, max(1, min(o.pings/10, 1000))); err != nil {
		return 0, hist{}, fmt.Errorf("%s latency warm-up: %w", p.Name(), err)
	}
	h, err := p.Latency(ctx, o.size, o.pings)
	if err != nil {
		return 0, hist{}, err
	}
	return float64(msgs) / elapsed.Seconds(), h, nil
}

// repoRoot is the nearest directory at or above the working directory whose go.mod is the
// library's; if there is none, it is the working directory.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if strings.TrimSpace(line) == "module github.com/sluicehq/sluice" {
					return dir
				}
			}
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}
