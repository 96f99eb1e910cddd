package batch

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const us = int64(time.Microsecond)

// fixedConfig is the default config with adaptation switched off, so that the
// decision tests see a linger of exactly 50 µs.
func fixedConfig() Config {
	c := DefaultConfig()
	c.MinLinger, c.MaxLinger = c.Linger, c.Linger
	return c
}

// flushN reports n batches of 100 bytes flushed at time at.
func flushN(p *Policy, at int64, n int) {
	for range n {
		p.Flushed(at, 100, CauseIdle)
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name  string
		prep  func(p *Policy) // events before the decision
		now   int64
		ready int
		want  Decision
	}{
		{
			name:  "an idle connection flushes at once",
			now:   0,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseIdle},
		},
		{
			name:  "nothing waiting needs neither a flush nor a timer",
			prep:  func(p *Policy) { flushN(p, 0, 1) },
			now:   10 * us,
			ready: 0,
			want:  Decision{},
		},
		{
			name:  "a full batch flushes while writes are in flight",
			prep:  func(p *Policy) { flushN(p, 0, 1) },
			now:   1 * us,
			ready: 64 << 10,
			want:  Decision{Flush: true, Cause: CauseFull},
		},
		{
			name:  "a full batch on an idle connection counts as full",
			now:   0,
			ready: 100 << 10,
			want:  Decision{Flush: true, Cause: CauseFull},
		},
		{
			name:  "data waiting behind a write lingers, and WakeAt is the linger deadline",
			prep:  func(p *Policy) { flushN(p, 0, 1) },
			now:   10 * us,
			ready: 100,
			want:  Decision{WakeAt: 60 * us},
		},
		{
			name: "the linger counts from the first Decide that saw the data, not the latest",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.Decide(10*us, 100)
			},
			now:   30 * us,
			ready: 5000,
			want:  Decision{WakeAt: 60 * us},
		},
		{
			name: "linger expiry flushes",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.Decide(10*us, 100)
			},
			now:   60 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseLinger},
		},
		{
			name: "one nanosecond before the deadline still lingers",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.Decide(10*us, 100)
			},
			now:   60*us - 1,
			ready: 100,
			want:  Decision{WakeAt: 60 * us},
		},
		{
			name:  "never more than MaxInflight: a full batch waits for a write to complete, without a timer",
			prep:  func(p *Policy) { flushN(p, 0, 4) },
			now:   1 * us,
			ready: 1 << 20,
			want:  Decision{},
		},
		{
			name: "never more than MaxInflight: an expired linger waits for a write to complete",
			prep: func(p *Policy) {
				flushN(p, 0, 4)
				p.Decide(1*us, 100)
			},
			now:   time.Second.Nanoseconds(),
			ready: 100,
			want:  Decision{},
		},
		{
			name: "never more than MaxInflight: an explicit request waits for a write to complete",
			prep: func(p *Policy) {
				flushN(p, 0, 4)
				p.RequestFlush()
			},
			now:   1 * us,
			ready: 100,
			want:  Decision{},
		},
		{
			name: "a completed write flushes waiting data before the linger ends",
			prep: func(p *Policy) {
				flushN(p, 0, 2)
				p.Decide(2*us, 100)
				p.WriteDone(5 * us)
			},
			now:   5 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseWriteDone},
		},
		{
			name: "a completed write that frees a slot at MaxInflight flushes",
			prep: func(p *Policy) {
				flushN(p, 0, 4)
				p.Decide(1*us, 100)
				p.WriteDone(20 * us)
			},
			now:   20 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseWriteDone},
		},
		{
			name: "the last write completing counts as write-done, not idle",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.Decide(1*us, 100)
				p.WriteDone(3 * us)
			},
			now:   3 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseWriteDone},
		},
		{
			name: "a write that completes with nothing waiting does not flush later data: it lingers",
			prep: func(p *Policy) {
				flushN(p, 0, 2)
				p.Decide(1*us, 0)
				p.WriteDone(5 * us)
			},
			now:   6 * us,
			ready: 100,
			want:  Decision{WakeAt: 56 * us},
		},
		{
			name: "data first seen after the last write completed goes out as idle, not write-done",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.WriteDone(5 * us)
			},
			now:   1000 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseIdle},
		},
		{
			name: "a completed write triggers one flush; what is left lingers again",
			prep: func(p *Policy) {
				flushN(p, 0, 2)
				p.Decide(1*us, 100)
				p.WriteDone(5 * us)
				p.Flushed(5*us, 100, CauseWriteDone)
			},
			now:   6 * us,
			ready: 100,
			want:  Decision{WakeAt: 56 * us},
		},
		{
			name: "an explicit request flushes without lingering",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.RequestFlush()
			},
			now:   1 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseExplicit},
		},
		{
			name: "an explicit request lasts across flushes while data keeps waiting",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.RequestFlush()
				p.Decide(1*us, 100<<10)
				p.Flushed(1*us, 64<<10, CauseFull)
			},
			now:   1 * us,
			ready: 36 << 10,
			want:  Decision{Flush: true, Cause: CauseExplicit},
		},
		{
			name: "an explicit request ends when nothing is waiting",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.RequestFlush()
				p.Decide(1*us, 0)
			},
			now:   2 * us,
			ready: 100,
			want:  Decision{WakeAt: 52 * us},
		},
		{
			name: "a full batch is reported as full even when explicitly requested",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.RequestFlush()
			},
			now:   1 * us,
			ready: 64 << 10,
			want:  Decision{Flush: true, Cause: CauseFull},
		},
		{
			name: "a flush restarts the linger for the bytes left behind",
			prep: func(p *Policy) {
				flushN(p, 0, 1)
				p.Decide(10*us, 100)
				p.Flushed(60*us, 100, CauseLinger)
			},
			now:   61 * us,
			ready: 50,
			want:  Decision{WakeAt: 111 * us},
		},
		{
			name: "WriteDone with nothing in flight is ignored",
			prep: func(p *Policy) {
				p.WriteDone(1 * us)
				p.Decide(1*us, 0)
				flushN(p, 2*us, 1)
			},
			now:   3 * us,
			ready: 100,
			want:  Decision{WakeAt: 53 * us},
		},
		{
			name: "a connection whose writes all completed is idle again",
			prep: func(p *Policy) {
				flushN(p, 0, 3)
				p.WriteDone(10 * us)
				p.WriteDone(11 * us)
				p.WriteDone(12 * us)
				p.Decide(12*us, 0)
			},
			now:   100 * us,
			ready: 100,
			want:  Decision{Flush: true, Cause: CauseIdle},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(fixedConfig())
			if tt.prep != nil {
				tt.prep(p)
			}
			if got := p.Decide(tt.now, tt.ready); got != tt.want {
				t.Errorf("Decide(%d, %d) = %+v, want %+v", tt.now, tt.ready, got, tt.want)
			}
		})
	}
}

