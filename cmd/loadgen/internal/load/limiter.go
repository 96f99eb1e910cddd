package load

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// Limiter paces consumption to a rate, shared by every receiving task:
// each Wait reserves the next slot of the schedule and sleeps until it.
// Once lifted, consumption runs free, so that the backlog drains after the
// measured part of a run. A nil *Limiter never waits. It is safe for
// concurrent use.
type Limiter struct {
	rate   float64
	lifted atomic.Bool
	mu     struct {
		sync.Mutex
		next int64 // when the next reservation may start, bench.Now nanoseconds
	}
}

// NewLimiter returns a Limiter to rate messages per second, or nil for a
// rate of 0 (no limit).
func NewLimiter(rate float64) *Limiter {
	if rate <= 0 {
		return nil
	}
	return &Limiter{rate: rate}
}

// reserve books n messages at now and returns when they may be consumed:
// at now, or when the last reservation ends if that is later. The next
// reservation starts n/rate after that.
func (l *Limiter) reserve(n int, now int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := max(l.mu.next, now)
	l.mu.next = t + int64(float64(n)/l.rate*1e9)
	return t
}

// Wait returns when n more messages may be consumed, or at once when l is
// nil or lifted.
func (l *Limiter) Wait(n int) {
	if l == nil || l.lifted.Load() {
		return
	}
	t := l.reserve(n, bench.Now())
	// Sleep in short steps: a reservation made before the limit is lifted
	// may lie far ahead when ten thousand tasks queue for it.
	for !l.lifted.Load() {
		d := time.Duration(t - bench.Now())
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 10*time.Millisecond))
	}
}

// Lift ends the limit: waits under way return within 10 ms, later ones at
// once.
func (l *Limiter) Lift() {
	if l != nil {
		l.lifted.Store(true)
	}
}
