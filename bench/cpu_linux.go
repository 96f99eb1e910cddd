package bench

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU returns the CPU time, user and system, that process pid has
// used so far, all its threads together: the kernel's CPU-time clock of
// the process (clock_getcpuclockid's), in nanoseconds, so that a short
// benchmark case of a process that used little CPU does not read 0. Where
// that clock cannot be read it falls back to /proc/<pid>/stat, in steps of
// 10 ms (the kernel's USER_HZ). Either works for any process this one may
// look at: a benchmark's second process as well as itself.
func ProcessCPU(pid int) (time.Duration, error) {
	var ts unix.Timespec
	if pid > 0 && pid <= maxPID {
		if err := unix.ClockGettime(processCPUClock(pid), &ts); err == nil {
			return time.Duration(ts.Nano()), nil
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// maxPID is the largest pid Linux gives (pid_max's limit, 2^22); a larger
// one would not fit processCPUClock's clock id.
const maxPID = 1 << 22

// processCPUClock is the clock id of process pid's CPU time, as
// clock_getcpuclockid makes it: the pid's complement shifted past the
// clock kind, CPUCLOCK_SCHED (2: the scheduler's count of the time the
// process's threads ran), without the per-thread bit.
func processCPUClock(pid int) int32 { return int32(^pid<<3 | 2) }
