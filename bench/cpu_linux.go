package bench

import (
	"fmt"
	"os"
	"time"
)

// ProcessCPU returns the CPU time, user and system, that process pid has
// used so far, all its threads together, in steps of 10 ms (the kernel's
// USER_HZ). It reads /proc/<pid>/stat, so it works for any process this
// one may look at: a benchmark's second process as well as itself.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench: CPU time of process %d: %w", pid, err)
	}
	return parseStatCPU(b)
}
