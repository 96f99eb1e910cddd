package lossdetect

import (
	"math/rand/v2"
	"testing"
)

// TestAnswersNeverCoverAMessageTheTaskHasNot drives a Receiver with random
// OPENs of one epoch (some skipping ahead, as a source that closed without
// waiting and opened again does), data in order, consumption by a slow task
// and ACKREQUESTs, and checks each answer against a model kept here: the
// messages accepted and the task's queue of those not yet consumed. No
// answer's Next may pass a message still in that queue, and once the queue
// is empty an OPEN is answered with Next at the end of everything accepted
// or skipped, so the source resumes where it left off.
func TestAnswersNeverCoverAMessageTheTaskHasNot(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := NewReceiver()
		r.OnOpen(1, 0)
		var (
			next    uint64   // the next seq the source sends
			waiting []uint64 // accepted, not yet consumed, in order
			skipped uint64
		)
		for step := 0; step < 400; step++ {
			switch op := rng.IntN(10); {
			case op < 5: // a message
				if v := r.OnData(1, next); v != Accept {
					t.Fatalf("seed %d step %d: data %d: verdict %v, want Accept", seed, step, next, v)
				}
				waiting = append(waiting, next)
				next++
			case op < 7: // the task consumes its oldest message
				if len(waiting) > 0 {
					r.Consumed(waiting[0] + 1)
					waiting = waiting[1:]
				}
			case op < 8: // the source closed and opens again, perhaps further on
				skip := uint64(rng.IntN(4))
				next += skip
				skipped += skip
				if v := r.OnOpen(1, next); v != Accept {
					t.Fatalf("seed %d step %d: open %d: verdict %v, want Accept", seed, step, next, v)
				}
			default:
				r.OnAckRequest(1, next)
			}
			for {
				a, ok := r.Answer()
				if !ok {
					break
				}
				if len(waiting) > 0 && a.Next > waiting[0] {
					t.Fatalf("seed %d step %d: answer %+v covers message %d, which the task has not consumed", seed, step, a, waiting[0])
				}
				if a.Open && (len(waiting) > 0 || a.Next != next) {
					t.Fatalf("seed %d step %d: OPEN answered with next %d while %d messages wait, the source at %d", seed, step, a.Next, len(waiting), next)
				}
			}
		}
		if got := r.Stats().Skipped; got != skipped {
			t.Fatalf("seed %d: %d seqs counted skipped, %d were", seed, got, skipped)
		}
	}
}
