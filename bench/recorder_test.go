package bench

import (
	"runtime"
	"sync"
	"testing"
)

func TestRecorderSummarisesPercentilesInMicroseconds(t *testing.T) {
	r := NewRecorder()
	for v := int64(1); v <= 10_000; v++ {
		r.Record(v * 1000) // 1 µs .. 10 ms
	}
	l := r.Latency()
	checks := []struct {
		name      string
		got, want float64
	}{
		{"p50", l.P50, 5000}, {"p90", l.P90, 9000}, {"p99", l.P99, 9900},
		{"p99.9", l.P999, 9990}, {"p99.99", l.P9999, 9999}, {"max", l.Max, 10000},
	}
	for _, c := range checks {
		if c.got < c.want || c.got > c.want*1.001 {
			t.Errorf("%s = %v µs, want %v within 0.1%%", c.name, c.got, c.want)
		}
	}
}

func TestRecorderClampsValuesOutsideItsRangeAndCountsThem(t *testing.T) {
	r := NewRecorder()
	r.Record(-5)
	r.Record(2 * HighestNS)
	r.Record(1000)
	h := r.Snapshot()
	if h.TotalCount() != 3 || r.Clamped() != 2 {
		t.Fatalf("count %d clamped %d, want 3 and 2", h.TotalCount(), r.Clamped())
	}
	if !h.ValuesAreEquivalent(h.Max(), HighestNS) || h.Min() != 0 {
		t.Errorf("range %d..%d, want 0..%d", h.Min(), h.Max(), int64(HighestNS))
	}
}

func TestRecorderKeepsEveryValueRecordedConcurrently(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				r.Record(int64(g*1000 + i))
			}
		})
	}
	// Reading while others record must be safe.
	_ = r.Snapshot()
	wg.Wait()
	if got := r.Count(); got != 40_000 {
		t.Errorf("count %d, want 40000", got)
	}
}

func TestMergeAddsTheOtherRecordersValues(t *testing.T) {
	a, b := NewRecorder(), NewRecorder()
	a.RecordN(1000, 3)
	b.RecordN(50_000, 2)
	b.Record(-1)
	a.Merge(b)
	h := a.Snapshot()
	if h.TotalCount() != 6 || !h.ValuesAreEquivalent(h.Max(), 50_000) || a.Clamped() != 1 {
		t.Errorf("merged count %d max %d clamped %d, want 6, 50000, 1", h.TotalCount(), h.Max(), a.Clamped())
	}
	if b.Count() != 3 {
		t.Errorf("merge changed its source: count %d, want 3", b.Count())
	}
	a.Reset()
	if a.Count() != 0 || a.Clamped() != 0 {
		t.Error("reset left values behind")
	}
}

func TestAnEmptyRecorderHasZeroLatency(t *testing.T) {
	if l := NewRecorder().Latency(); l != (Latency{}) {
		t.Errorf("got %+v", l)
	}
}

func BenchmarkRecorderRecord(b *testing.B) {
	r := NewRecorder()
	b.ReportAllocs()
	v := int64(1)
	for b.Loop() {
		r.Record(v)
		v = (v*7 + 13) & 0xfffff
	}
}

func BenchmarkRecorderRecordParallel(b *testing.B) {
	r := NewRecorder()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := int64(1)
		for pb.Next() {
			r.Record(v)
			v = (v*7 + 13) & 0xfffff
		}
	})
}

func BenchmarkRecorderSnapshot(b *testing.B) {
	r := NewRecorder()
	for i := range int64(100_000) {
		r.Record(i * 100)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Snapshot()
	}
}

// BenchmarkMutexHistogramRecordParallel is the baseline Recorder's sharding
// is measured against: one HdrHistogram behind one mutex.
func BenchmarkMutexHistogramRecordParallel(b *testing.B) {
	var mu sync.Mutex
	h := newHistogram()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		v := int64(1)
		for pb.Next() {
			mu.Lock()
			_ = h.RecordValue(v)
			mu.Unlock()
			v = (v*7 + 13) & 0xfffff
		}
	})
}

// takeInterval hands out each interval's values once, while the totals keep
// everything, and it does so without garbage: a progress line a second must
// not make a long run's memory creep.
func TestTakeIntervalSplitsByIntervalKeepsTotalsAndAllocatesNothing(t *testing.T) {
	r := NewRecorder()
	iv := newHistogram()
	for i := range 100 {
		r.Record(int64(1000 + i))
	}
	r.takeInterval(iv)
	if got := iv.TotalCount(); got != 100 {
		t.Fatalf("first interval holds %d values, want 100", got)
	}
	r.RecordN(5_000_000, 10)
	r.takeInterval(iv)
	if got := iv.TotalCount(); got != 10 {
		t.Fatalf("second interval holds %d values, want 10", got)
	}
	if v := iv.ValueAtQuantile(99); !iv.ValuesAreEquivalent(v, 5_000_000) {
		t.Fatalf("second interval's p99 is %d ns, want 5 ms", v)
	}
	if got := r.Count(); got != 110 {
		t.Fatalf("Count after two intervals is %d, want 110", got)
	}
	r.Record(7)
	if got := r.Snapshot().TotalCount(); got != 111 {
		t.Fatalf("Snapshot holds %d values, want 111 (taken intervals and the current one)", got)
	}
	if max := r.Snapshot().Max(); !iv.ValuesAreEquivalent(max, 5_000_000) {
		t.Fatalf("Snapshot's max is %d, want 5 ms from a taken interval", max)
	}
	r.Reset()
	if got := r.Count(); got != 0 {
		t.Fatalf("Count after Reset is %d, want 0", got)
	}
	// The iterator Merge uses may cost an object; the counts must not.
	if a := testing.AllocsPerRun(20, func() { r.Record(1); r.takeInterval(iv) }); a > float64(2*len(r.shards)) {
		t.Fatalf("takeInterval allocates %.0f objects a call", a)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		r.Record(1)
		r.takeInterval(iv)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Fatalf("20 intervals allocated %d bytes; a histogram copy is ~300 KB", grew)
	}
}
