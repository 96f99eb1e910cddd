package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Report is the outcome of one scenario run: what was sent and delivered,
// how fast, how late, what faults were injected, and on which machine with
// which configuration. Its JSON form is the machine-readable record that
// results/ publishes and that loadgen prints as its last stdout line.
//
// A Report is plain data; it is not safe for concurrent mutation.
type Report struct {
	Scenario  string    `json:"scenario"`
	StartedAt time.Time `json:"started_at"`
	DurationS float64   `json:"duration_s"`

	MessagesSent      int64 `json:"messages_sent"`
	MessagesDelivered int64 `json:"messages_delivered"`
	// Duplicates counts messages delivered more than once; Lost counts
	// messages sent and never delivered.
	Duplicates int64 `json:"duplicates"`
	Lost       int64 `json:"lost"`

	ThroughputMsgsPerS float64 `json:"throughput_msgs_per_s"`
	// ThroughputBytesPerS is payload bytes delivered per second.
	ThroughputBytesPerS float64 `json:"throughput_bytes_per_s"`

	LatencyUS Latency `json:"latency_us"`
	// Clock says how one-way latencies between hosts were corrected for
	// their clocks' disagreement; nil where sender and receiver read one
	// clock (one host).
	Clock *ClockCorrection `json:"clock_correction,omitempty"`

	// WireBytes is what crossed the sockets, framing included.
	WireBytes       int64   `json:"wire_bytes"`
	WireBytesPerMsg float64 `json:"wire_bytes_per_msg"`

	// Resent counts messages the transport sent again after loss detection.
	Resent int64 `json:"resent"`
	// Faults counts injected faults by kind ("drop", "disconnect", "kill").
	Faults      map[string]int64 `json:"faults,omitempty"`
	Recoveries  int64            `json:"recoveries"`
	Checkpoints int64            `json:"checkpoints"`
	// Recovery summarizes what the failures of an engine run cost; nil
	// when nothing failed.
	Recovery *Recovery `json:"recovery,omitempty"`
	// ExactlyOnce is nil when the scenario did not check delivery, else
	// whether every message was delivered exactly once.
	ExactlyOnce *bool `json:"exactly_once,omitempty"`
	// Failures says why the run failed although delivery may have been
	// exactly-once: a fault configured that never happened, a recovery
	// nothing injected. Empty when nothing failed beyond ExactlyOnce.
	Failures []string `json:"failures,omitempty"`

	Machine Machine        `json:"machine"`
	Config  map[string]any `json:"config"`

	// Timeline has one sample per second of the run.
	Timeline []Sample `json:"timeline,omitempty"`
	// Events lists the faults injected, with their times, for charts.
	Events []Event  `json:"events,omitempty"`
	Notes  []string `json:"notes,omitempty"`
}

// ClockCorrection describes how the latencies of a run across hosts were
// corrected for the offset between the sender's and the receiver's clocks.
type ClockCorrection struct {
	// Method is "ping": each sender estimated how far its receiver's
	// clock was ahead of its own from the transport's PING round trips
	// (NTP-style, the shortest of recent round trips) and stamped its send
	// times in the receiver's clock; or "none": the hosts' clocks were
	// trusted as they were.
	Method string `json:"method"`
	// MinOffsetNS and MaxOffsetNS bound the offsets applied (receiver's
	// clock minus sender's), over the run and every sender.
	MinOffsetNS int64 `json:"min_offset_ns"`
	MaxOffsetNS int64 `json:"max_offset_ns"`
	// ErrorNS is the largest error bound of the estimates applied (half
	// the round trip each came from): every latency is right to within it.
	ErrorNS int64 `json:"error_ns"`
	// Samples is the fewest round trips any applied estimate came from.
	Samples uint64 `json:"samples"`
}

// Merge widens c to cover o too, for a report merged from several senders.
// A nil c takes o.
func (c *ClockCorrection) Merge(o *ClockCorrection) *ClockCorrection {
	if o == nil {
		return c
	}
	if c == nil {
		m := *o
		return &m
	}
	if c.Method != o.Method {
		c.Method = "mixed"
	}
	c.MinOffsetNS, c.MaxOffsetNS = min(c.MinOffsetNS, o.MinOffsetNS), max(c.MaxOffsetNS, o.MaxOffsetNS)
	c.ErrorNS, c.Samples = max(c.ErrorNS, o.ErrorNS), min(c.Samples, o.Samples)
	return c
}

