package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Target sends message i of a run. intended is the time, in nanoseconds on
// the driver's [Clock] (by default [Now], Unix nanoseconds), at which the
// schedule says the message should have been sent; the target carries it in
// the message so that whoever sees the message complete can record
// Now()-intended. i counts from 0 without gaps. A Target is called from the
// driver's goroutine only, one call at a time; a non-nil error stops the run.
type Target func(ctx context.Context, i int64, intended int64) error

// Errors returned by the drivers.
var (
	// ErrBadRate means a FixedRate driver was given a rate that is not a
	// positive finite number.
	ErrBadRate = errors.New("bench: rate must be a positive number of messages per second")
	// ErrNoBound means a driver was given neither a message count nor a
	// duration, so it would never stop.
	ErrNoBound = errors.New("bench: driver needs a message count or a duration")
)

// SendError is returned by a driver when its Target fails; I is the index of
// the message that failed.
type SendError struct {
	I   int64
	Err error
}

func (e *SendError) Error() string { return fmt.Sprintf("bench: sending message %d: %v", e.I, e.Err) }

// Unwrap returns the Target's error.
func (e *SendError) Unwrap() error { return e.Err }

// Result tells how a driver's run went. Times are on the driver's [Clock].
type Result struct {
	// Sent is how many messages the Target accepted.
	Sent int64
	// Start is the schedule's start (message 0's intended time); End is the
	// clock when the run ended.
	Start, End int64
	// MaxLagNS is the furthest the sender ever fell behind its schedule: the
	// largest (clock reading when a message was handed to the Target) minus
	// (its intended time). A fixed-rate run whose MaxLagNS is large could not keep up,
	// and its latencies include that waiting.
	MaxLagNS int64
	// Bursts counts the times a fixed-rate driver found more than one message
	// overdue and sent them back to back.
	Bursts int64
}

// FixedRate sends messages at a fixed rate without coordinated omission.
//
// Message i's intended send time is Start + i/Rate, computed from its index,
// never from when the previous message went out. The driver sleeps until the
// next intended time; when it wakes late, or a slow Target held it up, it
// sends every message whose intended time has passed back to back (a burst),
// in order, skipping none, and only then sleeps again. Latency is measured
// from the intended time, so a stall of the system under test is charged to
// every message that should have been sent during it, as a real client at
// that rate would have experienced, rather than to the one message that
// happened to be in flight.
//
// A FixedRate value is configuration; Run may be called on it from several
// goroutines at once (one driver per channel, each with its share of the
// rate), provided Clock and Recorder are safe for that.
type FixedRate struct {
	// Rate is the number of messages per second. Required.
	Rate float64
	// Count is the number of messages to send. If zero, Duration decides:
	// every message whose intended time falls within Duration of Start.
	Count int64
	// Duration bounds the run when Count is zero.
	Duration time.Duration
	// Clock is the time source. Nil means RealClock{SpinBelow:
	// DefaultSpinBelow}, whose Now is [Now].
	Clock Clock
	// Start is message 0's intended time. Zero means the clock's Now when Run
	// begins. Several drivers given the same Start share one schedule.
	Start int64
	// Recorder, if not nil, receives Clock.Now()-intended after each Target
	// call returns: the right latency for a synchronous request/response
	// Target. Leave it nil when the receiving side records latency.
	Recorder *Recorder
}

