// Package metrics exports a running node's counters in the Prometheus text
// exposition format (version 0.0.4), without depending on a Prometheus
// client library: an embedder mounts [Handler] on its own HTTP server, and
// any Prometheus server, or `loadgen stat`, reads it.
//
// A scrape calls every [Collector] once; each adds its families to a [Set]
// (a counter or gauge with its samples), and the set is written sorted by
// family name. [NodeCollector] collects a transport.Node: node totals,
// per-peer traffic, back-pressure, window depth, reconnects and refusals,
// and optionally every channel. The engine's coordinator is a Collector of
// its own (engine.Coordinator.Collect). [Parse] reads the format back, for
// tools that watch a node (loadgen stat).
//
// Nothing here runs on a transport's hot path: a scrape reads the atomic
// counters the transport keeps anyway, and takes each channel's lock once.
package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Type is a metric family's type.
type Type string

// The types this package writes. Parse also reads the others by name.
const (
	Counter Type = "counter"
	Gauge   Type = "gauge"
	Untyped Type = "untyped"
)

// Label is one label of a sample.
type Label struct{ Name, Value string }

// Sample is one value of a family, told apart from the family's other
// samples by its labels. Name is the family's name, or the family's name
// with a suffix (_sum, _count, _bucket) for summaries and histograms.
type Sample struct {
	Name   string
	Labels []Label
	Value  float64
}

// Label returns the value of the label called name, "" if it has none.
func (s Sample) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Family is a metric: its name, help text, type and samples.
type Family struct {
	Name    string
	Help    string
	Type    Type
	Samples []Sample
}

// ErrName means a metric or label name is not valid in the format.
var ErrName = errors.New("metrics: invalid name")

// Set gathers the families of one scrape. It is not safe for concurrent
// use: collectors run one after the other.
type Set struct {
	st    *setState
	extra []string // label pairs added to every sample
}

type setState struct {
	fams map[string]*Family
	err  error
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{st: &setState{fams: map[string]*Family{}}} }

// With returns a view of s that adds the label pairs to every sample added
// through it: two nodes in one process tell their samples apart by a
// node="..." label.
func (s *Set) With(labels ...string) *Set {
	return &Set{st: s.st, extra: append(append([]string(nil), s.extra...), labels...)}
}

// Counter adds a sample of the counter name (which should end in _total)
// with the given label pairs (name, value, name, value, ...).
func (s *Set) Counter(name, help string, v float64, labels ...string) {
	s.add(name, help, Counter, v, labels)
}

// Gauge adds a sample of the gauge name with the given label pairs.
func (s *Set) Gauge(name, help string, v float64, labels ...string) {
	s.add(name, help, Gauge, v, labels)
}

func (s *Set) add(name, help string, t Type, v float64, labels []string) {
	st := s.st
	if st.err != nil {
		return
	}
	if !validName(name, true) {
		st.err = fmt.Errorf("%w: metric %q", ErrName, name)
		return
	}
	if len(labels)%2 != 0 {
		st.err = fmt.Errorf("metrics: %s: labels must come in name, value pairs, got %d strings", name, len(labels))
		return
	}
	if len(s.extra) > 0 {
		labels = append(append([]string(nil), s.extra...), labels...)
	}
	f := st.fams[name]
	if f == nil {
		f = &Family{Name: name, Help: help, Type: t}
		st.fams[name] = f
	} else if f.Type != t {
		st.err = fmt.Errorf("metrics: %s is a %s and a %s", name, f.Type, t)
		return
	}
	smp := Sample{Name: name, Value: v}
	for i := 0; i < len(labels); i += 2 {
		if !validName(labels[i], false) {
			st.err = fmt.Errorf("%w: label %q of %s", ErrName, labels[i], name)
			return
		}
		for _, l := range smp.Labels {
			if l.Name == labels[i] {
				st.err = fmt.Errorf("metrics: %s: label %s given twice", name, l.Name)
				return
			}
		}
		smp.Labels = append(smp.Labels, Label{labels[i], labels[i+1]})
	}
	f.Samples = append(f.Samples, smp)
}

// Families returns the set's families sorted by name, and the first error
// a collector made (an invalid name, a family added with two types).
func (s *Set) Families() ([]Family, error) {
	out := make([]Family, 0, len(s.st.fams))
	for _, f := range s.st.fams {
		out = append(out, *f)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, s.st.err
}

// validName reports whether name is a valid metric name (colons allowed)
// or label name.
func validName(name string, metric bool) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		ok := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9' || metric && r == ':'
		if !ok {
			return false
		}
	}
	return true
}

// Write writes families in the text exposition format.
func Write(w io.Writer, fams []Family) error {
	bw := bufio.NewWriter(w)
	for _, f := range fams {
		if f.Help != "" {
			bw.WriteString("# HELP ")
			bw.WriteString(f.Name)
			bw.WriteByte(' ')
			bw.WriteString(escape(f.Help, false))
			bw.WriteByte('\n')
		}
		if f.Type != "" {
			bw.WriteString("# TYPE ")
			bw.WriteString(f.Name)
			bw.WriteByte(' ')
			bw.WriteString(string(f.Type))
			bw.WriteByte('\n')
		}
		for _, smp := range f.Samples {
			bw.WriteString(smp.Name)
			if len(smp.Labels) > 0 {
				bw.WriteByte('{')
				for i, l := range smp.Labels {
					if i > 0 {
						bw.WriteByte(',')
					}
					bw.WriteString(l.Name)
					bw.WriteString(`="`)
					bw.WriteString(escape(l.Value, true))
					bw.WriteByte('"')
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			bw.WriteString(formatValue(smp.Value))
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// escape escapes a HELP text (backslash, newline) or a label value (also
// the double quote).
func escape(s string, quote bool) string {
	if !strings.ContainsAny(s, "\\\n\"") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '"' && quote:
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// A Collector adds its families to a set at each scrape.
type Collector interface {
	Collect(s *Set)
}

// CollectorFunc is a function as a Collector.
type CollectorFunc func(s *Set)

// Collect calls f.
func (f CollectorFunc) Collect(s *Set) { f(s) }

// ContentType is the media type of the text exposition format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the collectors' families in the text exposition format,
// for GET and HEAD. Safe for concurrent use as far as the collectors are:
// NodeCollector and the engine's coordinator are.
func Handler(cs ...Collector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		s := NewSet()
		for _, c := range cs {
			c.Collect(s)
		}
		fams, err := s.Families()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		if r.Method == http.MethodHead {
			return
		}
		_ = Write(w, fams) // a client that went away is not our error
	})
}
