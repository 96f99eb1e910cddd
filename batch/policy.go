package batch

import (
	"fmt"
	"time"
)

// Decision is what [Policy.Decide] tells the connection to do.
type Decision struct {
	// Flush means: cut a batch of min(ready, MaxBatchBytes) bytes now, hand
	// it to the socket and report it with [Policy.Flushed].
	Flush bool
	// Cause says why; it is meaningful only when Flush is true.
	Cause Cause
	// WakeAt is 0 when no timer is needed, else the monotonic time in
	// nanoseconds at which the connection should call Decide again if
	// nothing else has made it do so earlier. It is only set when Flush is
	// false.
	WakeAt int64
}

// Stats are the counters of one [Policy], a snapshot taken by [Policy.Stats].
type Stats struct {
	// Flushes counts batches reported to [Policy.Flushed], by cause.
	// A cause out of range is counted in Batches only.
	Flushes [NumCauses]uint64
	// Batches and Bytes count all batches reported to Flushed and their
	// (uncompressed or compressed, as reported) size.
	Batches, Bytes uint64
	// WriteDones counts completed writes reported to [Policy.WriteDone].
	WriteDones uint64
	// Inflight is the number of batches whose writes have not completed.
	Inflight int
	// Linger is the current adapted linger, as [Policy.Linger] returns it.
	Linger time.Duration
	// WriteTime is the smoothed time from Flushed to WriteDone; 0 until a
	// write has completed.
	WriteTime time.Duration
	// FillTime is the smoothed time the observed data rate needs to fill
	// MaxBatchBytes, capped at MaxLinger; 0 until two batches have been
	// flushed.
	FillTime time.Duration
}

// Policy decides when one connection flushes its outgoing batch. It holds the
// connection's in-flight count, the time the oldest waiting byte has waited,
// and the observations the linger adapts to.
//
// A Policy belongs to one connection and is not safe for concurrent use: call
// all its methods from the connection's event loop. It does not allocate on
// [Policy.Decide], [Policy.Flushed] or [Policy.WriteDone] unless more than
// MaxInflight batches are reported in flight.
type Policy struct {
	cfg       Config
	linger    int64 // current linger in ns
	minLinger int64
	maxLinger int64

	inflight int
	starts   []int64 // Flushed times of the in-flight batches, a ring; oldest at head
	head     int

	waiting      bool  // a Decide saw ready bytes that have not been flushed since
	waitingSince int64 // when that Decide happened
	writeDone    bool  // a write completed while data was waiting; the next Decide flushes
	explicit     bool  // RequestFlush was called; cleared when nothing is waiting

	haveWrite bool
	writeAvg  int64 // smoothed write time, ns

	haveFlush   bool
	lastFlush   int64
	haveRate    bool
	intervalAvg int64 // smoothed time between flushes, ns, each sample capped at MaxLinger
	bytesAvg    int64 // smoothed bytes per flush

	stats Stats
}

// New returns a Policy for one connection with nothing in flight and the
// linger set to cfg.Linger. It panics if cfg.Validate fails: configuration is
// the program's, never the network's, so check it with [Config.Validate] where
// it is read.
func New(cfg Config) *Policy {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("batch.New: %v", err))
	}
	p := &Policy{
		cfg:       cfg,
		linger:    int64(cfg.Linger),
		minLinger: int64(cfg.MinLinger),
		maxLinger: int64(cfg.MaxLinger),
		starts:    make([]int64, cfg.MaxInflight),
	}
	return p
}

// Decide tells the connection whether to cut a batch now, given the monotonic
// time now in nanoseconds and the bytes waiting to be batched.
//
//   - Nothing waiting: no flush, no timer.
//   - MaxInflight batches in flight: no flush and no timer; the next
//     [Policy.WriteDone] is the event to wait for, after which the connection
//     calls Decide again.
//   - Otherwise a flush, with the first cause that applies: CauseFull when
//     readyBytes >= MaxBatchBytes; CauseExplicit after [Policy.RequestFlush];
//     CauseWriteDone when a write completed while the data was waiting
//     (seen by an earlier Decide) and nothing was flushed since;
//     CauseIdle when nothing is in flight; CauseLinger when the linger has
//     passed since the first Decide that saw the waiting bytes.
//   - Else no flush, and WakeAt is that linger deadline (0, no timer, if
//     the deadline lies beyond the largest int64).
//
// Decide does not allocate. A Decide with readyBytes <= 0 also ends a
// RequestFlush. Data that a Decide has not yet seen when a write completes
// does not count as waiting for that write: it goes out as idle when nothing
// is in flight, else it lingers.
func (p *Policy) Decide(now int64, readyBytes int) Decision {
	if readyBytes <= 0 {
		p.waiting = false
		p.writeDone = false
		p.explicit = false
		return Decision{}
	}
	if !p.waiting {
		p.waiting = true
		p.waitingSince = now
	}
	if p.inflight >= p.cfg.MaxInflight {
		return Decision{}
	}
	switch {
	case readyBytes >= p.cfg.MaxBatchBytes:
		return Decision{Flush: true, Cause: CauseFull}
	case p.explicit:
		return Decision{Flush: true, Cause: CauseExplicit}
	case p.writeDone:
		return Decision{Flush: true, Cause: CauseWriteDone}
	case p.inflight == 0:
		return Decision{Flush: true, Cause: CauseIdle}
	}
	deadline := p.waitingSince + p.linger
	if deadline < p.waitingSince {
		// A linger longer than the clock can count to never ends: no
		// timer, rather than a sum wrapped around into the past.
		return Decision{}
	}
	if now >= deadline {
		return Decision{Flush: true, Cause: CauseLinger}
	}
	return Decision{WakeAt: deadline}
}

