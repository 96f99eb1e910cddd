package main

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// hist records round-trip times in nanoseconds, 1 ns to 60 s, at 3 significant digits.
// It is owned by one goroutine.
type hist struct{ h *hdrhistogram.Histogram }

func newHist() hist {
	return hist{h: hdrhistogram.New(1, int64(60*time.Second), 3)}
}

// record adds one round trip; values above the range are clamped to the highest trackable.
func (h hist) record(d time.Duration) {
	v := int64(d)
	if v < 1 {
		v = 1
	}
	if v > h.h.HighestTrackableValue() {
		v = h.h.HighestTrackableValue()
	}
	_ = h.h.RecordValue(v) // in range by construction
}

// merge adds every value of o to h.
func (h hist) merge(o hist) { h.h.Merge(o.h) }

// count is the number of recorded round trips.
func (h hist) count() int64 { return h.h.TotalCount() }

// latencyUS are the round-trip percentiles in microseconds, as written in the report.
type latencyUS struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	P9999 float64 `json:"p9999"`
	Max   float64 `json:"max"`
	Count int64   `json:"count"`
}

func (h hist) percentiles() latencyUS {
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	return latencyUS{
		P50:   us(h.h.ValueAtQuantile(50)),
		P90:   us(h.h.ValueAtQuantile(90)),
		P99:   us(h.h.ValueAtQuantile(99)),
		P999:  us(h.h.ValueAtQuantile(99.9)),
		P9999: us(h.h.ValueAtQuantile(99.99)),
		Max:   us(h.h.Max()),
		Count: h.h.TotalCount(),
	}
}
