package bench

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Progress watches a run: once a second it prints a line such as
//
//	t=3s  rate 1.23 M msgs/s  p99 45.0 µs  delivered 3,456,789
//
// and keeps a [Sample] of that second, with the delivery rate from an atomic
// counter and the p99 of the latencies recorded during the second. The
// scenario marks injected faults with [Progress.Mark]; they go into the
// sample of the second they happened in and into [Progress.Events].
//
// All methods are safe for concurrent use.
type Progress struct {
	out       io.Writer
	delivered *atomic.Int64
	rec       *Recorder
	interval  time.Duration

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu struct {
		sync.Mutex
		start         time.Time
		started       bool
		samples       []Sample
		events        []Event
		pending       []string // fault kinds marked since the last sample
		prevT         time.Duration
		prevDelivered int64
		interval      *hdrhistogram.Histogram // reused for each second's values
	}
}

// NewProgress returns a Progress that writes to out (nil discards the lines
// but still keeps samples), reads the delivered count from delivered, and
// takes per-second percentiles from rec (nil: the lines have no p99 and the
// samples' is 0). It does not start until [Progress.Start].
func NewProgress(out io.Writer, delivered *atomic.Int64, rec *Recorder) *Progress {
	if out == nil {
		out = io.Discard
	}
	p := &Progress{
		out: out, delivered: delivered, rec: rec, interval: time.Second,
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if rec != nil {
		p.mu.interval = newHistogram()
	}
	return p
}

// Start marks the start of the run and begins printing once a second, on its
// own goroutine, until [Progress.Stop]. Calling Start twice panics.
func (p *Progress) Start() {
	p.mu.Lock()
	if p.mu.started {
		p.mu.Unlock()
		panic("bench: Progress started twice")
	}
	p.mu.started = true
	p.mu.start = time.Now()
	p.mu.prevDelivered = p.delivered.Load()
	if p.rec != nil {
		p.rec.takeInterval(p.mu.interval) // values from before the start are not in the first second
	}
	start := p.mu.start
	p.mu.Unlock()

	go func() {
		defer close(p.done)
		t := time.NewTicker(p.interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				// The tick's own time is when it fell due, which may be
				// well before this goroutine got to it; the count read
				// now is that of now.
				p.sample(time.Since(start))
			}
		}
	}()
}

// Stop ends the printing and waits for the printing goroutine to exit. The
// partial last second is not sampled. Stop is idempotent; calling it before
// Start only prevents printing.
func (p *Progress) Stop() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	started := p.mu.started
	p.mu.Unlock()
	if started {
		<-p.done
	}
}

// Mark records a fault event of the given kind ("drop", "kill", ...) at the
// current time.
func (p *Progress) Mark(kind, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var t time.Duration
	if p.mu.started {
		t = time.Since(p.mu.start)
	}
	p.markLocked(t, kind, detail)
}

func (p *Progress) markLocked(t time.Duration, kind, detail string) {
	p.mu.events = append(p.mu.events, Event{T: t.Seconds(), Kind: kind, Detail: detail})
	p.mu.pending = append(p.mu.pending, kind)
}

// Samples returns a copy of the samples taken so far, one per second.
func (p *Progress) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.mu.samples)
}

// Events returns a copy of the events marked so far.
func (p *Progress) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.mu.events)
}

// sample takes the sample for the interval ending t after the start and
// prints its line.
func (p *Progress) sample(t time.Duration) {
	delivered := p.delivered.Load()

	p.mu.Lock()
	s := Sample{T: t.Seconds(), Delivered: delivered, Faults: p.mu.pending}
	if dt := (t - p.mu.prevT).Seconds(); dt > 0 {
		s.MsgsPerS = float64(delivered-p.mu.prevDelivered) / dt
	}
	if p.rec != nil {
		p.rec.takeInterval(p.mu.interval)
		if p.mu.interval.TotalCount() > 0 {
			s.P99US = nsToUS(p.mu.interval.ValueAtQuantile(99))
		}
	}
	p.mu.pending = nil
	p.mu.prevT, p.mu.prevDelivered = t, delivered
	p.mu.samples = append(p.mu.samples, s)
	p.mu.Unlock()

	p99 := ""
	if p.rec != nil {
		p99 = "  p99 " + duration(s.P99US)
	}
	fmt.Fprintf(p.out, "t=%ds  rate %s msgs/s%s  delivered %s\n",
		int64(t.Round(time.Second)/time.Second), si(s.MsgsPerS), p99, grouped(delivered))
}
