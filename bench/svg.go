package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// A plot is a line chart rendered as standalone SVG: a frame with ticks and
// grid lines on both axes, axis labels, a title, one polyline per series with
// a legend, and optional vertical markers (fault events).
type plot struct {
	title   string
	x, y    axis
	series  []series
	markers []marker
}

type axis struct {
	label    string
	log      bool // log10 scale; every value must be > 0
	min, max float64
	ticks    []tick
}

type tick struct {
	v     float64
	label string
}

type series struct {
	name   string
	xs, ys []float64
}

type marker struct {
	x     float64
	label string
}

const (
	svgW, svgH                         = 860, 500
	padLeft, padRight, padTop, padBott = 90, 170, 50, 60
	plotW                              = svgW - padLeft - padRight
	plotH                              = svgH - padTop - padBott
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

func (a axis) frac(v float64) float64 {
	lo, hi := a.min, a.max
	if a.log {
		v, lo, hi = math.Log10(v), math.Log10(lo), math.Log10(hi)
	}
	if hi <= lo {
		return 0
	}
	return (v - lo) / (hi - lo)
}

func (p *plot) px(v float64) float64 { return padLeft + p.x.frac(v)*plotW }
func (p *plot) py(v float64) float64 { return padTop + plotH - p.y.frac(v)*plotH }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func (p *plot) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold">%s</text>`+"\n", padLeft, esc(p.title))

	// Grid and ticks.
	b.WriteString(`<g class="x-axis" stroke="#ddd">` + "\n")
	for _, t := range p.x.ticks {
		x := p.px(t.v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`+"\n", x, padTop, x, padTop+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" stroke="none" fill="#333">%s</text>`+"\n", x, padTop+plotH+18, esc(t.label))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g class="y-axis" stroke="#ddd">` + "\n")
	for _, t := range p.y.ticks {
		y := p.py(t.v)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`+"\n", padLeft, y, padLeft+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" stroke="none" fill="#333">%s</text>`+"\n", padLeft-6, y+4, esc(t.label))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(&b, `<rect class="frame" x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", padLeft, padTop, plotW, plotH)
	fmt.Fprintf(&b, `<text class="x-label" x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padLeft+plotW/2, svgH-15, esc(p.x.label))
	fmt.Fprintf(&b, `<text class="y-label" x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", padTop+plotH/2, padTop+plotH/2, esc(p.y.label))

	for _, m := range p.markers {
		x := p.px(m.x)
		fmt.Fprintf(&b, `<g class="marker"><line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4 3"/>`, x, padTop, x, padTop+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" fill="#d62728" transform="rotate(-90 %.1f %d)">%s</text></g>`+"\n", x-3, padTop+plotH-4, x-3, padTop+plotH-4, esc(m.label))
	}

	for i, s := range p.series {
		color := palette[i%len(palette)]
		var pts strings.Builder
		for k := range s.xs {
			fmt.Fprintf(&pts, "%.1f,%.1f ", p.px(s.xs[k]), p.py(s.ys[k]))
		}
		fmt.Fprintf(&b, `<polyline class="series" fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		if len(s.xs) == 1 {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", p.px(s.xs[0]), p.py(s.ys[0]), color)
		}
		// Legend entry.
		ly := padTop + 10 + i*20
		fmt.Fprintf(&b, `<g class="legend"><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text></g>`+"\n",
			padLeft+plotW+12, ly, padLeft+plotW+36, ly, color, padLeft+plotW+42, ly+4, esc(s.name))
	}
	if len(p.series) == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#999">no data</text>`+"\n", padLeft+plotW/2, padTop+plotH/2)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// linearAxis returns an axis from 0 (or lo, if negative) to a round number
// at least hi, with about five ticks at multiples of 1, 2 or 5 times a power
// of ten, labelled by format.
func linearAxis(label string, lo, hi float64, format func(float64) string) axis {
	if lo > 0 {
		lo = 0
	}
	if hi <= lo {
		hi = lo + 1
	}
	step := niceStep((hi - lo) / 5)
	a := axis{label: label, min: math.Floor(lo/step) * step, max: math.Ceil(hi/step) * step}
	for k := 0.0; a.min+k*step <= a.max+step/2; k++ {
		v := a.min + k*step
		a.ticks = append(a.ticks, tick{v, format(v)})
	}
	return a
}

func niceStep(raw float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// writeLatencySVG draws h (nanoseconds) as a percentile spectrum: latency in
// microseconds against 1/(1-percentile) on a log axis, so that p90, p99,
// p99.9... are evenly spaced, as HdrHistogram's plotter draws it.
func writeLatencySVG(w io.Writer, h *hdrhistogram.Histogram, scenario string) error {
	p := &plot{title: "Latency by percentile — " + scenario}
	var s series
	s.name = "latency"
	maxInv := 10.0
	maxUS := 1.0
	for _, br := range h.CumulativeDistributionWithTicks(HgrmTicksPerHalfDistance) {
		q := br.Quantile / 100
		if q >= 1 {
			continue // 1/(1-1) is infinite; the max is the last finite point's value anyway.
		}
		inv := 1 / (1 - q)
		us := nsToUS(br.ValueAt)
		s.xs = append(s.xs, inv)
		s.ys = append(s.ys, us)
		maxInv = math.Max(maxInv, inv)
		maxUS = math.Max(maxUS, us)
	}
	if len(s.xs) > 0 {
		p.series = []series{s}
	}
	decades := math.Ceil(math.Log10(maxInv))
	p.x = axis{label: "percentile", log: true, min: 1, max: math.Pow(10, decades)}
	for d := 0.0; d <= decades; d++ {
		p.x.ticks = append(p.x.ticks, tick{math.Pow(10, d), percentileLabel(d)})
	}
	p.y = linearAxis("latency (µs)", 0, maxUS, tickLabel)
	return p.write(w)
}

// percentileLabel names the percentile at 1/(1-p) = 10^d: 0%, 90%, 99%,
// 99.9%, 99.99%...
func percentileLabel(d float64) string {
	switch n := int(d); {
	case n <= 0:
		return "0%"
	case n == 1:
		return "90%"
	case n == 2:
		return "99%"
	default:
		return "99." + strings.Repeat("9", n-2) + "%"
	}
}

// WriteTimelineSVG writes r's timeline as an SVG chart: delivered messages
// per second against time, with each fault event as a labelled vertical
// line.
func WriteTimelineSVG(w io.Writer, r *Report) error {
	p := &plot{title: "Throughput over time — " + r.Scenario}
	var s series
	s.name = "msgs/s"
	maxT, maxRate := 1.0, 1.0
	for _, smp := range r.Timeline {
		s.xs = append(s.xs, smp.T)
		s.ys = append(s.ys, smp.MsgsPerS)
		maxT = math.Max(maxT, smp.T)
		maxRate = math.Max(maxRate, smp.MsgsPerS)
	}
	if len(s.xs) > 0 {
		p.series = []series{s}
	}
	for _, e := range r.Events {
		maxT = math.Max(maxT, e.T)
		p.markers = append(p.markers, marker{e.T, e.Kind})
	}
	p.x = linearAxis("time (s)", 0, maxT, tickLabel)
	p.y = linearAxis("delivered (msgs/s)", 0, maxRate, siTickLabel)
	return p.write(w)
}
