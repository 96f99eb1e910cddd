package bench

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// rusageCPU is this process's user plus system CPU time as getrusage says:
// an account kept apart from /proc's.
func rusageCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// burn uses d of this process's CPU time, as getrusage counts it, and
// returns how much ProcessCPU grew meanwhile and how much getrusage did.
func burn(t *testing.T, d time.Duration) (got, ru time.Duration) {
	t.Helper()
	pid := os.Getpid()
	before, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	ru0 := rusageCPU(t)
	x := uint64(1)
	for rusageCPU(t)-ru0 < d {
		for range 10_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	ru = rusageCPU(t) - ru0
	after, err := ProcessCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	burnSink = x
	return after - before, ru
}

// burnSink keeps burn's loop from being optimized away.
var burnSink uint64

// The CPU a process burns shows in ProcessCPU as it does in getrusage.
func TestProcessCPUAgreesWithGetrusage(t *testing.T) {
	if got, ru := burn(t, 300*time.Millisecond); got < ru-30*time.Millisecond || got > ru+30*time.Millisecond {
		t.Fatalf("ProcessCPU grew by %v while getrusage counted %v", got, ru)
	}
}

// A few milliseconds of CPU show in ProcessCPU: it does not count in
// 10 ms ticks, in which a short benchmark case's second process read 0.
func TestProcessCPUSeesMilliseconds(t *testing.T) {
	if got, ru := burn(t, 2*time.Millisecond); got < ru/2 || got > ru+5*time.Millisecond {
		t.Fatalf("ProcessCPU grew by %v while getrusage counted %v", got, ru)
	}
}

func TestProcessCPUNoSuchProcess(t *testing.T) {
	// Linux pids stay below 2^22 (pid_max's limit).
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Fatal("ProcessCPU of a process that cannot exist succeeded")
	}
}
