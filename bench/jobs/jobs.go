// Package jobs holds the engine's two benchmark jobs, which loadgen runs
// and the engine's tests use: wordcount (lines of a file, split into words
// with strings.Fields semantics, counted by word) and pipeline (generated
// fixed-size messages through a processor into per-key records of which
// messages arrived, checked message by message against what the source
// generated).
//
// A job is described by a [Spec], a JSON-able value, so that `loadgen node`
// children build the same job as their parent.
package jobs

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// Spec describes a job.
type Spec struct {
	Kind string `json:"kind"` // "wordcount" or "pipeline"

	// wordcount
	Input string `json:"input,omitempty"`

	// pipeline
	Size       int   `json:"size,omitempty"`        // payload bytes, at least 24
	DeadlineNs int64 `json:"deadline_ns,omitempty"` // the source ends at this Now()
	Keys       int   `json:"keys,omitempty"`
	Limit      int64 `json:"limit,omitempty"` // the source also ends after this many messages (0: no limit)

	// parallelism of the middle and last processors
	Middle int `json:"middle,omitempty"`
	Last   int `json:"last,omitempty"`
}

// Latency receives end-to-end latencies from the pipeline's sinks: n
// messages of ns nanoseconds each (bench.Recorder.RecordN is one).
type Latency func(ns, n int64)

// Now is the clock of the pipeline's send times and deadline: wall-clock
// nanoseconds at the process's start plus the monotonic time since, so
// that it never jumps and agrees between processes on one host to within
// the wall clock's accuracy (bench.Now's definition).
func Now() int64 { return epochUnixNano + int64(time.Since(epoch)) }

var (
	epoch         = time.Now()
	epochUnixNano = epoch.UnixNano()
)

// MaxKeys is the most keys a pipeline may spread its messages over: the
// check of its result visits every key.
const MaxKeys = 1 << 20

// Build makes the job spec describes. lat, if not nil, receives the
// pipeline's end-to-end latencies (in the process that runs its sinks).
// A spec may come over the network (loadgen's agents build what a
// coordinator describes), so every field is checked: parallelism 0 means
// 2, and otherwise must be what engine.Job allows.
func Build(spec Spec, lat Latency) (*engine.Job, error) {
	for _, p := range []*int{&spec.Middle, &spec.Last} {
		switch {
		case *p == 0:
			*p = 2
		case *p < 0 || *p > engine.MaxParallelism:
			return nil, fmt.Errorf("jobs: parallelism %d, not in [1, %d] (0: 2)", *p, engine.MaxParallelism)
		}
	}
	switch spec.Kind {
	case "wordcount":
		return WordCount(spec), nil
	case "pipeline":
		return Pipeline(spec, lat)
	}
	return nil, fmt.Errorf("jobs: unknown job kind %q", spec.Kind)
}

// BuildJSON is Build from the JSON form of a Spec.
func BuildJSON(b []byte, lat Latency) (*engine.Job, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("jobs: spec: %w", err)
	}
	return Build(s, lat)
}
