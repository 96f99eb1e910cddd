package bench

import (
	"context"
	"runtime"
	"time"
)

// epoch anchors [Now]: the wall clock read once at process start, advanced
// by the monotonic clock from then on.
var epoch = time.Now()

var epochUnixNano = epoch.UnixNano()

// SetClockOffset shifts [Now] by d, as if this host's wall clock were off
// by d: for tests of the correction of latencies across hosts, which give a
// process the clock of a host whose clock is wrong. It must be called
// before anything reads the clock (it is not synchronised with Now).
func SetClockOffset(d time.Duration) { epochUnixNano = epoch.UnixNano() + int64(d) }

// Now returns the current time in nanoseconds since the Unix epoch, advanced
// by the monotonic clock: it never jumps when the wall clock is stepped, and
// it is comparable between processes on one host to within the wall clock's
// accuracy at their start. Intended send times and receive times use this
// clock, so a receiver computes a message's latency as Now()-intended. It is
// safe for concurrent use and does not allocate.
func Now() int64 { return epochUnixNano + int64(time.Since(epoch)) }

// Clock is the time source of a driver. Now returns nanoseconds on some fixed
// scale; SleepUntil returns once Now() >= t, or with ctx's error when ctx is
// done first. Drivers call a Clock from one goroutine only.
type Clock interface {
	Now() int64
	SleepUntil(ctx context.Context, t int64) error
}

// RealClock is the [Clock] drivers use by default: [Now], with sleeps that
// use a timer for all but the last SpinBelow of a wait and yield-spin
// (runtime.Gosched) through the rest, because timers wake tens of
// microseconds late. Spinning keeps a core busy; a zero SpinBelow never
// spins, and a driver at a high rate then sends in bursts instead, which the
// latency figures show honestly.
type RealClock struct {
	SpinBelow time.Duration
}

// DefaultSpinBelow is the SpinBelow of the driver's default [RealClock].
const DefaultSpinBelow = 50 * time.Microsecond

// Now returns [Now]().
func (RealClock) Now() int64 { return Now() }

// SleepUntil waits until [Now]() >= t or ctx is done.
func (c RealClock) SleepUntil(ctx context.Context, t int64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := time.Duration(t - Now())
		if wait <= 0 {
			return nil
		}
		if wait < c.SpinBelow {
			runtime.Gosched()
			continue
		}
		// Wake a spin's worth early; the loop spins the rest precisely.
		timer := time.NewTimer(wait - c.SpinBelow)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}