func TestInflightCountsFlushesAndCompletions(t *testing.T) {
	p := New(fixedConfig())
	flushN(p, 0, 3)
	if got := p.Inflight(); got != 3 {
		t.Fatalf("after 3 flushes Inflight() = %d, want 3", got)
	}
	p.WriteDone(1 * us)
	if got := p.Inflight(); got != 2 {
		t.Fatalf("after 1 completion Inflight() = %d, want 2", got)
	}
}

func TestMoreThanMaxInflightReportedKeepsWriteTimesInOrder(t *testing.T) {
	// An explicit flush may be reported beyond MaxInflight; the policy must
	// keep counting and pair each completion with its own flush time.
	cfg := DefaultConfig()
	cfg.MaxInflight = 2
	p := New(cfg)
	for i := range 5 {
		p.Flushed(int64(i)*us, 100, CauseExplicit)
	}
	p.WriteDone(3 * us) // flushed at 0: write time 3 µs
	if got := p.Stats().WriteTime; got != 3*time.Microsecond {
		t.Fatalf("first write time = %v, want 3µs", got)
	}
	for range 4 {
		p.WriteDone(10 * us)
	}
	if got := p.Inflight(); got != 0 {
		t.Fatalf("Inflight() = %d after all completed, want 0", got)
	}
	if d := p.Decide(11*us, 100); d != (Decision{Flush: true, Cause: CauseIdle}) {
		t.Fatalf("Decide after all writes completed = %+v, want an idle flush", d)
	}
}

