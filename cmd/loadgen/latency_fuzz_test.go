package main

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
)

// FuzzImportLatency decodes a latency snapshot as it arrives from another
// process (JSON, inside an agent's findings or serve's answer) and imports
// it. Whatever the bytes: no panic; a refusal is errBadLatency; and what is
// imported holds exactly the counts sent, exports them again unchanged, and
// imports again to the same histogram.
func FuzzImportLatency(f *testing.F) {
	rec := bench.NewRecorder()
	f.Add(mustJSON(f, rec.Snapshot().Export()))
	rec.RecordN(1500, 3)
	rec.RecordN(bench.HighestNS, 1)
	rec.RecordN(1, 1<<40)
	f.Add(mustJSON(f, rec.Snapshot().Export()))
	f.Add(mustJSON(f, hostileSnapshot()))
	f.Add([]byte(`{"LowestTrackableValue":1,"HighestTrackableValue":60000000000,"SignificantFigures":3,"Counts":[-1]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s hdrhistogram.Snapshot
		if json.Unmarshal(b, &s) != nil {
			return
		}
		h, err := importLatency(&s)
		if err != nil {
			if !errors.Is(err, errBadLatency) {
				t.Fatalf("refused with %v, want errBadLatency", err)
			}
			return
		}
		var total int64
		for _, c := range s.Counts {
			total += c
		}
		if h.TotalCount() != total {
			t.Fatalf("imported %d values of %d counted", h.TotalCount(), total)
		}
		again := h.Export()
		if !slices.Equal(again.Counts, s.Counts) {
			t.Fatalf("the imported histogram exports other counts")
		}
		h2, err := importLatency(again)
		if err != nil {
			t.Fatalf("its own export is refused: %v", err)
		}
		if !h2.Equals(h) {
			t.Fatalf("imported again, the histogram differs")
		}
	})
}

func mustJSON(f *testing.F, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
