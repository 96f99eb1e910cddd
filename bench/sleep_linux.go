package bench

import (
	"runtime"
	"syscall"
	"time"
)

// kernelSleep sleeps d in nanosleep, then yields. The goroutine keeps its
// P through the system call (unless sysmon takes it back), so the yield
// lets the scheduler run what fell due meanwhile, the timers of that P
// included, before the caller goes on.
//
// Measured against the alternatives on a 2-core AMD EPYC VM (loadgen bench,
// fixed 100 k msgs/s): a timerfd in Go's netpoller, which parks the
// goroutine and frees its P, woke the driver sooner (44 µs late at p99 with
// nothing to send, against 0.11-0.13 ms here) but made the transport's p99
// 3-5 ms; lowering the thread's timer slack to 1 µs, which needs the
// goroutine locked to its thread, made it 0.8-1.3 ms.
func kernelSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR: an early wake; the caller re-reads the clock
	runtime.Gosched()
}
