package bench

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestProgressPrintsOneLinePerSampleWithRateP99AndDelivered(t *testing.T) {
	var delivered atomic.Int64
	rec := NewRecorder()
	var out bytes.Buffer
	p := NewProgress(&out, &delivered, rec)

	// Second 1: 1,230,000 deliveries, all at 45 µs.
	delivered.Store(1_230_000)
	rec.RecordN(45_000, 1000)
	p.sample(1 * time.Second)
	// Second 2: a kill, then 500,000 more at 2 ms; the 45 µs of second 1
	// must not dilute this second's p99.
	p.markLocked(1500*time.Millisecond, "kill", "task 1.0")
	delivered.Add(500_000)
	rec.RecordN(2_000_000, 1000)
	p.sample(2 * time.Second)
	// Second 3: nothing recorded.
	p.sample(3 * time.Second)

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		"t=1s  rate 1.23 M msgs/s  p99 45.0 µs  delivered 1,230,000",
		"t=2s  rate 500 k msgs/s  p99 2.00 ms  delivered 1,730,000",
		"t=3s  rate 0 msgs/s  p99 0 µs  delivered 1,730,000",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("printed\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	s := p.Samples()
	if len(s) != 3 || s[1].T != 2 || s[1].Delivered != 1_730_000 || s[1].MsgsPerS != 500_000 ||
		!slices.Equal(s[1].Faults, []string{"kill"}) || s[0].Faults != nil || s[2].Faults != nil {
		t.Errorf("samples %+v", s)
	}
	if s[1].P99US < 2000 || s[1].P99US > 2002 {
		t.Errorf("second 2 p99 %v µs, want 2000", s[1].P99US)
	}
	if ev := p.Events(); len(ev) != 1 || ev[0] != (Event{T: 1.5, Kind: "kill", Detail: "task 1.0"}) {
		t.Errorf("events %+v", ev)
	}
}

// Without a recorder (a sender that measures no latency itself) the lines
// say nothing of a p99 rather than a p99 of 0.
func TestProgressWithoutARecorderPrintsNoP99(t *testing.T) {
	var delivered atomic.Int64
	var out bytes.Buffer
	p := NewProgress(&out, &delivered, nil)
	delivered.Store(2_000_000)
	p.sample(1 * time.Second)
	if got, want := out.String(), "t=1s  rate 2.00 M msgs/s  delivered 2,000,000\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}

func TestProgressRunsOnItsOwnGoroutineUntilStopped(t *testing.T) {
	var delivered atomic.Int64
	p := NewProgress(nil, &delivered, nil)
	p.interval = time.Millisecond
	p.Start()
	for len(p.Samples()) < 3 {
		delivered.Add(10)
		p.Mark("drop", "")
		time.Sleep(time.Millisecond)
	}
	p.Stop()
	p.Stop() // idempotent
	n := len(p.Samples())
	time.Sleep(5 * time.Millisecond)
	if len(p.Samples()) != n {
		t.Error("samples still taken after Stop")
	}
	if len(p.Events()) == 0 {
		t.Error("no events kept")
	}
}

func TestStopBeforeStartDoesNotBlock(t *testing.T) {
	var delivered atomic.Int64
	NewProgress(nil, &delivered, nil).Stop()
}

// gatedWriter holds its first Write until release is closed, as a
// terminal whose output is paused, or a pipe nobody reads, holds a line.
type gatedWriter struct {
	once             sync.Once
	entered, release chan struct{}
}

func (g *gatedWriter) Write(b []byte) (int, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.release
	}
	return len(b), nil
}

// A sample is timed when its count is read, not when its tick fell due:
// when the sampling goroutine comes late to a tick (its previous line held
// up, or no CPU free), the count it reads is that of the later time, and a
// rate over the tick's time would take the later count as delivered in
// less time.
func TestProgressTimesASampleWhenItReadsTheCount(t *testing.T) {
	var delivered atomic.Int64
	out := &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	p := NewProgress(out, &delivered, nil)
	p.interval = 50 * time.Millisecond
	p.Start()
	defer p.Stop()
	<-out.entered                         // the first sample is taken and its line held
	time.Sleep(p.interval + p.interval/2) // the second tick falls due meanwhile
	delivered.Add(1000)
	p.mu.Lock()
	late := time.Since(p.mu.start)
	p.mu.Unlock()
	close(out.release)
	for len(p.Samples()) < 2 {
		time.Sleep(time.Millisecond)
	}
	if s := p.Samples()[1]; s.Delivered != 1000 || s.T < late.Seconds() {
		t.Errorf("the second sample read %d delivered after %v, and says t=%v s", s.Delivered, late, s.T)
	}
}
