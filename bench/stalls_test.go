package bench

import (
	"context"
	"testing"
	"time"
)

// fakeProbe is a clock that advances 1 µs a read and jumps where told,
// and a context-switch count that moves with the jumps marked as the
// guest's.
type fakeProbe struct {
	t        time.Time
	reads    int
	jumps    map[int]fakeJump // by read number
	switches int64
}

type fakeJump struct {
	d     time.Duration
	guest bool
}

func (f *fakeProbe) now() time.Time {
	f.reads++
	f.t = f.t.Add(time.Microsecond)
	if j, ok := f.jumps[f.reads]; ok {
		f.t = f.t.Add(j.d)
		if j.guest {
			f.switches++
		}
	}
	return f.t
}

func (f *fakeProbe) count() (int64, error) { return f.switches, nil }

func TestSpinCountsGapsAndTellsTheHostsFromTheGuests(t *testing.T) {
	f := &fakeProbe{t: time.Unix(0, 0), jumps: map[int]fakeJump{
		100: {2 * time.Millisecond, false},   // the host's, over 1 ms
		200: {3 * time.Millisecond, true},    // the guest's, over 1 ms
		300: {60 * time.Microsecond, false},  // the host's, short
		400: {40 * time.Microsecond, true},   // under MinStall: not a stall
		500: {900 * time.Microsecond, true},  // the guest's, short
		600: {1500 * time.Microsecond, true}, // the guest's, over 1 ms
	}}
	s, err := spin(context.Background(), 10*time.Millisecond, f.now, f.count)
	if err != nil {
		t.Fatal(err)
	}
	// Each gap is its jump plus the read's own microsecond.
	us := time.Microsecond
	want := Stalls{
		CPUs: 1, Longest: 3*time.Millisecond + us, HostLongest: 2*time.Millisecond + us,
		Over1ms: 3, HostOver1ms: 1,
		Lost: 2*time.Millisecond + 3*time.Millisecond + 60*us + 900*us + 1500*us + 5*us,
	}
	want.Duration = s.Duration
	if s != want {
		t.Errorf("spin = %+v\nwant   %+v", s, want)
	}
	if s.Duration < 10*time.Millisecond || s.Duration > 11*time.Millisecond {
		t.Errorf("spun %v, want 10 ms and one read", s.Duration)
	}
}

func TestSpinStopsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakeProbe{t: time.Unix(0, 0)}
	s, err := spin(ctx, time.Hour, f.now, f.count)
	if err != nil {
		t.Fatal(err)
	}
	if s.Duration >= time.Second {
		t.Errorf("spun %v of an hour after the context ended", s.Duration)
	}
}

func TestStallFigures(t *testing.T) {
	s := Stalls{CPUs: 2, Duration: time.Second, Longest: 4 * time.Millisecond, HostLongest: 1500 * time.Microsecond,
		Over1ms: 5, HostOver1ms: 1, Lost: 20 * time.Millisecond}
	got := s.Figures()
	want := map[string]float64{"longest_us": 4000, "host_longest_us": 1500, "over_1ms_count": 5, "host_over_1ms_count": 1, "lost_share": 0.01}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("figures %v, want %d of them", got, len(want))
	}
}
