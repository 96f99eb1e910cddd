package bench

import (
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
