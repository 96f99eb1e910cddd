//go:build !linux

package bench

import "time"

// kernelSleep is time.Sleep where Linux's timerfd is not available.
func kernelSleep(d time.Duration) { time.Sleep(d) }
