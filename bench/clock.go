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
// use a Go timer for the long part of a wait, a kernel sleep for the last
// KernelBelow of it, and a yield-spin (runtime.Gosched) for the last
// SpinBelow.
//
// A Go timer wakes late by up to a millisecond whenever the process's
// threads are idle: the runtime then waits for its next timer in
// epoll_wait, whose timeout is in whole milliseconds, and nothing wakes it
// sooner. A kernel sleep (on Linux, nanosleep) wakes about 50 µs late at the
// median (the thread's timer slack) and 0.1-0.2 ms at p99, costs a system
// call and no spinning, and keeps the goroutine's P through it, as any
// system call does; elsewhere it is a Go timer too. Spinning keeps a
// core busy. A zero field turns its part off: RealClock{} sleeps on Go
// timers alone, and a driver at a high rate then sends what fell due in
// bursts, which its latency figures show honestly.
type RealClock struct {
	KernelBelow time.Duration
	SpinBelow   time.Duration
}

// DefaultSpinBelow is the SpinBelow of the driver's default [RealClock].
const DefaultSpinBelow = 50 * time.Microsecond

// DefaultKernelBelow is a KernelBelow that covers a Go timer's lateness:
// on 2-core VMs an idle process's timers woke 1.0-1.1 ms late at p99.
const DefaultKernelBelow = 2 * time.Millisecond

// Now returns [Now]().
func (RealClock) Now() int64 { return Now() }

// SleepUntil waits until [Now]() >= t or ctx is done. A kernel sleep is
// not interrupted by ctx; it lasts less than KernelBelow.
func (c RealClock) SleepUntil(ctx context.Context, t int64) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := time.Duration(t - Now())
		switch {
		case wait <= 0:
			return nil
		case wait < c.SpinBelow:
			runtime.Gosched()
			continue
		case wait < c.KernelBelow:
			// Wake a spin's worth early; the loop spins the rest precisely.
			kernelSleep(wait - c.SpinBelow)
			continue
		}
		// Wake early by what the finer sleeps cover.
		timer := time.NewTimer(wait - max(c.SpinBelow, c.KernelBelow))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}