// String states the correction in a sentence, for reports.
func (c *ClockCorrection) String() string {
	if c == nil {
		return "latency is measured against one clock"
	}
	switch c.Method {
	case "none":
		return "latency is one-way across hosts, uncorrected: it is only as good as the hosts' clock synchronisation"
	case "ping":
		off := time.Duration(c.MinOffsetNS).String()
		if c.MaxOffsetNS != c.MinOffsetNS {
			off += " to " + time.Duration(c.MaxOffsetNS).String()
		}
		return fmt.Sprintf("latency is one-way across hosts, corrected for the clocks: the receiver's clock was estimated %s ahead of the sender's from PING round trips (at least %d each), so each latency is right to within ±%v",
			off, c.Samples, time.Duration(c.ErrorNS))
	}
	return "latency is one-way across hosts, corrected by " + c.Method
}

// Sample is one second of a run, as [Progress] saw it.
type Sample struct {
	// T is the end of the interval, in seconds since the run started.
	T float64 `json:"t_s"`
	// MsgsPerS is the delivery rate during the interval.
	MsgsPerS float64 `json:"msgs_per_s"`
	// P99US is the 99th percentile of the latencies recorded during the
	// interval, in microseconds.
	P99US float64 `json:"p99_us"`
	// Delivered is the total delivered at the end of the interval.
	Delivered int64 `json:"delivered"`
	// Faults lists the kinds of the fault events marked during the interval.
	Faults []string `json:"faults,omitempty"`
}

// Recovery is what the failures of an engine run cost, in milliseconds:
// how long recoveries took (from a failure being noticed to the new
// generation running) and how much wall time each failure lost (until the
// job's global clock passed where it had been, or the next failure came).
type Recovery struct {
	Failures    int     `json:"failures"`
	P50Ms       float64 `json:"p50_ms"`
	MaxMs       float64 `json:"max_ms"`
	LostP50Ms   float64 `json:"lost_p50_ms"`
	LostMaxMs   float64 `json:"lost_max_ms"`
	LostTotalMs float64 `json:"lost_total_ms"`
}

// NewRecovery summarizes recovery times and lost times; nil when both
// are empty.
func NewRecovery(recoveries, lost []time.Duration) *Recovery {
	if len(recoveries) == 0 && len(lost) == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p50max := func(ds []time.Duration) (p50, mx float64) {
		if len(ds) == 0 {
			return 0, 0
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return ms(s[(len(s)-1)/2]), ms(s[len(s)-1])
	}
	r := &Recovery{Failures: max(len(recoveries), len(lost))}
	r.P50Ms, r.MaxMs = p50max(recoveries)
	r.LostP50Ms, r.LostMaxMs = p50max(lost)
	for _, d := range lost {
		r.LostTotalMs += ms(d)
	}
	return r
}

// Event is a fault injected during a run.
type Event struct {
	// T is when it happened, in seconds since the run started.
	T      float64 `json:"t_s"`
	Kind   string  `json:"kind"`
	Detail string  `json:"detail,omitempty"`
}

// NewReport starts a Report for scenario at the current time, with a copy of
// config and the machine's description from [DetectMachine].
func NewReport(scenario string, config map[string]any) *Report {
	cfg := make(map[string]any, len(config))
	for k, v := range config {
		cfg[k] = v
	}
	return &Report{
		Scenario:  scenario,
		StartedAt: time.Now().UTC(),
		Machine:   DetectMachine(),
		Config:    cfg,
	}
}

// Finish fills the fields derived from others: LatencyUS from rec (when rec
// is not nil), ThroughputMsgsPerS from MessagesDelivered and DurationS, and
// WireBytesPerMsg from WireBytes and MessagesDelivered. A zero divisor leaves
// the derived field at zero. ThroughputBytesPerS needs the payload size and
// is left to the scenario.
func (r *Report) Finish(rec *Recorder) {
	if rec != nil {
		r.LatencyUS = rec.Latency()
	}
	if r.DurationS > 0 {
		r.ThroughputMsgsPerS = float64(r.MessagesDelivered) / r.DurationS
	}
	if r.MessagesDelivered > 0 {
		r.WireBytesPerMsg = float64(r.WireBytes) / float64(r.MessagesDelivered)
	}
}

// ErrNotFinite means a Report held a NaN or infinite number, which JSON
// cannot represent.
var ErrNotFinite = errors.New("bench: report holds a NaN or infinite number")

func (r *Report) checkFinite() error {
	l := r.LatencyUS
	for _, v := range []float64{r.DurationS, r.ThroughputMsgsPerS, r.ThroughputBytesPerS, r.WireBytesPerMsg,
		l.P50, l.P90, l.P99, l.P999, l.P9999, l.Max} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return ErrNotFinite
		}
	}
	return nil
}

