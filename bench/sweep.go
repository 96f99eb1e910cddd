package bench

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Config keys a sweep reads from each [Report] to place it: the payload size
// in bytes and the number of channels.
const (
	ConfigMsgSize  = "msg_size"
	ConfigChannels = "channels"
)

// ErrSweepConfig means a report in a sweep lacks an integer msg_size or
// channels entry in its Config.
var ErrSweepConfig = errors.New("bench: sweep report lacks an integer msg_size or channels config entry")

// SweepReport gathers the reports of a sweep over message size and channel
// count. Each report's Config must hold [ConfigMsgSize] and
// [ConfigChannels] as integers (any Go integer type, or a whole float64 as
// JSON decoding gives).
type SweepReport struct {
	Name    string    `json:"name"`
	Machine Machine   `json:"machine"`
	Reports []*Report `json:"reports"`
}

// NewSweepReport starts an empty sweep named name, on the machine
// [DetectMachine] describes.
func NewSweepReport(name string) *SweepReport {
	return &SweepReport{Name: name, Machine: DetectMachine()}
}

type sweepPoint struct {
	size, channels int64
	r              *Report
}

func configInt(cfg map[string]any, key string) (int64, bool) {
	switch v := cfg[key].(type) {
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case uint32:
		return int64(v), true
	case uint64:
		return int64(v), v <= math.MaxInt64
	case float64:
		return int64(v), v == math.Trunc(v) && math.Abs(v) < 1<<53
	case json.Number:
		n, err := v.Int64()
		return n, err == nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// points returns the sweep's reports ordered by channel count, then size.
func (s *SweepReport) points() ([]sweepPoint, error) {
	pts := make([]sweepPoint, 0, len(s.Reports))
	for i, r := range s.Reports {
		size, ok1 := configInt(r.Config, ConfigMsgSize)
		ch, ok2 := configInt(r.Config, ConfigChannels)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w (report %d, scenario %q)", ErrSweepConfig, i, r.Scenario)
		}
		pts = append(pts, sweepPoint{size, ch, r})
	}
	slices.SortStableFunc(pts, func(a, b sweepPoint) int {
		return cmp.Or(cmp.Compare(a.channels, b.channels), cmp.Compare(a.size, b.size))
	})
	return pts, nil
}

// WriteSweepSVG writes an SVG chart of delivered messages per second against
// message size (log axis), one line per channel count.
func WriteSweepSVG(w io.Writer, s *SweepReport) error {
	pts, err := s.points()
	if err != nil {
		return err
	}
	p := &plot{title: "Throughput by message size — " + s.Name}
	var sizes []int64
	maxRate := 1.0
	for _, pt := range pts {
		if n := len(p.series); n == 0 || p.series[n-1].name != channelsName(pt.channels) {
			p.series = append(p.series, series{name: channelsName(pt.channels)})
		}
		sr := &p.series[len(p.series)-1]
		size := float64(max(pt.size, 1))
		sr.xs = append(sr.xs, size)
		sr.ys = append(sr.ys, pt.r.ThroughputMsgsPerS)
		sizes = append(sizes, max(pt.size, 1))
		maxRate = math.Max(maxRate, pt.r.ThroughputMsgsPerS)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	p.x = axis{label: "message size (bytes)", log: true, min: 1, max: 10}
	if len(sizes) > 0 {
		// Pad by a fifth of a decade so the end points are off the frame.
		p.x.min = float64(sizes[0]) / 1.6
		p.x.max = float64(sizes[len(sizes)-1]) * 1.6
	}
	for _, sz := range sizes {
		p.x.ticks = append(p.x.ticks, tick{float64(sz), bytesLabel(sz)})
	}
	p.y = linearAxis("delivered (msgs/s)", 0, maxRate, siTickLabel)
	return p.write(w)
}

func channelsName(n int64) string {
	if n == 1 {
		return "1 channel"
	}
	return itoa(n) + " channels"
}

func bytesLabel(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + " KiB"
	default:
		return itoa(n) + " B"
	}
}

// WriteSweepMarkdown writes the sweep as a Markdown table, one row per
// report, ordered by channel count and message size, after the machine it
// ran on.
func WriteSweepMarkdown(w io.Writer, s *SweepReport) error {
	pts, err := s.points()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Sluice sweep: %s\n\nMachine: %s.\n\n", mdEscape(s.Name), mdEscape(s.Machine.String()))
	b.WriteString("| channels | msg size | msgs/s | payload | p50 | p99 | p99.9 | max | wire B/msg | lost | dup |\n")
	b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, pt := range pts {
		r := pt.r
		l := r.LatencyUS
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			pt.channels, bytesLabel(pt.size), si(r.ThroughputMsgsPerS), siUnit(r.ThroughputBytesPerS, "B/s"),
			duration(l.P50), duration(l.P99), duration(l.P999), duration(l.Max),
			sig3(r.WireBytesPerMsg), grouped(r.Lost), grouped(r.Duplicates))
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// WriteSweepDir writes the sweep into dir, creating it if needed:
// sweep.json (indented), sweep.md and sweep.svg.
func WriteSweepDir(dir string, s *SweepReport) error {
	if _, err := s.points(); err != nil {
		return err
	}
	for _, r := range s.Reports {
		if err := r.checkFinite(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encoding sweep: %w", err)
	}
	return writeFiles(dir, []outFile{
		{"sweep.json", func(w io.Writer) error { _, err := w.Write(append(js, '\n')); return err }},
		{"sweep.md", func(w io.Writer) error { return WriteSweepMarkdown(w, s) }},
		{"sweep.svg", func(w io.Writer) error { return WriteSweepSVG(w, s) }},
	})
}
