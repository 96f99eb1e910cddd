package load

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// Reservations follow one another at n/rate, and an idle limiter does not
// bank the time it was idle.
func TestLimiterReservesSlotsOnTheSchedule(t *testing.T) {
	const ms = int64(time.Millisecond)
	l := NewLimiter(1000) // one message a millisecond
	for _, step := range []struct {
		n         int
		now, want int64
	}{
		{10, 0, 0},                  // the first goes at once
		{5, 0, 10 * ms},             // after the 10 booked before it
		{1, 3 * ms, 15 * ms},        // still queued behind them
		{1, 100 * ms, 100 * ms},     // idle since 16 ms: at once, no credit banked
		{2, 100 * ms, 101 * ms},     // behind the one before
		{1, 100*ms + 500, 103 * ms}, // a fraction of a slot later: still behind
		{1000, 200 * ms, 200 * ms},  // a large run at once
		{1, 200 * ms, 200*ms + 1e9}, // ... holds the next back for its whole second
	} {
		if got := l.reserve(step.n, step.now); got != step.want {
			t.Fatalf("reserve(%d) at %d ns = %d, want %d", step.n, step.now, got, step.want)
		}
	}
}

// Lift releases a wait booked far ahead.
func TestLimiterLiftReleasesAWaiter(t *testing.T) {
	l := NewLimiter(1)
	l.reserve(1_000_000, bench.Now()) // the next slot is a million seconds away
	booked := func() int64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.next
	}
	before := booked()
	done := make(chan struct{})
	go func() {
		l.Wait(1)
		close(done)
	}()
	// Lift only once the waiter has booked its slot, so that it is
	// waiting for it, not returning at the door.
	for booked() == before {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("Wait returned before its slot, a million seconds ahead")
	default:
	}
	l.Lift()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Lift")
	}
	l.Wait(1_000_000) // lifted: at once
}

func TestNoLimiterNeverWaits(t *testing.T) {
	l := NewLimiter(0)
	if l != nil {
		t.Fatalf("NewLimiter(0) = %v, want nil (no limit)", l)
	}
	l.Wait(1 << 30)
	l.Lift()
}
