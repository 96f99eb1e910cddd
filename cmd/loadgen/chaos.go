package main

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// chaos is loadgen's fault driver for the engine scenarios' crash= and
// kill= faults: from goroutines of its own, at random instants (each wait
// drawn from [p/2, 3p/2) of its period p, counted from the end of the
// previous fault, or 10 ms after one the engine refused between
// generations), it makes a random task crash and kills a random node
// (SIGKILL for worker processes), whatever the coordinator is doing at
// that moment, inside a checkpoint too. stop ends it.
func chaos(c *engine.Coordinator, crash, kill time.Duration, seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	run := func(period time.Duration, stream uint64, inject func(*rand.Rand) error) {
		if period <= 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, stream))
		wg.Go(func() {
			wait := period/2 + time.Duration(rng.Int64N(int64(period)))
			for {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
				wait = period/2 + time.Duration(rng.Int64N(int64(period)))
				if inject(rng) != nil {
					wait = 10 * time.Millisecond // between generations: try again soon
				}
			}
		})
	}
	tasks := c.Tasks()
	run(crash, 1, func(rng *rand.Rand) error { return c.Crash(tasks[rng.IntN(len(tasks))]) })
	run(kill, 2, func(rng *rand.Rand) error { return c.Kill(rng.IntN(c.Nodes())) })
	return func() { close(done); wg.Wait() }
}