// Run sends the messages, calling send for each, and returns when all were
// sent, send failed (a *SendError), or ctx was done (ctx's error). The Result
// is valid in every case.
func (f FixedRate) Run(ctx context.Context, send Target) (Result, error) {
	if !(f.Rate > 0) || math.IsInf(f.Rate, 1) {
		return Result{}, ErrBadRate
	}
	period := 1e9 / f.Rate
	offset := func(i int64) int64 { return int64(math.Round(float64(i) * period)) }
	n := f.Count
	if n <= 0 {
		if f.Duration <= 0 {
			return Result{}, ErrNoBound
		}
		// Every i whose intended time is within Duration of the start.
		// The product rounds (1.1 s at 100,000/s is 110000.00000000001),
		// by less than a message: settle it against the schedule itself.
		n = int64(math.Ceil(f.Duration.Seconds() * f.Rate))
		if n > 0 && offset(n-1) >= int64(f.Duration) {
			n--
		} else if offset(n) < int64(f.Duration) {
			n++
		}
	}
	clock := f.Clock
	if clock == nil {
		clock = RealClock{SpinBelow: DefaultSpinBelow}
	}
	start := f.Start
	if start == 0 {
		start = clock.Now()
	}
	intended := func(i int64) int64 { return start + offset(i) }

	res := Result{Start: start}
	var i int64
	now := clock.Now()
	for i < n {
		next := intended(i)
		if now < next {
			if err := clock.SleepUntil(ctx, next); err != nil {
				res.End = clock.Now()
				return res, err
			}
			now = clock.Now()
		}
		// Send everything that is due, oldest first, re-reading the clock
		// after each send so that messages falling due during a slow send
		// join the burst.
		var run int64
		for i < n && next <= now {
			if i&63 == 0 {
				if err := ctx.Err(); err != nil {
					res.End = now
					return res, err
				}
			}
			if lag := now - next; lag > res.MaxLagNS {
				res.MaxLagNS = lag
			}
			if err := send(ctx, i, next); err != nil {
				res.End = clock.Now()
				return res, &SendError{I: i, Err: err}
			}
			now = clock.Now()
			if f.Recorder != nil {
				f.Recorder.Record(now - next)
			}
			i++
			run++
			res.Sent = i
			next = intended(i)
		}
		if run > 1 {
			res.Bursts++
		}
	}
	res.End = clock.Now()
	return res, nil
}

// MaxRate sends messages back to back as fast as the Target accepts them.
// There is no schedule, so each message's intended time is the clock reading
// just before it is sent, and its latency is the time from handing it over
// to its completion: under an open-loop load this understates what a client
// at the same rate would see; use [FixedRate] for latency figures and
// MaxRate for throughput ceilings.
//
// A MaxRate value is configuration; Run may be called on it from several
// goroutines at once, provided Clock and Recorder are safe for that.
type MaxRate struct {
	// Count is the number of messages to send. If zero, Duration decides.
	Count int64
	// Duration bounds the run when Count is zero; the driver stops starting
	// messages once Duration has passed since Run began.
	Duration time.Duration
	// Clock is the time source. Nil means RealClock{}, whose Now is [Now].
	Clock Clock
	// Recorder, if not nil, receives Clock.Now()-intended after each Target
	// call returns.
	Recorder *Recorder
}

// Run sends the messages, calling send for each, and returns when all were
// sent, the duration passed, send failed (a *SendError), or ctx was done
// (ctx's error). The Result is valid in every case.
func (m MaxRate) Run(ctx context.Context, send Target) (Result, error) {
	if m.Count <= 0 && m.Duration <= 0 {
		return Result{}, ErrNoBound
	}
	clock := m.Clock
	if clock == nil {
		clock = RealClock{}
	}
	start := clock.Now()
	end := int64(math.MaxInt64)
	if m.Count <= 0 {
		end = start + int64(m.Duration)
	}
	res := Result{Start: start}
	for i := int64(0); m.Count <= 0 || i < m.Count; i++ {
		// ctx.Err takes a lock on cancellable contexts; look every 64 messages.
		if i&63 == 0 {
			if err := ctx.Err(); err != nil {
				res.End = clock.Now()
				return res, err
			}
		}
		now := clock.Now()
		if now >= end {
			break
		}
		if err := send(ctx, i, now); err != nil {
			res.End = clock.Now()
			return res, &SendError{I: i, Err: err}
		}
		if m.Recorder != nil {
			m.Recorder.Record(clock.Now() - now)
		}
		res.Sent = i + 1
	}
	res.End = clock.Now()
	return res, nil
}
