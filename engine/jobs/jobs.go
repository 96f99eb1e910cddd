// Package jobs holds the engine's two reference jobs, shared by the
// engine's tests and loadgen: wordcount (lines of a file, split into words
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

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/engine"
)

// Spec describes a job.
type Spec struct {
	Kind string `json:"kind"` // "wordcount" or "pipeline"

	// wordcount
	Input string `json:"input,omitempty"`

	// pipeline
	Size       int   `json:"size,omitempty"`        // payload bytes, at least 24
	DeadlineNs int64 `json:"deadline_ns,omitempty"` // the source ends at this bench.Now()
	Keys       int   `json:"keys,omitempty"`
	Limit      int64 `json:"limit,omitempty"` // the source also ends after this many messages (0: no limit)

	// parallelism of the middle and last processors
	Middle int `json:"middle,omitempty"`
	Last   int `json:"last,omitempty"`
}

// Build makes the job spec describes. rec, if not nil, records the
// pipeline's end-to-end latencies (in the process that runs its sinks).
func Build(spec Spec, rec *bench.Recorder) (*engine.Job, error) {
	if spec.Middle < 1 {
		spec.Middle = 2
	}
	if spec.Last < 1 {
		spec.Last = 2
	}
	switch spec.Kind {
	case "wordcount":
		return WordCount(spec), nil
	case "pipeline":
		return Pipeline(spec, rec)
	}
	return nil, fmt.Errorf("jobs: unknown job kind %q", spec.Kind)
}

// BuildJSON is Build from the JSON form of a Spec.
func BuildJSON(b []byte, rec *bench.Recorder) (*engine.Job, error) {
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("jobs: spec: %w", err)
	}
	return Build(s, rec)
}
