//go:build !linux

package bench

import (
	"context"
	"time"
)

// MeasureStalls returns ErrNoStallProbe: threads are pinned and their
// context switches read only on Linux.
func MeasureStalls(ctx context.Context, d time.Duration) (Stalls, error) {
	return Stalls{}, ErrNoStallProbe
}
