//go:build ignore

// How long this machine's vCPUs stop without the guest knowing: one thread
// pinned to each vCPU reads the clock in a loop and records every gap longer
// than 50 µs, and the kernel's count of that thread's context switches says
// whether the guest took the vCPU away (a switch) or the host did (no
// switch: the vCPU itself was not running). A fixed-rate latency's p99.9 on
// a VM cannot be lower than what the host takes this way. Run from the
// repository root on an otherwise idle machine:
//
//	go run results/cpu-budget/raw/vcpustall.go [seconds]
//
// It prints each vCPU's largest gaps, which raw/vcpu-stalls.txt quotes;
// bench.MeasureStalls is the same probe as loadgen bench runs it, with the
// totals only. See results/cpu-budget/README.md, "What the VM takes".
package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const minGap = 50 * time.Microsecond

type probe struct {
	cpu      int
	host     []time.Duration // gaps without a context switch of the thread: the host's
	guest    []time.Duration // gaps with one: the guest ran something else
	switches int64           // the thread's voluntary and involuntary context switches while it ran
	err      error
}

// switches reads the calling thread's context switches from /proc.
func switches() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid()))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, err
			}
			n += x
		}
	}
	return n, nil
}

func (p *probe) run(d time.Duration) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(p.cpu)
	if p.err = unix.SchedSetaffinity(0, &set); p.err != nil {
		return
	}
	s0, err := switches()
	if err != nil {
		p.err = err
		return
	}
	start := time.Now()
	last, seen := start, s0
	for {
		now := time.Now()
		if g := now.Sub(last); g > minGap {
			// The switch count is read only after a gap (a system call of
			// a few microseconds, not counted: the clock is read again).
			n, err := switches()
			if err != nil {
				p.err = err
				return
			}
			if n == seen {
				p.host = append(p.host, g)
			} else {
				p.guest = append(p.guest, g)
			}
			seen = n
			now = time.Now()
		}
		last = now
		if now.Sub(start) >= d {
			break
		}
	}
	s1, err := switches()
	p.switches, p.err = s1-s0, err
}

// summary describes gaps: how many, how many over 1 ms, their sum, the
// largest.
func summary(gaps []time.Duration) string {
	slices.Sort(gaps)
	slices.Reverse(gaps)
	var total time.Duration
	over1ms := 0
	for _, g := range gaps {
		total += g
		if g > time.Millisecond {
			over1ms++
		}
	}
	top := gaps[:min(len(gaps), 6)]
	for i := range top {
		top[i] = top[i].Round(time.Microsecond)
	}
	return fmt.Sprintf("%d (%d > 1 ms), %v in all, largest %v", len(gaps), over1ms, total.Round(time.Microsecond), top)
}

func main() {
	d := 10 * time.Second
	if len(os.Args) > 1 {
		s, err := strconv.Atoi(os.Args[1])
		if err != nil || s <= 0 {
			fmt.Fprintln(os.Stderr, "usage: vcpustall [seconds]")
			os.Exit(2)
		}
		d = time.Duration(s) * time.Second
	}
	probes := make([]*probe, runtime.NumCPU())
	var wg sync.WaitGroup
	for i := range probes {
		probes[i] = &probe{cpu: i}
		wg.Add(1)
		go func() { defer wg.Done(); probes[i].run(d) }()
	}
	wg.Wait()
	for _, p := range probes {
		if p.err != nil {
			fmt.Fprintf(os.Stderr, "vCPU %d: %v\n", p.cpu, p.err)
			os.Exit(1)
		}
		fmt.Printf("vCPU %d, %v, gaps > %v: the host's %s; the guest's (%d context switches) %s\n",
			p.cpu, d, minGap, summary(p.host), p.switches, summary(p.guest))
	}
}
