//go:build !linux

package bench

import "time"

// kernelSleep is a Go timer's sleep where the nanosleep of sleep_linux.go
// is not built.
func kernelSleep(d time.Duration) { time.Sleep(d) }
