package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is what one run of the program found; it is written as JSON (the last stdout line
// and compare.json) and as Markdown (compare.md).
type report struct {
	Size      int     `json:"size"`
	DurationS float64 `json:"duration_s"`
	Pings     int     `json:"pings"`
	Rounds    int     `json:"rounds"`
	Started   string  `json:"started"`
	Machine   machine `json:"machine"`
	// Order is the order the peers ran in, within each round.
	Order []string              `json:"order"`
	Peers map[string]peerResult `json:"peers"`
	// Ratios are throughput ratios "X/Y" (msgs/s of X over msgs/s of Y) for sluice against
	// every other peer and for every other peer against tcp, for the peers present.
	Ratios map[string]float64 `json:"ratios"`
	// P99Ratios are the same pairs for round-trip p99 latency (lower is better for X).
	P99Ratios map[string]float64 `json:"latency_p99_ratios"`
	// About says how each peer carries the messages, from its about method.
	About map[string]string `json:"about"`
}

// peerResult is one peer's figures. Throughput is the median over rounds; latency is the
// round-trip histogram merged over rounds.
type peerResult struct {
	ThroughputMsgsPerS  float64   `json:"throughput_msgs_per_s"`
	ThroughputBytesPerS float64   `json:"throughput_bytes_per_s"` // payload bytes only
	RoundsMsgsPerS      []float64 `json:"rounds_msgs_per_s"`
	LatencyUS           latencyUS `json:"latency_us"`
}

// machine describes where the figures were measured.
type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Kernel     string `json:"kernel"`
	GoVersion  string `json:"go_version"`
	// LoadAvg and LoadAvgEnd are /proc/loadavg's 1/5/15-minute averages when the run
	// started and ended: other work on the machine shows here, and figures taken under
	// a load near or above Cores are not worth quoting.
	LoadAvg    string `json:"loadavg,omitempty"`
	LoadAvgEnd string `json:"loadavg_end,omitempty"`
}

// loadAvg returns the first three fields of /proc/loadavg, or "" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func thisMachine() machine {
	m := machine{
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GoVersion:  runtime.Version(),
		LoadAvg:    loadAvg(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// ratioPairs lists the "X/Y" pairs worth a ratio among the peers in order: sluice against
// every other peer, then every peer other than sluice and tcp against tcp.
func ratioPairs(order []string) [][2]string {
	var pairs [][2]string
	if slices.Contains(order, "sluice") {
		for _, y := range order {
			if y != "sluice" {
				pairs = append(pairs, [2]string{"sluice", y})
			}
		}
	}
	if slices.Contains(order, "tcp") {
		for _, x := range order {
			if x != "sluice" && x != "tcp" {
				pairs = append(pairs, [2]string{x, "tcp"})
			}
		}
	}
	return pairs
}

// fillRatios computes Ratios and P99Ratios from Peers; a pair with a zero denominator is left out.
func (r *report) fillRatios() {
	r.Ratios = map[string]float64{}
	r.P99Ratios = map[string]float64{}
	for _, p := range ratioPairs(r.Order) {
		x, y := r.Peers[p[0]], r.Peers[p[1]]
		key := p[0] + "/" + p[1]
		if y.ThroughputMsgsPerS > 0 {
			r.Ratios[key] = x.ThroughputMsgsPerS / y.ThroughputMsgsPerS
		}
		if y.LatencyUS.P99 > 0 {
			r.P99Ratios[key] = x.LatencyUS.P99 / y.LatencyUS.P99
		}
	}
}

// median of xs; xs is reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

// writeTable prints one line per peer.
func (r *report) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peer\tmsgs/s\tMB/s\tp50 µs\tp90 µs\tp99 µs\tp99.9 µs\tp99.99 µs\tmax µs\t")
	for _, name := range r.Order {
		p := r.Peers[name]
		l := p.LatencyUS
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", name,
			p.ThroughputMsgsPerS, p.ThroughputBytesPerS/1e6, l.P50, l.P90, l.P99, l.P999, l.P9999, l.Max)
	}
	tw.Flush()
	for _, k := range r.ratioKeys() {
		fmt.Fprintf(w, "%s: throughput x%.2f, p99 latency x%.2f\n", k, r.Ratios[k], r.P99Ratios[k])
	}
}

func (r *report) ratioKeys() []string {
	var keys []string
	for _, p := range ratioPairs(r.Order) {
		if k := p[0] + "/" + p[1]; r.Ratios[k] != 0 {
			keys = append(keys, k)
		}
	}
	return keys
}

// markdown renders the report for results/.
func (r *report) markdown(cmdline string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# Peer comparison, %d-byte messages\n\n", r.Size)
	fmt.Fprintf(&b, "Run %s: `%s`\n\n", r.Started, cmdline)
	fmt.Fprintf(&b, "Machine: %s, %d cores (GOMAXPROCS %d), %s/%s, kernel %s, %s; load average %s at the start, %s at the end.\n\n",
		orUnknown(m.CPU), m.Cores, m.GOMAXPROCS, m.OS, m.Arch, orUnknown(m.Kernel), m.GoVersion,
		orUnknown(m.LoadAvg), orUnknown(m.LoadAvgEnd))
	fmt.Fprintf(&b, "One stream over loopback, peers run one after another (%s), %d round(s), "+
		"%s of throughput per peer per round after a warm-up; throughput is the median over rounds "+
		"and counts payload bytes only. Latency is the round trip of one message echoed back, "+
		"%d pings per peer per round, merged over rounds.\n\n",
		strings.Join(r.Order, ", "), r.Rounds, time.Duration(r.DurationS*float64(time.Second)), r.Pings)
	b.WriteString("| peer | msgs/s | MB/s | p50 µs | p90 µs | p99 µs | p99.9 µs | p99.99 µs | max µs |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, name := range r.Order {
		p := r.Peers[name]
		l := p.LatencyUS
		fmt.Fprintf(&b, "| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", name,
			p.ThroughputMsgsPerS, p.ThroughputBytesPerS/1e6, l.P50, l.P90, l.P99, l.P999, l.P9999, l.Max)
	}
	if keys := r.ratioKeys(); len(keys) > 0 {
		b.WriteString("\n| ratio | throughput | p99 latency |\n|---|---:|---:|\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "| %s | %.2f | %.2f |\n", k, r.Ratios[k], r.P99Ratios[k])
		}
	}
	b.WriteString("\nPeers:\n")
	for _, name := range r.Order {
		fmt.Fprintf(&b, "- %s: %s\n", name, orUnknown(r.About[name]))
	}
	b.WriteString("\nEvery reader checks each message's length and sequence number, and a run fails " +
		"unless the reader received exactly what the writer sent.\n")
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