func TestLingerAdaptation(t *testing.T) {
	// Each scenario flushes a batch of `bytes` every `every` and completes it
	// `write` later, 200 times, then checks the adapted linger.
	tests := []struct {
		name   string
		cfg    func(*Config)
		every  time.Duration
		bytes  int
		write  time.Duration
		lo, hi time.Duration // the linger must end within [lo, hi]
	}{
		{
			name:  "the linger follows the smoothed write time",
			every: 100 * time.Microsecond, bytes: 1000, write: 20 * time.Microsecond,
			lo: 19 * time.Microsecond, hi: 21 * time.Microsecond,
		},
		{
			name:  "slow writes raise the linger no higher than MaxLinger",
			every: 10 * time.Millisecond, bytes: 1000, write: 5 * time.Millisecond,
			lo: time.Millisecond, hi: time.Millisecond,
		},
		{
			name:  "fast writes lower the linger no lower than MinLinger",
			every: 100 * time.Microsecond, bytes: 1000, write: 500 * time.Nanosecond,
			lo: 5 * time.Microsecond, hi: 5 * time.Microsecond,
		},
		{
			name:  "at high rates the linger drops to the time a batch takes to fill",
			every: 10 * time.Microsecond, bytes: 32 << 10, write: 200 * time.Microsecond,
			lo: 19 * time.Microsecond, hi: 21 * time.Microsecond,
		},
		{
			name:  "at low rates the fill time does not shorten the linger",
			every: 500 * time.Microsecond, bytes: 100, write: 300 * time.Microsecond,
			lo: 299 * time.Microsecond, hi: 301 * time.Microsecond,
		},
		{
			name:  "MinLinger = MaxLinger = Linger disables adaptation",
			cfg:   func(c *Config) { c.MinLinger, c.MaxLinger = c.Linger, c.Linger },
			every: 10 * time.Microsecond, bytes: 32 << 10, write: 500 * time.Microsecond,
			lo: 50 * time.Microsecond, hi: 50 * time.Microsecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			p := New(cfg)
			// Completions happen in flush order; keep a queue of due times.
			var due []int64
			var now int64
			for range 200 {
				for len(due) > 0 && due[0] <= now {
					p.WriteDone(due[0])
					due = due[1:]
				}
				p.Flushed(now, tt.bytes, CauseIdle)
				due = append(due, now+int64(tt.write))
				now += int64(tt.every)
				if l := p.Linger(); l < cfg.MinLinger || l > cfg.MaxLinger {
					t.Fatalf("linger %v left [%v, %v]", l, cfg.MinLinger, cfg.MaxLinger)
				}
			}
			if got := p.Linger(); got < tt.lo || got > tt.hi {
				t.Errorf("Linger() = %v, want within [%v, %v] (stats %+v)", got, tt.lo, tt.hi, p.Stats())
			}
			if got := p.Stats().Linger; got != p.Linger() {
				t.Errorf("Stats().Linger = %v, Linger() = %v", got, p.Linger())
			}
		})
	}
}

func TestLingerStartsAtConfigLinger(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Linger = 123 * time.Microsecond
	p := New(cfg)
	if got := p.Linger(); got != cfg.Linger {
		t.Fatalf("Linger() before any observation = %v, want %v", got, cfg.Linger)
	}
	p.Flushed(0, 100, CauseIdle)
	if d := p.Decide(1*us, 100); d.WakeAt != 124*us {
		t.Fatalf("WakeAt = %d, want %d (1 µs + the configured linger)", d.WakeAt, 124*us)
	}
}

func TestAdaptedLingerSetsWakeAt(t *testing.T) {
	p := New(DefaultConfig())
	p.Flushed(0, 100, CauseIdle)
	p.WriteDone(20 * us) // write time 20 µs: the linger becomes 20 µs
	p.Flushed(30*us, 100, CauseIdle)
	if got := p.Linger(); got != 20*time.Microsecond {
		t.Fatalf("Linger() = %v, want 20µs", got)
	}
	if d := p.Decide(31*us, 100); d != (Decision{WakeAt: 51 * us}) {
		t.Fatalf("Decide = %+v, want WakeAt 51 µs", d)
	}
}

// A linger too long to add to the clock (the largest Duration, "flush
// only when full or when a write completes") means no linger deadline at
// all; the sum must not wrap around into the past and flush at once.
func TestALingerBeyondTheClockNeverExpires(t *testing.T) {
	cfg := DefaultConfig()
	forever := time.Duration(math.MaxInt64)
	cfg.Linger, cfg.MinLinger, cfg.MaxLinger = forever, forever, forever
	p := New(cfg)
	now := int64(3 * time.Second) // a monotonic clock some time after start
	p.Flushed(now, 100, CauseIdle)
	if d := p.Decide(now+1, 100); d != (Decision{}) {
		t.Fatalf("Decide with one write in flight = %+v, want neither a flush nor a timer", d)
	}
	p.WriteDone(now + 2)
	if d := p.Decide(now+3, 100); d != (Decision{Flush: true, Cause: CauseWriteDone}) {
		t.Fatalf("Decide after the write completed = %+v, want a write-done flush", d)
	}
}