// WriteJSON writes r as one line of JSON followed by a newline, suitable as
// the last line of loadgen's standard output.
func WriteJSON(w io.Writer, r *Report) error {
	if err := r.checkFinite(); err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("bench: encoding report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ExactlyOnceStatement says in one sentence whether the run delivered every
// message exactly once, as the Markdown report states it.
func (r *Report) ExactlyOnceStatement() string {
	switch {
	case r.ExactlyOnce == nil:
		return "Exactly-once delivery was not checked in this run."
	case *r.ExactlyOnce:
		return fmt.Sprintf("Exactly-once held: %s messages sent, %s delivered, 0 duplicates, 0 lost.",
			grouped(r.MessagesSent), grouped(r.MessagesDelivered))
	default:
		return fmt.Sprintf("Exactly-once was VIOLATED: %s messages sent, %s delivered, %s duplicates, %s lost.",
			grouped(r.MessagesSent), grouped(r.MessagesDelivered), grouped(r.Duplicates), grouped(r.Lost))
	}
}

// WriteMarkdown writes a human summary of r: a results table, the
// exactly-once statement, faults, machine and configuration.
func WriteMarkdown(w io.Writer, r *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice benchmark: %s\n\n", mdEscape(r.Scenario))
	fmt.Fprintf(&b, "Started %s, ran %s s on %s.\n\n", r.StartedAt.UTC().Format(time.RFC3339), sig3(r.DurationS), mdEscape(r.Machine.String()))
	fmt.Fprintf(&b, "**%s**\n\n", r.ExactlyOnceStatement())
	for _, f := range r.Failures {
		fmt.Fprintf(&b, "**The run FAILED: %s**\n\n", mdEscape(f))
	}

	b.WriteString("| result | value |\n|---|---|\n")
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	row("messages sent", grouped(r.MessagesSent))
	row("messages delivered", grouped(r.MessagesDelivered))
	row("duplicates", grouped(r.Duplicates))
	row("lost", grouped(r.Lost))
	row("resent", grouped(r.Resent))
	row("throughput", si(r.ThroughputMsgsPerS)+" msgs/s, "+siUnit(r.ThroughputBytesPerS, "B/s")+" payload")
	l := r.LatencyUS
	row("latency p50 / p90 / p99", fmt.Sprintf("%s / %s / %s", duration(l.P50), duration(l.P90), duration(l.P99)))
	row("latency p99.9 / p99.99 / max", fmt.Sprintf("%s / %s / %s", duration(l.P999), duration(l.P9999), duration(l.Max)))
	if r.Clock != nil {
		row("latency clock", mdEscape(r.Clock.String()))
	}
	if r.WireBytes == 0 && r.MessagesDelivered > 0 {
		row("wire bytes", "0: no message crossed a connection (every task on one node)")
	} else if r.MessagesDelivered == 0 {
		row("wire bytes", fmt.Sprintf("%s (no message delivered)", grouped(r.WireBytes)))
	} else {
		row("wire bytes", fmt.Sprintf("%s (%s per message)", grouped(r.WireBytes), sig3(r.WireBytesPerMsg)))
	}
	row("recoveries", grouped(r.Recoveries))
	if rc := r.Recovery; rc != nil {
		row("recovery time p50 / max", fmt.Sprintf("%s / %s ms", sig3(rc.P50Ms), sig3(rc.MaxMs)))
		row("time lost per failure p50 / max / total", fmt.Sprintf("%s / %s / %s ms", sig3(rc.LostP50Ms), sig3(rc.LostMaxMs), sig3(rc.LostTotalMs)))
	}
	row("checkpoints", grouped(r.Checkpoints))

	if len(r.Faults) > 0 {
		b.WriteString("\n## Faults injected\n\n| fault | count |\n|---|---|\n")
		for _, k := range sortedKeys(r.Faults) {
			row(mdEscape(k), grouped(r.Faults[k]))
		}
	}

	b.WriteString("\n## Machine\n\n| | |\n|---|---|\n")
	m := r.Machine
	row("cpu", mdEscape(orUnknown(m.CPU)))
	row("cores", itoa(int64(m.Cores)))
	row("kernel", mdEscape(orUnknown(m.Kernel)))
	row("os/arch", mdEscape(m.OS+"/"+m.Arch))
	row("go", mdEscape(m.Go))
	row("commit", mdEscape(orUnknown(m.Commit)))
	if m.CRC != "" {
		row("CRC-32C", mdEscape(m.CRC))
	}

	if len(r.Config) > 0 {
		b.WriteString("\n## Configuration\n\n| setting | value |\n|---|---|\n")
		for _, k := range sortedKeys(r.Config) {
			row(mdEscape(k), mdEscape(fmt.Sprint(r.Config[k])))
		}
	}
	if len(r.Events) > 0 {
		b.WriteString("\n## Fault events\n\n| t (s) | kind | detail |\n|---|---|---|\n")
		for _, e := range r.Events {
			fmt.Fprintf(&b, "| %.3f | %s | %s |\n", e.T, mdEscape(e.Kind), mdEscape(e.Detail))
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// mdEscape keeps s from breaking a Markdown table cell.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// HgrmTicksPerHalfDistance is the resolution of the .hgrm percentile table:
// reporting points per halving of the distance to 100%, as in HdrHistogram's
// own tools.
const HgrmTicksPerHalfDistance = 5

// WriteHgrm writes rec's distribution in HdrHistogram's classic percentile
// distribution text format ("Value Percentile TotalCount 1/(1-Percentile)"
// rows and a Mean/StdDeviation/Max/Total count footer), with values in
// microseconds. Such files load into HdrHistogram's plotter.
func WriteHgrm(w io.Writer, rec *Recorder) error { return writeHgrm(w, rec.Snapshot()) }

func writeHgrm(w io.Writer, h *hdrhistogram.Histogram) error {
	_, err := h.PercentilesPrint(w, HgrmTicksPerHalfDistance, 1e3)
	return err
}

// WriteDir writes r and rec's distribution into dir, creating it if needed:
// report.json (indented), report.md, latency.hgrm, latency.svg (percentile
// spectrum) and timeline.svg (throughput per second with fault events). rec
// may be nil, in which case the latency files are not written.
func WriteDir(dir string, r *Report, rec *Recorder) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := r.checkFinite(); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encoding report: %w", err)
	}
	files := []outFile{
		{"report.json", func(w io.Writer) error { _, err := w.Write(append(js, '\n')); return err }},
		{"report.md", func(w io.Writer) error { return WriteMarkdown(w, r) }},
		{"timeline.svg", func(w io.Writer) error { return WriteTimelineSVG(w, r) }},
	}
	if rec != nil {
		h := rec.Snapshot()
		files = append(files,
			outFile{"latency.hgrm", func(w io.Writer) error { return writeHgrm(w, h) }},
			outFile{"latency.svg", func(w io.Writer) error { return writeLatencySVG(w, h, r.Scenario) }},
		)
	}
	return writeFiles(dir, files)
}

type outFile struct {
	name  string
	write func(io.Writer) error
}

func writeFiles(dir string, files []outFile) error {
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
