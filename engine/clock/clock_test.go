package clock

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// model is the brute-force reference: a map of clocks and an O(n) scan.
type model struct {
	clocks map[int]int64
	min    int64
}

func (m *model) update() {
	if len(m.clocks) == 0 {
		return
	}
	cur := int64(math.MaxInt64)
	for _, c := range m.clocks {
		cur = min(cur, c)
	}
	m.min = max(m.min, cur)
}

func TestTheGlobalMinimumMatchesABruteForceModelAndNeverDecreases(t *testing.T) {
	seeds := 500
	if testing.Short() {
		seeds = 100
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 42))
		s := New[int]()
		m := &model{clocks: map[int]int64{}, min: Start}
		nTasks := 1 + rng.IntN(40)
		base := int64(0)
		for step := range 400 {
			task := rng.IntN(nTasks)
			clock := base + int64(rng.IntN(50)) - 20 // reports may go down
			if rng.IntN(25) == 0 {
				clock = Idle
			}
			switch op := rng.IntN(10); {
			case op == 0:
				s.Register(task, clock)
				m.clocks[task] = clock
			case op == 1:
				s.Unregister(task)
				delete(m.clocks, task)
			default:
				_, known := m.clocks[task]
				if got := s.Report(task, clock); got != known {
					t.Fatalf("seed %d step %d: Report of task %d returned %v, registered %v", seed, step, task, got, known)
				}
				if known {
					m.clocks[task] = clock
				}
			}
			base += int64(rng.IntN(3))
			prev := m.min
			m.update()
			got := s.Min()
			if got != m.min {
				t.Fatalf("seed %d step %d: Min() = %d, model says %d (clocks %v)", seed, step, got, m.min, m.clocks)
			}
			if got < prev {
				t.Fatalf("seed %d step %d: Min went down from %d to %d", seed, step, prev, got)
			}
			if s.Len() != len(m.clocks) {
				t.Fatalf("seed %d step %d: Len() = %d, want %d", seed, step, s.Len(), len(m.clocks))
			}
		}
		// Every registered task's clock is what it last reported.
		for task, c := range m.clocks {
			if got, ok := s.Clock(task); !ok || got != c {
				t.Fatalf("seed %d: Clock(%d) = %d, %v, want %d", seed, task, got, ok, c)
			}
		}
	}
}

func TestIdleTasksNeverHoldTheClockBack(t *testing.T) {
	s := New[string]()
	s.Register("source", 10)
	s.Register("idle map", Idle)
	s.Register("sink", 12)
	if got := s.Min(); got != 10 {
		t.Fatalf("Min() = %d, want 10 from the source", got)
	}
	s.Report("source", 20)
	if got := s.Min(); got != 12 {
		t.Fatalf("Min() = %d, want 12 from the sink", got)
	}
	s.Report("sink", Idle)
	if got := s.Min(); got != 20 {
		t.Fatalf("Min() = %d, want 20: idle tasks are ignored", got)
	}
	s.Report("source", Idle) // the source finished: the job is drained
	if got := s.Min(); got != Idle {
		t.Fatalf("Min() = %d, want Idle once every task is idle", got)
	}
}

func TestAClockThatGoesDownDoesNotLowerTheGlobalMinimum(t *testing.T) {
	s := New[string]()
	s.Register("a", 100)
	s.Register("b", 200)
	s.Report("a", 50) // a message was lost; its unacked output holds it
	if got := s.Min(); got != 100 {
		t.Fatalf("Min() = %d, want 100", got)
	}
	s.Report("a", 300)
	if got := s.Min(); got != 200 {
		t.Fatalf("Min() = %d, want 200", got)
	}
}

func TestUnregisteringTheSlowestTaskRaisesTheMinimumAndAnEmptyServiceKeepsIt(t *testing.T) {
	s := New[string]()
	if got := s.Min(); got != Start {
		t.Fatalf("Min() of a new service = %d, want Start", got)
	}
	s.Register("slow", 5)
	s.Register("fast", 50)
	s.Unregister("slow")
	if got := s.Min(); got != 50 {
		t.Fatalf("Min() = %d, want 50", got)
	}
	s.Unregister("fast")
	s.Unregister("never registered")
	if got := s.Min(); got != 50 {
		t.Fatalf("Min() with no tasks = %d, want it to stay at 50", got)
	}
	if s.Report("fast", 60) {
		t.Fatal("a report after Unregister was accepted")
	}
	s.Register("late", 10) // below the minimum: does not lower it
	if got := s.Min(); got != 50 {
		t.Fatalf("Min() = %d, want 50", got)
	}
}

func TestAWatcherSeesTheCurrentMinimumThenOnlyIncreases(t *testing.T) {
	s := New[int]()
	s.Register(1, 7)
	ch, cancel := s.Watch()
	if got := <-ch; got != 7 {
		t.Fatalf("first value %d, want the current minimum 7", got)
	}
	s.Report(1, 3) // no increase, nothing sent
	select {
	case v := <-ch:
		t.Fatalf("got %d without an increase", v)
	default:
	}
	s.Report(1, 8)
	s.Report(1, 9) // replaces 8 in the one-slot buffer
	if got := <-ch; got != 9 {
		t.Fatalf("got %d, want the latest 9", got)
	}
	cancel()
	cancel()
	if _, ok := <-ch; ok {
		t.Fatal("channel still open after cancel")
	}
	s.Report(1, 10) // must not send on the closed channel
}

func TestConcurrentReportersAndWatchersSeeAMonotoneMinimum(t *testing.T) {
	s := New[int]()
	const tasks, reports = 8, 2000
	for i := range tasks {
		s.Register(i, 0)
	}
	ch, cancel := s.Watch()
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := int64(math.MinInt64)
		for v := range ch {
			if v <= last {
				t.Errorf("watch went from %d to %d", last, v)
			}
			last = v
		}
	}()
	var wg sync.WaitGroup
	for i := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range int64(reports) {
				s.Report(i, c)
				if m := s.Min(); m > c {
					t.Errorf("Min() = %d above task %d's clock %d", m, i, c)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := s.Min(); got != reports-1 {
		t.Fatalf("Min() = %d, want %d", got, reports-1)
	}
	cancel()
	<-done
}

// BenchmarkReport reports rising clocks for random tasks among 10,000.
func BenchmarkReport(b *testing.B) {
	const tasks = 10_000
	s := New[int]()
	for i := range tasks {
		s.Register(i, int64(i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = rng.IntN(tasks)
	}
	clocks := make([]int64, tasks)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		task := order[i&(len(order)-1)]
		clocks[task] += int64(1 + i&63)
		s.Report(task, clocks[task]+tasks)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
}

// BenchmarkReportLinearScan is the baseline the heap replaces: the same
// reports, with the minimum found by scanning all 10,000 clocks each time.
func BenchmarkReportLinearScan(b *testing.B) {
	const tasks = 10_000
	clocks := make([]int64, tasks)
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = rng.IntN(tasks)
	}
	var globalMin int64 = Start
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		task := order[i&(len(order)-1)]
		clocks[task] += int64(1 + i&63)
		cur := int64(Idle)
		for _, c := range clocks {
			cur = min(cur, c)
		}
		globalMin = max(globalMin, cur)
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
	if globalMin == Start {
		b.Fatal("minimum never moved")
	}
}
