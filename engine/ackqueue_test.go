package engine

import (
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/engine/clock"
)

// TestAnAckQueueHoldsTheLeastTimestampOfEveryRunNotWhollyAcknowledged
// compares the queue with a list of every run pushed: after any pushes and
// acknowledgements its min is the least minimum timestamp of the runs
// whose last message is not yet acknowledged, so that the task's clock
// never passes a message still in flight.
func TestAnAckQueueHoldsTheLeastTimestampOfEveryRunNotWhollyAcknowledged(t *testing.T) {
	type run struct {
		end   uint64
		minTs int64
	}
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 3))
		var q ackQueue
		var runs []run
		var pushed, acked uint64
		for step := range 2000 {
			if rng.IntN(3) > 0 {
				// Timestamps wander up and down, with many ties and
				// neighbours, so that runs at ts and ts±1 meet.
				n := 1 + rng.IntN(4)
				ts := int64(step/8 + rng.IntN(4))
				q.push(n, ts)
				pushed += uint64(n)
				runs = append(runs, run{pushed, ts})
			} else {
				acked += uint64(rng.IntN(int(pushed-acked) + 1))
				q.ack(acked)
			}
			want := clock.Idle
			for _, r := range runs {
				if r.end > acked {
					want = min(want, r.minTs)
				}
			}
			if got := q.min(); got != want {
				t.Fatalf("seed %d step %d: min %d, want %d (pushed %d, acknowledged %d)", seed, step, got, want, pushed, acked)
			}
		}
	}
}
