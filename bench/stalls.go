package bench

import (
	"context"
	"errors"
	"time"
)

// MinStall is the shortest gap a stall probe counts: shorter ones are a
// clock read's or an interrupt's, not a CPU taken away.
const MinStall = 50 * time.Microsecond

// ErrNoStallProbe is returned by MeasureStalls where threads cannot be
// pinned to a CPU or their context switches counted (not Linux).
var ErrNoStallProbe = errors.New("bench: the stall probe pins threads and reads their context switches from /proc, which this system lacks")

// Stalls is what a machine took from its CPUs while a probe spun on each
// (MeasureStalls): every gap of at least MinStall between two clock reads
// of a thread pinned to that CPU. A gap after which the thread's context
// switches have moved (since the previous gap) is the guest's: its kernel
// ran something else there. One without a switch is the host's: on a
// virtual machine, the vCPU itself did not run. No latency measured on the
// machine can have a tail below what it takes this way: at 100,000 msgs/s
// a 4 ms stall delays 400 messages.
type Stalls struct {
	CPUs     int           // CPUs probed, one thread each
	Duration time.Duration // how long each probe spun
	// Longest is the longest gap of any CPU; HostLongest the longest
	// without a context switch of its thread.
	Longest, HostLongest time.Duration
	// Over1ms counts the gaps longer than a millisecond, all CPUs
	// together; HostOver1ms those without a context switch.
	Over1ms, HostOver1ms int
	// Lost is the sum of all gaps, all CPUs together.
	Lost time.Duration
}

// Figures returns s as a scorecard run's figures, in microseconds and
// counts.
func (s Stalls) Figures() map[string]float64 {
	return map[string]float64{
		"longest_us":          float64(s.Longest) / 1e3,
		"host_longest_us":     float64(s.HostLongest) / 1e3,
		"over_1ms_count":      float64(s.Over1ms),
		"host_over_1ms_count": float64(s.HostOver1ms),
		"lost_share":          float64(s.Lost) / float64(max(s.Duration*time.Duration(max(s.CPUs, 1)), 1)),
	}
}

// add counts one gap g; host says whether it came without a context
// switch.
func (s *Stalls) add(g time.Duration, host bool) {
	s.Lost += g
	s.Longest = max(s.Longest, g)
	if g > time.Millisecond {
		s.Over1ms++
	}
	if host {
		s.HostLongest = max(s.HostLongest, g)
		if g > time.Millisecond {
			s.HostOver1ms++
		}
	}
}

// merge adds the gaps of another CPU's probe to s.
func (s *Stalls) merge(o Stalls) {
	s.Lost += o.Lost
	s.Longest = max(s.Longest, o.Longest)
	s.HostLongest = max(s.HostLongest, o.HostLongest)
	s.Over1ms += o.Over1ms
	s.HostOver1ms += o.HostOver1ms
}

// spin reads now in a loop until d has passed or ctx ends and counts every
// gap of at least MinStall between two reads, asking switches (the
// thread's context switches so far) after each gap whether the thread was
// switched out in it. The time switches takes is not counted: the clock
// is read again after it.
func spin(ctx context.Context, d time.Duration, now func() time.Time, switches func() (int64, error)) (Stalls, error) {
	s := Stalls{CPUs: 1}
	seen, err := switches()
	if err != nil {
		return s, err
	}
	start := now()
	last := start
	for i := 0; ; i++ {
		t := now()
		if g := t.Sub(last); g >= MinStall {
			n, err := switches()
			if err != nil {
				return s, err
			}
			s.add(g, n == seen)
			seen = n
			t = now()
		}
		last = t
		if t.Sub(start) >= d || (i&1023 == 0 && ctx.Err() != nil) {
			s.Duration = t.Sub(start)
			return s, nil
		}
	}
}
