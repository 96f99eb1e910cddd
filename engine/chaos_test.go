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

// ampleRestarts is a restart policy that chaos with these crash and kill
// periods cannot exhaust, however long a slow machine makes the run: each
// fault comes half its period at least after the one before, so a minute,
// the policy's window, holds 2 min/period of each at most (and a fault
// makes one failure at most). It allows 1000 a minute at least.
func ampleRestarts(periods ...time.Duration) engine.RestartPolicy {
	n := 1
	for _, p := range periods {
		if p > 0 {
			n += int(2 * time.Minute / p)
		}
	}
	return engine.RestartPolicy{MaxRestarts: max(n, 1000), Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
}

// maxFaults is how many faults of each kind chaos injects at most. Most
// runs see 5-20, the longest up to about 60 on a machine under three
// CPU-bound processes; a slower machine, whose recoveries take longer,
// sees ever more faults in a run that each makes longer (under the race
// detector on a third of one core, a kill every second or so left
// TestEachKillIsOneFailureAndOneRecovery unfinished after 3 minutes and
// 140 recoveries). The cap keeps a run's length in proportion to the
// machine's speed.
const maxFaults = 50

// faults are the crash and kill periods a test asks of its chaos driver;
// zero: never.
type faults struct {
	crash, kill time.Duration
	seed        uint64
	// eager lets a fault strike before the job has got past the last one
	// (see pace), for a test that means to exhaust the restart policy.
	eager bool
}

// chaos is the tests' chaos driver: from goroutines of its own, once the
// first checkpoint has completed and then at random instants (each wait
// drawn from [p/2, 3p/2) of its period p, counted from the end of the
// previous fault, or retry after one that could not be injected), it
// crashes a random task and kills a random node of c, whatever the
// coordinator is doing, maxFaults times of each at most; unless f.eager,
// each fault also waits for the job to get past the last one (pace). stop
// ends it; calls after the first do nothing.
func chaos(c *engine.Coordinator, f faults) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var p pace
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
			for n := 0; n < maxFaults; {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
				wait = period/2 + time.Duration(rng.Int64N(int64(period)))
				if !f.eager && !p.wait(c, done) {
					return
				}
				at := c.Stats().GlobalClock
				if inject(rng) != nil {
					wait = retry // between generations: try again soon
					continue
				}
				n++
				p.struck(at)
			}
		})
	}
	tasks := c.Tasks()
	run(f.crash, 1, func(rng *rand.Rand) error { return c.Crash(tasks[rng.IntN(len(tasks))]) })
	run(f.kill, 2, func(rng *rand.Rand) error { return c.Kill(rng.IntN(c.Nodes())) })
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// pace holds a fault back until the job has got past the point where the
// last one, of either kind, struck: its global clock beyond the clock of
// then, and a checkpoint begun after that committed. Every fault is then
// followed by progress that the next cannot undo, and a job ends however
// slow the machine. Without it, faults at fixed periods undid a busy
// machine's progress as fast as it was made: under two CPU-bound processes
// on two cores, "all faults together" (a crash every 60 ms, a kill every
// 100 ms) made 600-900 checkpoints and 250-380 recoveries and did not
// finish in 20 s (an idle machine took 4-8 s). Paced, it takes 5-9 s there
// and 1-4 s idle, with 14-63 recoveries and every kind of fault.
type pace struct {
	mu    sync.Mutex
	hit   bool  // a fault has struck
	clock int64 // the global clock just before it struck
}

func (p *pace) struck(clock int64) {
	p.mu.Lock()
	p.hit, p.clock = true, clock
	p.mu.Unlock()
}

// wait blocks until the job has got past the last fault, and reports false
// if done closed first.
func (p *pace) wait(c *engine.Coordinator, done <-chan struct{}) bool {
	p.mu.Lock()
	hit, at := p.hit, p.clock
	p.mu.Unlock()
	if !hit {
		return true
	}
	var since int64
	for past := false; ; {
		s := c.Stats()
		if !past && s.GlobalClock > at {
			// A checkpoint in progress now may hold state from before
			// the fault's point; the one after it does not.
			past, since = true, s.Checkpoints
		}
		if past && s.Checkpoints >= since+2 {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(time.Millisecond):
		}
	}
}