// RequestFlush asks that waiting data go out without lingering, for an
// application's Flush or a Close: until a [Policy.Decide] sees no bytes
// waiting, Decide flushes with CauseExplicit whenever fewer than MaxInflight
// batches are in flight. The in-flight bound still holds.
func (p *Policy) RequestFlush() {
	p.explicit = true
}

// Flushed records that a batch of the given size was handed to the socket at
// time now, for the given cause (normally the cause Decide returned, or
// CauseExplicit for a flush the connection made on its own). The batch counts
// as in flight until its [Policy.WriteDone]. The bytes waiting afterwards, if
// any, start a new linger at the next Decide.
func (p *Policy) Flushed(now int64, bytes int, cause Cause) {
	if bytes < 0 {
		bytes = 0
	}
	if p.inflight == len(p.starts) {
		p.growStarts()
	}
	p.starts[(p.head+p.inflight)%len(p.starts)] = now
	p.inflight++
	p.waiting = false
	p.writeDone = false

	if int(cause) < len(p.stats.Flushes) {
		p.stats.Flushes[cause]++
	}
	p.stats.Batches++
	p.stats.Bytes += uint64(bytes)

	if p.haveFlush {
		interval := min(max(now-p.lastFlush, 0), p.maxLinger)
		if p.haveRate {
			p.intervalAvg += (interval - p.intervalAvg) / ewmaDiv
			p.bytesAvg += (int64(bytes) - p.bytesAvg) / ewmaDiv
		} else {
			p.intervalAvg, p.bytesAvg, p.haveRate = interval, int64(bytes), true
		}
	}
	p.haveFlush, p.lastFlush = true, now
	p.adapt()
}

// WriteDone records that the oldest in-flight batch's write completed at time
// now. Writes complete in the order they were flushed. WriteDone with nothing
// in flight is ignored. Call Decide afterwards: data that was waiting (that an
// earlier Decide saw and did not flush) is flushed with CauseWriteDone.
func (p *Policy) WriteDone(now int64) {
	if p.inflight == 0 {
		return
	}
	start := p.starts[p.head]
	p.head = (p.head + 1) % len(p.starts)
	p.inflight--
	p.writeDone = p.waiting
	p.stats.WriteDones++

	sample := max(now-start, 0)
	if p.haveWrite {
		p.writeAvg += (sample - p.writeAvg) / ewmaDiv
	} else {
		p.writeAvg, p.haveWrite = sample, true
	}
	p.adapt()
}

// ewmaDiv is the inverse gain of the smoothed averages: each new sample moves
// the average by 1/8 of its difference, as TCP smooths its round-trip time.
const ewmaDiv = 8

// adapt sets the linger from the observations.
//
// The linger is how long waiting data may wait while writes are in flight.
// Waiting longer than a write takes gains nothing, because the write's
// completion flushes the data anyway (CauseWriteDone); waiting longer than
// the data rate needs to fill a batch gains nothing either, because the batch
// is then flushed as full (CauseFull). So the linger is the smaller of the
// smoothed write time and the smoothed fill time (MaxBatchBytes at the
// observed bytes per nanosecond), clamped to [MinLinger, MaxLinger]. Before
// any write has completed the write time is taken to be Config.Linger. A
// linger set this way fires only when a write is slower than usual, which is
// when a further batch in flight helps.
func (p *Policy) adapt() {
	target := int64(p.cfg.Linger)
	if p.haveWrite {
		target = p.writeAvg
	}
	if fill, ok := p.fillTime(); ok && fill < target {
		target = fill
	}
	p.linger = min(max(target, p.minLinger), p.maxLinger)
}

// fillTime is the time the smoothed data rate needs to fill MaxBatchBytes.
func (p *Policy) fillTime() (int64, bool) {
	if !p.haveRate {
		return 0, false
	}
	if p.bytesAvg <= 0 {
		return p.maxLinger, true // nothing is arriving: filling takes forever
	}
	f := float64(p.cfg.MaxBatchBytes) * float64(p.intervalAvg) / float64(p.bytesAvg)
	if f >= float64(p.maxLinger) {
		return p.maxLinger, true
	}
	return int64(f), true
}

func (p *Policy) growStarts() {
	n := make([]int64, 2*len(p.starts))
	for i := range p.inflight {
		n[i] = p.starts[(p.head+i)%len(p.starts)]
	}
	p.starts, p.head = n, 0
}

// Inflight returns the number of batches flushed whose writes have not
// completed.
func (p *Policy) Inflight() int { return p.inflight }

// Linger returns the current adapted linger: the smaller of the smoothed
// write time and the smoothed time to fill a batch, clamped to
// [Config.MinLinger, Config.MaxLinger]; Config.Linger stands in for the write
// time until the first write completes.
func (p *Policy) Linger() time.Duration { return time.Duration(p.linger) }

// Stats returns a snapshot of the policy's counters and estimates.
func (p *Policy) Stats() Stats {
	s := p.stats
	s.Inflight = p.inflight
	s.Linger = time.Duration(p.linger)
	if p.haveWrite {
		s.WriteTime = time.Duration(p.writeAvg)
	}
	if fill, ok := p.fillTime(); ok {
		s.FillTime = time.Duration(fill)
	}
	return s
}
