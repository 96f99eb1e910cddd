package bench

import (
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Recording range of every [Recorder]: values are nanoseconds from 1 ns to
// 60 s, kept to 3 significant figures (a relative error of at most 0.1%).
const (
	LowestNS           = 1
	HighestNS          = 60_000_000_000
	SignificantFigures = 3
)

// Recorder is a latency histogram in nanoseconds, safe for concurrent use.
//
// Internally it is a small set of shards, each an HdrHistogram behind its own
// mutex. [Recorder.Record] picks a shard at random and takes the first one it
// can lock without waiting, so concurrent recorders rarely touch the same
// lock or the same cache lines; readers merge the shards. Values outside the
// 0..60 s range are clamped into it and counted by [Recorder.Clamped], so
// nothing is silently dropped.
//
// The zero Recorder is not usable; create one with [NewRecorder].
type Recorder struct {
	shards  []shard
	mask    uint32
	clamped atomic.Int64
	hint    sync.Pool // of uint32 shard indexes

	// base holds the values takeInterval moved out of the shards. Lock
	// order: base, then a shard.
	base struct {
		sync.Mutex
		h *hdrhistogram.Histogram
	}
}

type shard struct {
	mu struct {
		sync.Mutex
		h *hdrhistogram.Histogram
	}
	_ [64]byte // keep neighbouring shards' locks on different cache lines
}

// NewRecorder returns an empty Recorder with twice as many shards as
// GOMAXPROCS, rounded up to a power of two, and at most 256 (so that shard
// indexes box without allocating).
func NewRecorder() *Recorder {
	n := min(256, 1<<bits.Len(uint(2*runtime.GOMAXPROCS(0)-1)))
	r := &Recorder{shards: make([]shard, n), mask: uint32(n - 1)}
	for i := range r.shards {
		r.shards[i].mu.h = newHistogram()
	}
	r.hint.New = func() any { return rand.Uint32() & r.mask }
	r.base.h = newHistogram()
	return r
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(LowestNS, HighestNS, SignificantFigures)
}

// Record adds one latency of ns nanoseconds. Negative values are recorded as
// 0 and values above 60 s as 60 s; both are counted by [Recorder.Clamped].
// Record is safe for concurrent use and does not allocate.
func (r *Recorder) Record(ns int64) {
	r.RecordN(ns, 1)
}

// RecordN adds n occurrences of a latency of ns nanoseconds, with the same
// clamping as [Recorder.Record]. It is safe for concurrent use.
func (r *Recorder) RecordN(ns, n int64) {
	if n <= 0 {
		return
	}
	if ns < 0 {
		ns = 0
		r.clamped.Add(n)
	} else if ns > HighestNS {
		ns = HighestNS
		r.clamped.Add(n)
	}
	// The pool is only a hint: sync.Pool keeps a per-P cache, so a
	// goroutine usually gets back the shard its P used last and the shard's
	// counts stay in that core's cache. The lock is what makes it safe.
	i, _ := r.hint.Get().(uint32)
	for {
		s := &r.shards[i]
		if s.mu.TryLock() {
			// The value is in range and n is positive, so the only possible
			// error is a total count beyond MaxInt64, which a benchmark
			// cannot reach.
			_ = s.mu.h.RecordValues(ns, n)
			s.mu.Unlock()
			//lint:ignore SA6002 shard indexes are below 256, and Go boxes those without allocating
			r.hint.Put(i)
			return
		}
		i = (i + 1) & r.mask
	}
}

// Clamped returns how many recorded values lay outside 0..60 s and were
// clamped to its ends. It is safe for concurrent use.
func (r *Recorder) Clamped() int64 { return r.clamped.Load() }

// Merge adds every value recorded in other to r. Merging a Recorder into
// itself is not allowed. It is safe for concurrent use with recording into
// either Recorder.
func (r *Recorder) Merge(other *Recorder) {
	if other == r {
		panic("bench: Recorder merged into itself")
	}
	h := other.Snapshot()
	r.MergeHistogram(h)
	r.clamped.Add(other.clamped.Load())
}

// MergeHistogram adds every value in h, a histogram in nanoseconds such as
// one returned by [Recorder.Snapshot] in another process, to r. Values
// outside r's range are clamped. r does not keep h. It is safe for
// concurrent use with recording into r; h must not change during the call.
func (r *Recorder) MergeHistogram(h *hdrhistogram.Histogram) {
	for _, b := range h.Distribution() {
		if b.Count > 0 {
			r.RecordN(b.From, b.Count)
		}
	}
}

// Snapshot returns a new histogram holding every value recorded so far, in
// nanoseconds. The caller owns it; later recording does not change it. It is
// safe for concurrent use, and costs a walk over every shard's counts (tens
// of microseconds), so call it about once a second, not per message.
func (r *Recorder) Snapshot() *hdrhistogram.Histogram {
	out := newHistogram()
	r.base.Lock()
	defer r.base.Unlock()
	out.Merge(r.base.h)
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		out.Merge(s.mu.h)
		s.mu.Unlock()
	}
	return out
}

// Count returns how many values have been recorded. It is safe for
// concurrent use.
func (r *Recorder) Count() int64 {
	r.base.Lock()
	defer r.base.Unlock()
	n := r.base.h.TotalCount()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += s.mu.h.TotalCount()
		s.mu.Unlock()
	}
	return n
}

// Reset discards every recorded value. Values recorded concurrently with
// Reset may or may not survive it.
func (r *Recorder) Reset() {
	r.base.Lock()
	defer r.base.Unlock()
	r.base.h.Reset()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		s.mu.h.Reset()
		s.mu.Unlock()
	}
	r.clamped.Store(0)
}

// takeInterval resets dst (a histogram from newHistogram) to the values
// recorded since the previous takeInterval, or since the Recorder was made,
// and keeps them in the Recorder's total. It allocates nothing, so a
// once-a-second progress line costs no garbage: copying a histogram of this
// range is about 300 KB. One caller (a Progress) may use it per Recorder.
func (r *Recorder) takeInterval(dst *hdrhistogram.Histogram) {
	dst.Reset()
	r.base.Lock()
	defer r.base.Unlock()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		dst.Merge(s.mu.h)
		s.mu.h.Reset()
		s.mu.Unlock()
	}
	r.base.h.Merge(dst)
}

// Latency returns the recorded distribution's percentiles in microseconds.
// It is safe for concurrent use.
func (r *Recorder) Latency() Latency { return LatencyOf(r.Snapshot()) }

// Latency is a latency distribution summarised by its percentiles, in
// microseconds. Each value is the highest value equivalent to the recorded
// percentile (HdrHistogram's convention), so it never understates.
type Latency struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	P999  float64 `json:"p999"`
	P9999 float64 `json:"p9999"`
	Max   float64 `json:"max"`
}

// LatencyOf summarises h, a histogram in nanoseconds. An empty histogram
// gives the zero Latency.
func LatencyOf(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	v := h.ValueAtPercentilesSlice([]float64{50, 90, 99, 99.9, 99.99})
	return Latency{
		P50:   nsToUS(v[0]),
		P90:   nsToUS(v[1]),
		P99:   nsToUS(v[2]),
		P999:  nsToUS(v[3]),
		P9999: nsToUS(v[4]),
		Max:   nsToUS(h.Max()),
	}
}

func nsToUS(ns int64) float64 { return float64(ns) / 1e3 }
