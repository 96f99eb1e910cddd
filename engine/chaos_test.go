package engine_test

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// retry is how soon the driver tries again when a fault could not be
// injected (between generations, or a kill in a generation already hit).
const retry = 10 * time.Millisecond

// faults are the crash and kill periods a test asks of its chaos driver;
// zero: never.
type faults struct {
	crash, kill time.Duration
	seed        uint64
}

// chaos is the tests' chaos driver: from goroutines of its own, once the
// first checkpoint has completed and then at random instants (each wait
// drawn from [p/2, 3p/2) of its period p, counted from the end of the
// previous fault, or retry after one that could not be injected), it
// crashes a random task and kills a random node of c, whatever the
// coordinator is doing. stop ends it.
func chaos(c *engine.Coordinator, f faults) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	run := func(period time.Duration, stream uint64, inject func(*rand.Rand) error) {
		if period <= 0 {
			return
		}
		rng := rand.New(rand.NewPCG(f.seed, stream))
		wg.Go(func() {
			// The first fault comes right after the first checkpoint, so
			// that a job that runs for a few periods sees its faults even
			// on a machine fast enough to finish before a random wait ends.
			for c.Stats().Checkpoints == 0 {
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond):
				}
			}
			wait := time.Duration(0)
			for {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
				wait = period/2 + time.Duration(rng.Int64N(int64(period)))
				if inject(rng) != nil {
					wait = retry // between generations: try again soon
				}
			}
		})
	}
	tasks := c.Tasks()
	run(f.crash, 1, func(rng *rand.Rand) error { return c.Crash(tasks[rng.IntN(len(tasks))]) })
	run(f.kill, 2, func(rng *rand.Rand) error { return c.Kill(rng.IntN(c.Nodes())) })
	return func() { close(done); wg.Wait() }
}
