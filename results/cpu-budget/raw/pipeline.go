//go:build ignore

// pipeline times a two-stage pipeline of Go goroutines that hand items over through a channel, each stage
// working d per item, against the ideal (both stages busy at once: one item per d): Go's own hand-offs, with no
// system call between the stages. Run: go run pipeline.go (results/cpu-budget/raw/vcpu-packing.txt).
package main

import (
	"fmt"
	"time"
)

func work(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// A two-stage pipeline: each stage works d per item; stage 1 hands items to
// stage 2 through a channel of capacity c. Ideal: one item per d.
func main() {
	for _, d := range []time.Duration{5 * time.Microsecond, 20 * time.Microsecond, 100 * time.Microsecond} {
		for _, c := range []int{1, 16} {
			ch := make(chan int, c)
			done := make(chan bool)
			n := int(time.Second / d)
			go func() {
				for range ch {
					work(d)
				}
				done <- true
			}()
			start := time.Now()
			for i := 0; i < n; i++ {
				work(d)
				ch <- i
			}
			close(ch)
			<-done
			el := time.Since(start)
			fmt.Printf("d=%v cap=%d: %.2f x ideal time (1.0 = both stages in parallel, 2.0 = serial)\n", d, c, float64(el)/float64(time.Duration(n)*d))
		}
	}
}
