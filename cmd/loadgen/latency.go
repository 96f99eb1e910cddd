package main

import (
	"errors"
	"fmt"
	"math"
	"sync"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
)

// errBadLatency means a latency histogram received from another process
// (an agent's findings, serve's answer to send, a bench side's result) is
// not one a bench.Recorder exports.
var errBadLatency = errors.New("a latency histogram unlike the ones loadgen exports")

// recorderCounts is how many counts a bench.Recorder's histogram has.
var recorderCounts = sync.OnceValue(func() int {
	return len(hdrhistogram.New(bench.LowestNS, bench.HighestNS, bench.SignificantFigures).Export().Counts)
})

// importLatency turns a latency snapshot from another process into a
// histogram. Every loadgen process exports its bench.Recorder's
// histograms, so the snapshot must have that geometry; anything else is
// refused before hdrhistogram sees it, whose Import panics on some
// geometries (a lowest value of 1<<62) and allocates what others ask for.
func importLatency(s *hdrhistogram.Snapshot) (*hdrhistogram.Histogram, error) {
	if s.LowestTrackableValue != bench.LowestNS || s.HighestTrackableValue != bench.HighestNS || s.SignificantFigures != bench.SignificantFigures {
		return nil, fmt.Errorf("%w: values %d to %d at %d significant figures, where loadgen's are %d to %d ns at %d",
			errBadLatency, s.LowestTrackableValue, s.HighestTrackableValue, s.SignificantFigures, bench.LowestNS, int64(bench.HighestNS), bench.SignificantFigures)
	}
	if want := recorderCounts(); len(s.Counts) != want {
		return nil, fmt.Errorf("%w: %d counts, where loadgen's geometry has %d", errBadLatency, len(s.Counts), want)
	}
	var total int64
	for i, c := range s.Counts {
		if c < 0 {
			return nil, fmt.Errorf("%w: count %d is negative (%d)", errBadLatency, i, c)
		}
		if total > math.MaxInt64-c {
			return nil, fmt.Errorf("%w: its counts add up to more than %d", errBadLatency, int64(math.MaxInt64))
		}
		total += c
	}
	return hdrhistogram.Import(s), nil
}
