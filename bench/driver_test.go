package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeClock is a Clock whose time moves only when told: SleepUntil jumps to
// the wake-up time, and targets advance it to model how long a send takes.
type fakeClock struct {
	t      int64
	sleeps int
}

func (c *fakeClock) Now() int64 { return c.t }

func (c *fakeClock) SleepUntil(ctx context.Context, t int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sleeps++
	if t > c.t {
		c.t = t
	}
	return nil
}

type sent struct{ i, intended, at int64 }

// recordingTarget remembers every call and makes message i take
// cost(i) nanoseconds of clock time.
func recordingTarget(c *fakeClock, calls *[]sent, cost func(i int64) int64) Target {
	return func(ctx context.Context, i, intended int64) error {
		*calls = append(*calls, sent{i, intended, c.t})
		c.t += cost(i)
		return nil
	}
}

func TestFixedRateSchedulesMessageIAtStartPlusIOverRate(t *testing.T) {
	c := &fakeClock{t: 5_000}
	var calls []sent
	rec := NewRecorder()
	res, err := FixedRate{Rate: 1000, Count: 10, Clock: c, Recorder: rec}.Run(context.Background(),
		recordingTarget(c, &calls, func(int64) int64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 10 || len(calls) != 10 {
		t.Fatalf("sent %d (calls %d), want 10", res.Sent, len(calls))
	}
	for k, s := range calls {
		want := 5_000 + int64(k)*1_000_000
		if s.i != int64(k) || s.intended != want || s.at != want {
			t.Errorf("call %d = %+v, want i=%d intended=at=%d", k, s, k, want)
		}
	}
	if res.Bursts != 0 || res.MaxLagNS != 0 {
		t.Errorf("an instant target gave bursts=%d maxlag=%d, want 0, 0", res.Bursts, res.MaxLagNS)
	}
	if got := rec.Snapshot().Max(); got != 0 {
		t.Errorf("an instant target recorded max latency %d ns, want 0", got)
	}
}

func TestFixedRateHandlesFractionalPeriodsWithoutDrift(t *testing.T) {
	c := &fakeClock{}
	var calls []sent
	_, err := FixedRate{Rate: 3, Count: 301, Clock: c}.Run(context.Background(),
		recordingTarget(c, &calls, func(int64) int64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	// 300 messages at 3/s span exactly 100 s: rounding must not accumulate.
	if got := calls[300].intended; got != 100_000_000_000 {
		t.Errorf("message 300 at 3 msgs/s intended at %d ns, want 100 s", got)
	}
}

func TestFixedRateWithASlowTargetChargesTheStallToEveryDelayedMessage(t *testing.T) {
	// Rate 1000/s (1 ms apart) but each send takes 10 ms: message i finishes
	// at (i+1)*10 ms while it was due at i ms, so its latency is 10+9i ms.
	// A closed-loop measurement would report 10 ms for every message.
	c := &fakeClock{}
	var calls []sent
	rec := NewRecorder()
	const n = 100
	res, err := FixedRate{Rate: 1000, Count: n, Clock: c, Recorder: rec}.Run(context.Background(),
		recordingTarget(c, &calls, func(int64) int64 { return 10_000_000 }))
	if err != nil {
		t.Fatal(err)
	}
	for k, s := range calls {
		if s.i != int64(k) || s.intended != int64(k)*1_000_000 {
			t.Fatalf("call %d = %+v: a slow target must not make the driver skip or reschedule", k, s)
		}
	}
	h := rec.Snapshot()
	if h.TotalCount() != n {
		t.Fatalf("recorded %d latencies, want %d", h.TotalCount(), n)
	}
	wantMax := int64(10+9*(n-1)) * 1_000_000
	if !h.ValuesAreEquivalent(h.Max(), wantMax) {
		t.Errorf("max latency %d ns, want about %d ns (measured from intended time)", h.Max(), wantMax)
	}
	if p50 := h.ValueAtQuantile(50); p50 < 400_000_000 {
		t.Errorf("median latency %d ns; a 10x overloaded target must show hundreds of ms", p50)
	}
	if res.MaxLagNS != wantMax-10_000_000 {
		t.Errorf("max lag %d ns, want %d", res.MaxLagNS, wantMax-10_000_000)
	}
	if res.Bursts == 0 {
		t.Error("an overloaded driver reported no bursts")
	}
}

func TestFixedRateSendsEveryOverdueMessageInOneBurstAfterAStall(t *testing.T) {
	// Message 5 stalls for 3.5 ms: messages 6, 7 and 8 (due at 6, 7, 8 ms)
	// are overdue when it returns at 8.5 ms and go out back to back.
	c := &fakeClock{}
	var calls []sent
	_, err := FixedRate{Rate: 1000, Count: 12, Clock: c}.Run(context.Background(),
		recordingTarget(c, &calls, func(i int64) int64 {
			if i == 5 {
				return 3_500_000
			}
			return 0
		}))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{6, 7, 8} {
		if calls[k].at != 8_500_000 || calls[k].intended != int64(k)*1_000_000 {
			t.Errorf("call %d = %+v, want sent at 8.5 ms with its own intended time", k, calls[k])
		}
	}
	if calls[9].at != 9_000_000 {
		t.Errorf("message 9 sent at %d, want back on schedule at 9 ms", calls[9].at)
	}
}

func TestFixedRateWithADurationSendsEveryMessageDueWithinIt(t *testing.T) {
	c := &fakeClock{}
	var calls []sent
	res, err := FixedRate{Rate: 1000, Duration: 10 * time.Millisecond, Clock: c}.Run(context.Background(),
		recordingTarget(c, &calls, func(int64) int64 { return 0 }))
	if err != nil || res.Sent != 10 {
		t.Fatalf("sent %d, %v; want 10 messages in 10 ms at 1000/s", res.Sent, err)
	}
}

func TestDriversRejectBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		run  func() error
		want error
	}{
		{"a zero rate", func() error { _, err := FixedRate{Count: 1}.Run(context.Background(), nil); return err }, ErrBadRate},
		{"a negative rate", func() error { _, err := FixedRate{Rate: -1, Count: 1}.Run(context.Background(), nil); return err }, ErrBadRate},
		{"a fixed rate without count or duration", func() error { _, err := FixedRate{Rate: 1}.Run(context.Background(), nil); return err }, ErrNoBound},
		{"a max rate without count or duration", func() error { _, err := MaxRate{}.Run(context.Background(), nil); return err }, ErrNoBound},
	}
	for _, tt := range tests {
		t.Run(tt.name+" is rejected", func(t *testing.T) {
			if err := tt.run(); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDriversStopAtTheFirstFailedSend(t *testing.T) {
	boom := errors.New("boom")
	target := func(ctx context.Context, i, intended int64) error {
		if i == 3 {
			return boom
		}
		return nil
	}
	for name, run := range map[string]func() (Result, error){
		"fixed rate": func() (Result, error) {
			return FixedRate{Rate: 1e6, Count: 10, Clock: &fakeClock{}}.Run(context.Background(), target)
		},
		"max rate": func() (Result, error) {
			return MaxRate{Count: 10, Clock: &fakeClock{}}.Run(context.Background(), target)
		},
	} {
		res, err := run()
		var se *SendError
		if !errors.As(err, &se) || se.I != 3 || !errors.Is(err, boom) || res.Sent != 3 {
			t.Errorf("%s: got %+v, %v; want a SendError for message 3 after 3 sent", name, res, err)
		}
	}
}

func TestFixedRateStopsWhenTheContextIsCancelled(t *testing.T) {
	c := &fakeClock{}
	ctx, cancel := context.WithCancel(context.Background())
	res, err := FixedRate{Rate: 1000, Count: 100, Clock: c}.Run(ctx, func(ctx context.Context, i, intended int64) error {
		if i == 4 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || res.Sent != 5 {
		t.Errorf("got %+v, %v; want 5 sent and context.Canceled", res, err)
	}
}

func TestMaxRateUsesTheClockReadingAsIntendedTime(t *testing.T) {
	c := &fakeClock{t: 100}
	var calls []sent
	rec := NewRecorder()
	res, err := MaxRate{Duration: 10 * time.Millisecond, Clock: c, Recorder: rec}.Run(context.Background(),
		recordingTarget(c, &calls, func(int64) int64 { return 1_000_000 }))
	if err != nil || res.Sent != 10 {
		t.Fatalf("sent %d, %v; want 10 one-millisecond sends in 10 ms", res.Sent, err)
	}
	for k, s := range calls {
		if s.intended != s.at || s.i != int64(k) {
			t.Errorf("call %d = %+v, want intended == send time", k, s)
		}
	}
	if l := rec.Snapshot(); !l.ValuesAreEquivalent(l.Min(), l.Max()) || !l.ValuesAreEquivalent(l.Max(), 1_000_000) {
		t.Errorf("latencies %d..%d ns, want all 1 ms", l.Min(), l.Max())
	}
	if c.sleeps != 0 {
		t.Errorf("max rate slept %d times", c.sleeps)
	}
}

func TestFixedRateOnTheRealClockSendsEveryMessageInOrder(t *testing.T) {
	var last int64 = -1
	var lastIntended int64
	res, err := FixedRate{Rate: 200_000, Count: 2_000}.Run(context.Background(), func(ctx context.Context, i, intended int64) error {
		if i != last+1 || intended < lastIntended {
			t.Fatalf("message %d (intended %d) after %d (intended %d)", i, intended, last, lastIntended)
		}
		last, lastIntended = i, intended
		return nil
	})
	if err != nil || res.Sent != 2_000 || res.End < res.Start {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func BenchmarkFixedRateDriverOverhead(b *testing.B) {
	b.ReportAllocs()
	noop := func(ctx context.Context, i, intended int64) error { return nil }
	for b.Loop() {
		// An unreachable rate keeps the driver permanently behind, so this
		// measures its per-message bookkeeping in burst mode.
		if _, err := (FixedRate{Rate: 1e12, Count: 1000}).Run(context.Background(), noop); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/msg")
}

func TestRealClockSleepsUntilTheTimeAndHonoursCancellation(t *testing.T) {
	for _, c := range []RealClock{
		{},
		{SpinBelow: DefaultSpinBelow},
		{KernelBelow: DefaultKernelBelow},
		{KernelBelow: DefaultKernelBelow, SpinBelow: DefaultSpinBelow},
	} {
		// 3 ms takes the timer and then the finer sleeps; 200 µs the finer
		// sleeps alone.
		for _, d := range []time.Duration{200 * time.Microsecond, 3 * time.Millisecond} {
			target := Now() + int64(d)
			if err := c.SleepUntil(context.Background(), target); err != nil || Now() < target {
				t.Errorf("%+v, %v: woke at %d before %d (%v)", c, d, Now(), target, err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.SleepUntil(ctx, Now()+int64(time.Hour)); !errors.Is(err, context.Canceled) {
			t.Errorf("%+v: got %v, want context.Canceled", c, err)
		}
	}
}

// A duration that is a whole number of periods holds exactly that many
// messages, however the product of duration and rate rounds: at
// 100,000 msgs/s, 1.1 s is 110,000 messages (intended at 0, 10 µs, ...
// 1.09999 s), although 1.1 * 100000 is 110000.00000000001 in floating
// point.
func TestFixedRateWithADurationSendsNoMessageDueAtItsEnd(t *testing.T) {
	for _, c := range []struct {
		rate float64
		d    time.Duration
		want int64
	}{
		{10, 1100 * time.Millisecond, 11},
		{100_000, 1100 * time.Millisecond, 110_000},
		{10, 1150 * time.Millisecond, 12},
		{3, time.Second, 3},
	} {
		clk := &fakeClock{t: 1}
		var calls []sent
		res, err := FixedRate{Rate: c.rate, Duration: c.d, Clock: clk}.Run(context.Background(),
			recordingTarget(clk, &calls, func(int64) int64 { return 0 }))
		if err != nil {
			t.Fatal(err)
		}
		if res.Sent != c.want {
			t.Errorf("at %v msgs/s for %v: sent %d, want %d", c.rate, c.d, res.Sent, c.want)
		}
		for _, s := range calls {
			if s.intended-1 >= int64(c.d) {
				t.Errorf("at %v msgs/s for %v: message %d intended %v after the start, not within the duration",
					c.rate, c.d, s.i, time.Duration(s.intended-1))
				break
			}
		}
	}
}
