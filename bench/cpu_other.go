//go:build !linux

package bench

import "time"

// ProcessCPU returns ErrNoProcessCPU: only Linux's /proc is read.
func ProcessCPU(pid int) (time.Duration, error) { return 0, ErrNoProcessCPU }
