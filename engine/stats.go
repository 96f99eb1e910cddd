package engine

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/engine/clock"
	"github.com/sluicehq/sluice/metrics"
)

// Stats is what a [Coordinator] shows an operator while a job runs.
type Stats struct {
	Generation uint64 // the running generation, from 1; each recovery starts the next
	// GlobalClock is the global minimum clock of the running generation
	// (clock.Start before every node reported, clock.Idle once every task
	// is done), and ClockAdvanced when it
	// last rose (or the generation started).
	GlobalClock   int64
	ClockAdvanced time.Time
	Checkpoints   int64
	// LastCheckpoint is how long the last checkpoint took, from the
	// coordinator asking the workers to persist to their commit; LastCheckpointAt
	// when it completed (zero before the first).
	LastCheckpoint   time.Duration
	LastCheckpointAt time.Time
	Recoveries       int64
	Processed        int64 // messages sink tasks consumed, replays included
}

// stats is the coordinator's Stats under a lock, with the state of the
// clock-stall alert.
type stats struct {
	mu      sync.Mutex
	s       Stats
	stalled bool // the stall alert is raised
}

// Stats returns the coordinator's counters. Safe for concurrent use.
func (c *Coordinator) Stats() Stats {
	c.st.mu.Lock()
	s := c.st.s
	c.st.mu.Unlock()
	s.Processed = c.processed.Load()
	return s
}

func (c *Coordinator) statsGeneration(gen uint64, now time.Time) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	c.st.s.Generation = gen
	c.st.s.GlobalClock = clock.Start
	c.st.s.ClockAdvanced = now
	c.st.stalled = false
}

func (c *Coordinator) statsRecovery() {
	c.st.mu.Lock()
	c.st.s.Recoveries++
	c.st.mu.Unlock()
}

// statsClock records the global clock m after a round, and raises or
// clears the stall alert: a warning in the log once the clock has stood
// still for Config.ClockStallAlert, and a line when it moves again.
func (c *Coordinator) statsClock(m int64, now time.Time) {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	s := &c.st.s
	if m != s.GlobalClock {
		if c.st.stalled {
			c.log.Info("engine: global clock advancing again", "clock", m, "stalled_for", now.Sub(s.ClockAdvanced).Round(time.Millisecond))
			c.st.stalled = false
		}
		s.GlobalClock, s.ClockAdvanced = m, now
		return
	}
	if d := now.Sub(s.ClockAdvanced); c.cfg.ClockStallAlert > 0 && d >= c.cfg.ClockStallAlert && !c.st.stalled {
		c.st.stalled = true
		c.log.Warn("engine: global clock has not advanced", "clock", m, "for", d.Round(time.Millisecond), "generation", s.Generation)
		if c.cfg.OnEvent != nil {
			c.cfg.OnEvent("clock-stall", d.Round(time.Millisecond).String())
		}
	}
}

func (c *Coordinator) statsCheckpoint(took time.Duration, now time.Time) {
	c.st.mu.Lock()
	c.st.s.Checkpoints++
	c.st.s.LastCheckpoint, c.st.s.LastCheckpointAt = took, now
	c.st.mu.Unlock()
}

// Collect adds the coordinator's counters to a metrics set, so that
// metrics.Handler(c, ...) serves them. Safe for concurrent use.
func (c *Coordinator) Collect(set *metrics.Set) {
	s := c.Stats()
	now := time.Now()
	set.Gauge("sluice_engine_generation", "The running generation; each recovery starts the next.", float64(s.Generation))
	set.Gauge("sluice_engine_global_clock", "The global minimum clock, in the sources' timestamp units.", float64(s.GlobalClock))
	if !s.ClockAdvanced.IsZero() {
		set.Gauge("sluice_engine_global_clock_lag_seconds", "Wall time since the global minimum clock last advanced.", now.Sub(s.ClockAdvanced).Seconds())
	}
	set.Counter("sluice_engine_checkpoints_total", "Checkpoints completed.", float64(s.Checkpoints))
	if !s.LastCheckpointAt.IsZero() {
		set.Gauge("sluice_engine_checkpoint_duration_seconds", "How long the last checkpoint took, from persist to commit.", s.LastCheckpoint.Seconds())
		set.Gauge("sluice_engine_checkpoint_age_seconds", "Wall time since the last checkpoint completed.", now.Sub(s.LastCheckpointAt).Seconds())
	}
	set.Counter("sluice_engine_recoveries_total", "Recoveries from a failure (a new generation from the latest checkpoint).", float64(s.Recoveries))
	set.Counter("sluice_engine_processed_messages_total", "Messages sink tasks consumed, replays included.", float64(s.Processed))
}
