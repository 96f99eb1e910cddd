//go:build ignore

// What a hand-off to an idle P costs the goroutine that makes it: a
// goroutine works for a while (the other P idles meanwhile, its thread
// asleep), then readies a goroutine parked on a channel, then yields. Both
// are timed from the caller's side. Run: go run results/cpu-budget/raw/wakecost.go
// (with GOMAXPROCS=1 for the baseline). See results/cpu-budget/README.md,
// "A sender that outruns its connection writes its own batches".
package main

import (
	"fmt"
	"runtime"
	"sort"
	"time"
)

var sink int

func spin(d time.Duration) {
	for t := time.Now(); time.Since(t) < d; {
		sink++
	}
}

func median(d []time.Duration) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2]
}

func main() {
	fmt.Printf("GOMAXPROCS=%d\n", runtime.GOMAXPROCS(0))
	for _, gap := range []time.Duration{0, 20 * time.Microsecond, 100 * time.Microsecond, time.Millisecond} {
		const n = 2000
		ch := make(chan struct{})
		done := make(chan struct{})
		go func() {
			for range ch {
			}
			close(done)
		}()
		ready := make([]time.Duration, n)
		yield := make([]time.Duration, n)
		for i := range n {
			spin(gap)
			s := time.Now()
			ch <- struct{}{} // readies the receiver, parked on ch
			ready[i] = time.Since(s)
			s = time.Now()
			runtime.Gosched()
			yield[i] = time.Since(s)
		}
		close(ch)
		<-done
		fmt.Printf("after %8v of work: readying a parked goroutine %8v, then yielding %8v (medians of %d)\n",
			gap, median(ready), median(yield), n)
	}
}
