package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MeasureStalls spins a thread pinned to each CPU this process may run on
// for d (or until ctx ends) and returns what the machine took from them
// (Stalls). It keeps every CPU busy meanwhile: run it alone.
func MeasureStalls(ctx context.Context, d time.Duration) (Stalls, error) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return Stalls{}, fmt.Errorf("bench: stall probe: %w", err)
	}
	var cpus []int
	for cpu := 0; len(cpus) < allowed.Count(); cpu++ {
		if allowed.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	got := make([]Stalls, len(cpus))
	errs := make([]error, len(cpus))
	var wg sync.WaitGroup
	for i, cpu := range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = probeCPU(ctx, cpu, d)
		}()
	}
	wg.Wait()
	total := Stalls{}
	for i := range got {
		if errs[i] != nil {
			return Stalls{}, errs[i]
		}
		total.merge(got[i])
		total.Duration = max(total.Duration, got[i].Duration)
	}
	total.CPUs = len(cpus)
	return total, nil
}

// probeCPU spins on cpu, its thread pinned there. The thread is not
// unlocked: pinned, it is no use to the runtime afterwards, and a locked
// goroutine's thread exits with it.
func probeCPU(ctx context.Context, cpu int, d time.Duration) (Stalls, error) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return Stalls{}, fmt.Errorf("bench: stall probe: pinning a thread to CPU %d: %w", cpu, err)
	}
	path := fmt.Sprintf("/proc/self/task/%d/status", unix.Gettid())
	return spin(ctx, d, time.Now, func() (int64, error) { return threadSwitches(path) })
}

// threadSwitches reads a thread's voluntary and involuntary context
// switches from its /proc status file.
func threadSwitches(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("bench: stall probe: %w", err)
	}
	return parseSwitches(b)
}

// parseSwitches adds the voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches lines of a /proc status file.
func parseSwitches(status []byte) (int64, error) {
	var n int64
	found := 0
	for line := range bytes.Lines(status) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.HasSuffix(k, []byte("ctxt_switches")) {
			continue
		}
		x, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil || x < 0 {
			return 0, fmt.Errorf("bench: stall probe: %s: not a count: %q", k, bytes.TrimSpace(v))
		}
		if n+x < n {
			return 0, fmt.Errorf("bench: stall probe: the context-switch counts overflow 64 bits")
		}
		n += x
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("bench: stall probe: %d context-switch lines in a thread's status, want 2", found)
	}
	return n, nil
}
