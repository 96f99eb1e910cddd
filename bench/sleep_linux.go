package bench

import (
	"syscall"
	"time"
)

// kernelSleep sleeps d in nanosleep. The goroutine keeps its P through the
// system call, as in any system call, unless sysmon takes it back for
// goroutines waiting to run.
//
// Measured against the alternatives on a 2-core AMD EPYC VM (loadgen bench,
// fixed 100 k msgs/s, results/driver-clock): yielding after the sleep, so
// that the P's scheduler runs what fell due meanwhile, measured alike at
// p99 but met the default backend's goal against the net backend in fewer
// runs; a timerfd in Go's netpoller, which parks the goroutine and frees
// its P, woke the driver sooner (0.04-0.08 ms late at p99 with nothing to
// send, against 0.11-0.19 ms here) but made the transport's p99 3-5 ms;
// lowering the thread's timer slack to 1 µs, which needs the goroutine
// locked to its thread, made it 0.8-2.8 ms.
func kernelSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	// A signal (a profiler's, say) interrupts the sleep: sleep the rest,
	// which nanosleep leaves in its second argument.
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
