package bench

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

func TestKernelSleepLastsAtLeastAsAsked(t *testing.T) {
	for _, d := range []time.Duration{-1, 0, 1, 10 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		kernelSleep(d)
		if got := time.Since(start); got < d {
			t.Errorf("kernelSleep(%v) returned after %v", d, got)
		}
	}
}

// A signal interrupts nanosleep (whatever SA_RESTART says); the sleep goes
// on for what was left of it.
func TestKernelSleepSleepsOnThroughSignals(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := syscall.Getpid(), syscall.Gettid()
	const d = 60 * time.Millisecond
	sent := make(chan int)
	go func() {
		n := 0
		for range 5 {
			time.Sleep(8 * time.Millisecond)
			// SIGURG is the runtime's own preemption signal: Go handles it
			// and ignores one that preempts nothing.
			if syscall.Tgkill(pid, tid, syscall.SIGURG) == nil {
				n++
			}
		}
		sent <- n
	}()
	start := time.Now()
	kernelSleep(d)
	got := time.Since(start)
	if n := <-sent; n == 0 {
		t.Fatal("no signal reached the sleeping thread; the test proves nothing")
	}
	if got < d {
		t.Errorf("kernelSleep(%v) returned after %v: a signal cut it short", d, got)
	}
}
