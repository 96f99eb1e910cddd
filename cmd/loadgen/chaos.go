package main

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// chaos is loadgen's fault driver for the engine scenarios' crash= and
// kill= faults: from goroutines of its own, at random instants, it makes a
// random task crash and kills a random node (SIGKILL for worker
// processes), whatever the coordinator is doing at that moment, inside a
// checkpoint too. Each wait is drawn from [p/2, 3p/2) of its period p and
// counted from the start of the first generation after the one the
// previous fault hit (or was refused in: between generations, or at the
// end of input), so every generation runs at least p/2 before that fault
// hits it however long recovery takes. Counted from the fault itself, a
// recovery longer than 3p/2 (restarting worker processes on a busy machine)
// had the next fault land as soon as the new generation began, before it
// could checkpoint, and the job made no progress at all. stop ends it.
func chaos(c *engine.Coordinator, crash, kill time.Duration, seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	sleep := func(d time.Duration) bool {
		select {
		case <-done:
			return false
		case <-time.After(d):
			return true
		}
	}
	run := func(period time.Duration, stream uint64, inject func(*rand.Rand) error) {
		if period <= 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, stream))
		wg.Go(func() {
			var hit uint64 // the generation the last fault hit or was refused in
			for {
				for c.Stats().Generation <= hit {
					if !sleep(chaosPoll) {
						return
					}
				}
				if !sleep(period/2 + time.Duration(rng.Int64N(int64(period)))) {
					return
				}
				hit = c.Stats().Generation
				_ = inject(rng) // refused: the next waits for the next generation too
			}
		})
	}
	tasks := c.Tasks()
	run(crash, 1, func(rng *rand.Rand) error { return c.Crash(tasks[rng.IntN(len(tasks))]) })
	run(kill, 2, func(rng *rand.Rand) error { return c.Kill(rng.IntN(c.Nodes())) })
	return func() { close(done); wg.Wait() }
}

// chaosPoll is how often chaos looks for the next generation.
const chaosPoll = 10 * time.Millisecond