func TestStatsCountFlushesByCause(t *testing.T) {
	p := New(fixedConfig())
	p.Flushed(0, 100, CauseIdle)
	p.Flushed(1, 64<<10, CauseFull)
	p.Flushed(2, 300, CauseLinger)
	p.Flushed(3, 50, CauseLinger)
	p.Flushed(4, 7, Cause(200)) // out of range: counted in Batches only
	p.WriteDone(10)
	s := p.Stats()
	want := [NumCauses]uint64{CauseIdle: 1, CauseFull: 1, CauseLinger: 2}
	if s.Flushes != want {
		t.Errorf("Flushes = %v, want %v", s.Flushes, want)
	}
	if s.Batches != 5 || s.Bytes != 100+64<<10+300+50+7 || s.WriteDones != 1 || s.Inflight != 4 {
		t.Errorf("Stats = %+v, want 5 batches, %d bytes, 1 write done, 4 in flight", s, 100+64<<10+300+50+7)
	}
	if s.WriteTime != 10 {
		t.Errorf("WriteTime = %v, want 10ns", s.WriteTime)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		errHas string // "" means valid
	}{
		{"the default config is valid", func(*Config) {}, ""},
		{"a fixed linger (MinLinger = MaxLinger = Linger) is valid", func(c *Config) { c.MinLinger, c.MaxLinger = c.Linger, c.Linger }, ""},
		{"a zero linger is valid", func(c *Config) { c.Linger, c.MinLinger = 0, 0 }, ""},
		{"a batch limit of zero is rejected", func(c *Config) { c.MaxBatchBytes = 0 }, "MaxBatchBytes is 0"},
		{"a negative batch limit is rejected", func(c *Config) { c.MaxBatchBytes = -1 }, "MaxBatchBytes is -1"},
		{"zero batches in flight is rejected", func(c *Config) { c.MaxInflight = 0 }, "MaxInflight is 0"},
		{"a negative MinLinger is rejected", func(c *Config) { c.MinLinger = -1 }, "MinLinger is -1ns"},
		{"MaxLinger below MinLinger is rejected", func(c *Config) { c.MaxLinger = time.Microsecond }, "MaxLinger 1µs is below MinLinger 5µs"},
		{"a Linger below MinLinger is rejected", func(c *Config) { c.Linger = time.Microsecond }, "Linger 1µs is outside"},
		{"a Linger above MaxLinger is rejected", func(c *Config) { c.Linger = time.Second }, "Linger 1s is outside"},
		{"a negative compression threshold is rejected", func(c *Config) { c.CompressThreshold = -1 }, "CompressThreshold is -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.modify(&c)
			err := c.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error containing %q", tt.errHas)
			}
			if !errors.Is(err, ErrConfig) {
				t.Errorf("Validate() = %v, does not match ErrConfig", err)
			}
			if !strings.HasPrefix(err.Error(), "batch: invalid config: ") || !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("Validate() = %q, want it prefixed and containing %q", err, tt.errHas)
			}
		})
	}
}

func TestNewPanicsOnAnInvalidConfig(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "MaxInflight is 0") {
			t.Fatalf("recover() = %v, want a panic naming MaxInflight", r)
		}
	}()
	c := DefaultConfig()
	c.MaxInflight = 0
	New(c)
}

func TestCauseString(t *testing.T) {
	tests := []struct {
		c    Cause
		want string
	}{
		{CauseIdle, "idle"},
		{CauseFull, "full"},
		{CauseLinger, "linger"},
		{CauseWriteDone, "write-done"},
		{CauseExplicit, "explicit"},
		{Cause(NumCauses), "Cause(5)"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("Cause(%d).String() = %q, want %q", uint8(tt.c), got, tt.want)
		}
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	p := New(DefaultConfig())
	var now int64
	allocs := testing.AllocsPerRun(1000, func() {
		now += us
		if d := p.Decide(now, 100); d.Flush {
			p.Flushed(now, 100, d.Cause)
		}
		if p.Inflight() == 4 {
			p.WriteDone(now)
		}
	})
	if allocs != 0 {
		t.Fatalf("Decide/Flushed/WriteDone allocate %v times per run, want 0", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	b.Run("lingering", func(b *testing.B) {
		// The common case under load: writes in flight, data waiting, no flush.
		p := New(DefaultConfig())
		p.Flushed(0, 100, CauseIdle)
		var now int64
		b.ReportAllocs()
		for b.Loop() {
			now++
			if d := p.Decide(now&1023, 100); d.Flush {
				b.Fatal("unexpected flush")
			}
		}
	})
	b.Run("cycle", func(b *testing.B) {
		// One full batch per iteration: Decide, Flushed and a WriteDone, as a
		// connection under load calls them, including the linger adaptation.
		p := New(DefaultConfig())
		var now int64
		b.ReportAllocs()
		for b.Loop() {
			now += 100
			d := p.Decide(now, 64<<10)
			if !d.Flush {
				b.Fatalf("no flush at %d: %+v", now, d)
			}
			p.Flushed(now, 64<<10, d.Cause)
			if p.Inflight() >= 2 {
				p.WriteDone(now)
			}
		}
	})
}
