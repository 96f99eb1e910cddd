package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine/clock"
	"github.com/sluicehq/sluice/engine/journal"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// RestartPolicy bounds recoveries: at most MaxRestarts within Window, each
// after a backoff that starts at MinBackoff and doubles up to MaxBackoff
// while failures follow each other closely (it starts again at MinBackoff
// once a generation completes a checkpoint).
//
// A field left zero takes its default (see [DefaultRestartPolicy]), on its
// own: RestartPolicy{MaxRestarts: 5} allows 5 restarts a minute, backing
// off from 10 ms to 1 s. A zero backoff defaults within the other one when
// that is set: MinBackoff to at most MaxBackoff, MaxBackoff to at least
// MinBackoff. A negative MaxRestarts allows no restart ([NoRestarts]); a
// negative duration, or a MinBackoff above MaxBackoff, makes no sense, and
// [NewCoordinator] refuses such a policy (see [RestartPolicy.Validate]).
type RestartPolicy struct {
	// MaxRestarts is how many recoveries Window may hold; the failure
	// after them ends the run with ErrRestartsExhausted. Default 10;
	// [NoRestarts] (any negative value) allows none: the first failure
	// ends the run.
	MaxRestarts int
	// Window is how far back failures count. Default 1 minute.
	Window time.Duration
	// MinBackoff is the first wait before a restart, and the wait again
	// after a generation that completed a checkpoint. Default 10 ms.
	MinBackoff time.Duration
	// MaxBackoff bounds the doubled wait. Default 1 s.
	MaxBackoff time.Duration
}

// NoRestarts as RestartPolicy.MaxRestarts allows no recovery: the first
// failure ends the run with ErrRestartsExhausted.
const NoRestarts = -1

// DefaultRestartPolicy allows 10 restarts a minute, backing off from 10 ms
// to 1 s.
func DefaultRestartPolicy() RestartPolicy {
	return RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}
}

// Validate says what is wrong with p: a negative duration, or a MinBackoff
// above MaxBackoff when both are set. Zero fields are valid; they take
// their defaults (see [RestartPolicy]).
func (p RestartPolicy) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRestartPolicy, fmt.Sprintf(format, a...))
	}
	for _, f := range []struct {
		name string
		v, d time.Duration
	}{
		{"Window", p.Window, DefaultRestartPolicy().Window},
		{"MinBackoff", p.MinBackoff, DefaultRestartPolicy().MinBackoff},
		{"MaxBackoff", p.MaxBackoff, DefaultRestartPolicy().MaxBackoff},
	} {
		if f.v < 0 {
			return bad("%s is %v; it must be positive, or 0 for the default (%v)", f.name, f.v, f.d)
		}
	}
	if p.MinBackoff > 0 && p.MaxBackoff > 0 && p.MinBackoff > p.MaxBackoff {
		return bad("MinBackoff %v is above MaxBackoff %v; the backoff doubles from MinBackoff up to MaxBackoff",
			p.MinBackoff, p.MaxBackoff)
	}
	return nil
}

// withDefaults returns p with each zero field set to its default, kept
// consistent with the backoff that is set. p must be valid.
func (p RestartPolicy) withDefaults() RestartPolicy {
	d := DefaultRestartPolicy()
	if p.MaxRestarts == 0 {
		p.MaxRestarts = d.MaxRestarts
	}
	if p.Window == 0 {
		p.Window = d.Window
	}
	switch {
	case p.MinBackoff == 0 && p.MaxBackoff == 0:
		p.MinBackoff, p.MaxBackoff = d.MinBackoff, d.MaxBackoff
	case p.MinBackoff == 0:
		p.MinBackoff = min(d.MinBackoff, p.MaxBackoff)
	case p.MaxBackoff == 0:
		p.MaxBackoff = max(d.MaxBackoff, p.MinBackoff)
	}
	return p
}

// ErrInvalidRestartPolicy is wrapped by the error of [NewCoordinator] for a
// [RestartPolicy] that [RestartPolicy.Validate] refuses.
var ErrInvalidRestartPolicy = errors.New("engine: invalid restart policy")

// ErrRestartsExhausted means the pipeline failed more often than its
// RestartPolicy allows; the error wrapping it names the last failure.
var ErrRestartsExhausted = errors.New("engine: restart policy exhausted")

// ErrSourceLogLost means a worker could not make a source log durable (its
// fsync or close failed, in this worker or in an earlier process on its
// directory): records the job would replay may be gone, so no recovery can
// be trusted, and the run ends at once.
var ErrSourceLogLost = errors.New("engine: a source log may have lost records")

// ErrCheckpointsLost means recovery found no checkpoint the source logs
// can replay from: every checkpoint every task still has (none, when the
// files are missing or corrupt) is older than what the logs were
// truncated to. The job cannot go on exactly once; it stops, before it
// starts a generation, which would discard the checkpoints left. A
// resumed coordinator knows what the logs were truncated to from its
// journal's commits.
var ErrCheckpointsLost = errors.New("engine: no checkpoint the source logs can replay from")

// Config configures a [Coordinator].
type Config struct {
	// Nodes is the number of workers; 0 means 1.
	Nodes int
	// Transport holds further options of the in-process workers'
	// transport (authentication, TLS, limits); child processes get theirs
	// from their command line (see Spawn).
	Transport []transport.Option
	// Dir holds the coordinator's journal and every node's logs and
	// checkpoints (node<k>/ below it). A Dir whose journal holds the same
	// job is resumed from its last completed checkpoint.
	Dir string
	// JobConfig describes the job and its input (loadgen: the job's
	// spec); Run resumes a journal only for the same JobConfig, DAG,
	// Nodes and placement, and refuses another job's with an
	// *OtherJobError.
	JobConfig []byte
	// StartOver discards whatever Dir holds and starts the job afresh.
	StartOver bool
	// Spawn, when set, runs each worker in a child process; otherwise the
	// workers run in this process, each with its own transport node.
	Spawn ProcessSpawner
	// Launch, when set instead of Spawn, starts each worker wherever it
	// says (loadgen: on an agent on another host).
	Launch Launcher
	// CheckpointEvery is the wall time checkpoints aim to be apart.
	// Default 1 s.
	CheckpointEvery time.Duration
	// InitialInterval is the first checkpoint interval in timestamp units;
	// later ones adapt to how fast the global clock moves. Default 4096.
	InitialInterval int64
	// Restart is the restart policy; each zero field takes its default
	// (DefaultRestartPolicy's), and an invalid policy is refused.
	Restart RestartPolicy
	// Faults are the transport faults every in-process worker injects
	// (children get theirs from Spawn).
	Faults transport.Faults
	// NoSync skips fsyncs (in-process workers).
	NoSync bool
	// NoChain keeps the transport on every edge of a one-node job
	// (WorkerConfig.NoChain).
	NoChain bool
	// LogSegmentBytes is WorkerConfig.LogSegmentBytes of the in-process
	// workers.
	LogSegmentBytes int64
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// OnEvent, if set, is told of faults and recoveries as they happen.
	OnEvent func(kind, detail string)
	// ClockStallAlert is how long the global clock may stand still while
	// a generation runs before the coordinator logs a warning (and tells
	// OnEvent "clock-stall"). Default 10 s; negative: never.
	ClockStallAlert time.Duration
}

// Result is the outcome of a completed job.
type Result struct {
	// Results holds what each [Finisher] returned, by task ("1.0").
	Results     map[string][]byte
	Checkpoints int64
	Recoveries  int64
	Crashes     int64 // injected task crashes that fired ([Coordinator.Crash])
	Kills       int64 // nodes killed ([Coordinator.Kill])
	// Late counts messages that reached a stateful task below a completed
	// checkpoint; anything but 0 is a bug in the clock.
	Late int64
	// Filtered counts replayed messages the restore filter dropped.
	Filtered int64
	// RecoveryTimes is, per recovery, the time from the failure being
	// noticed to the new generation running.
	RecoveryTimes []time.Duration
	// Resumed is set when the job continued from an earlier
	// coordinator's journal.
	Resumed *Resumed
	// LostTimes is, per failure, the wall time the job lost to it: from
	// the failure being noticed until the global clock passed the highest
	// value it had reached before, or until the next failure if that came
	// first. Their sum is the time the job spent redoing work.
	LostTimes []time.Duration
	Transport transport.FaultStats
	// WireBytes is what the workers' transport nodes wrote to their
	// sockets, as of their last clock round (0 when every edge was
	// chained).
	WireBytes int64
	// DataFrames and CtrlFrames are the frames of the kinds transport
	// faults drop that the workers' nodes wrote, as of their last clock
	// round: the chances Transport's faults had.
	DataFrames, CtrlFrames int64
}

// Coordinator runs a job on its workers: it starts every generation, polls
// the clocks, triggers checkpoints, and recovers from failures, including
// those a chaos driver injects through [Coordinator.Kill] and
// [Coordinator.Crash]. A Coordinator runs one job once.
type Coordinator struct {
	job       *Job
	cfg       Config
	log       *slog.Logger
	depth     int
	processed atomic.Int64
	events    chan Event
	handles   []handle
	jr        *journal.Journal // the decisions a restarted coordinator resumes from
	resumed   *Resumed
	ran       atomic.Bool // Run was called: a Coordinator runs once

	// The checkpoint schedule: interval is learned, the timestamp units
	// the global clock advances in CheckpointEvery of wall time; step is
	// the running generation's distance between checkpoints, which starts
	// small after a recovery and doubles up to its limit.
	target, horizon, interval, step int64
	// firstStep is the running generation's first step: a generation that
	// failed before its first checkpoint gives the next a first step a
	// quarter of its own, so that failures that come after a fixed amount
	// of work cannot outrun every first checkpoint, however large the
	// interval (see rampStart).
	firstStep int64
	// failures is the liveness bookkeeping: when the last failure was
	// noticed, the gap before it, and the time lost to it while the
	// global clock has not yet come back to where it was.
	failures struct {
		last time.Time
		gap  time.Duration
		high int64 // the highest global clock seen in any generation
		lost *lost // the last failure, until the clock passes its mark
	}
	// restorable are the completed checkpoints recovery may choose, oldest
	// first: the checkpoint stores keep the newest two of every task, so
	// that a corrupt newest file leaves an older one. The source logs keep
	// what the oldest needs; logFloor is what they were truncated to (the
	// journal's floor, for a resumed coordinator).
	restorable []int64
	logFloor   int64
	// hmu guards handles while Run creates them, against Kill and Crash;
	// gen is the running generation, 0 between generations.
	hmu   sync.Mutex
	gen   atomic.Uint64
	kills atomic.Int64

	st stats

	// clockCall, nil outside tests, makes node i's call of a clock round
	// through call: a test substitutes it to order the nodes' replies of a
	// round against a message's hops, which a real round rarely lands
	// between. It is set before Run and only read.
	clockCall func(i int, call func() (Response, error)) (Response, error)
	// killClaimed, nil outside tests, is called by Kill once it has
	// claimed the running generation, before it kills the node; killWait,
	// nil outside tests, when the end of a generation has to wait for a
	// Kill in progress. Set before Run and only read.
	killClaimed, killWait func()

	// per worker cumulative counters, banked when a worker restarts
	mu struct {
		sync.Mutex
		last   []ClockReply
		faults []transport.FaultStats
		banked ClockReply
		bankF  transport.FaultStats
	}
}

// NewCoordinator checks the job and the configuration, and fills in the
// defaults of what the configuration leaves zero.
func NewCoordinator(job *Job, cfg Config) (*Coordinator, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	d, _ := job.depth()
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	if cfg.CheckpointEvery <= 0 {
		cfg.CheckpointEvery = time.Second
	}
	if cfg.InitialInterval <= 0 {
		cfg.InitialInterval = 4096
	}
	if cfg.ClockStallAlert == 0 {
		cfg.ClockStallAlert = 10 * time.Second
	}
	if err := cfg.Restart.Validate(); err != nil {
		return nil, err
	}
	cfg.Restart = cfg.Restart.withDefaults()
	if cfg.Dir == "" {
		return nil, errors.New("engine: Config.Dir is required")
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{job: job, cfg: cfg, log: lg, depth: d, events: make(chan Event, 256), logFloor: math.MinInt64}
	c.mu.last = make([]ClockReply, cfg.Nodes)
	c.mu.faults = make([]transport.FaultStats, cfg.Nodes)
	return c, nil
}

// Processed counts the messages sink tasks consumed so far, replays
// included, as last reported by the workers (for progress lines).
func (c *Coordinator) Processed() *atomic.Int64 { return &c.processed }

func (c *Coordinator) event(kind, detail string) {
	c.log.Info("engine: "+kind, "detail", detail)
	if c.cfg.OnEvent != nil {
		c.cfg.OnEvent(kind, detail)
	}
}

const callTimeout = 60 * time.Second

// all makes the call req on every node at once. It returns at the first
// failure, a failed call or, for a call of a generation, a failure event
// of that generation, without waiting for the other calls: they may be
// waiting on the failure (a task blocked on credit from a dead node holds
// a checkpoint call until the generation stops); their answers are
// dropped.
func (c *Coordinator) all(ctx context.Context, req Request) ([]Response, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	type result struct {
		i   int
		r   Response
		err error
	}
	results := make(chan result, len(c.handles))
	for i, h := range c.handles {
		go func() {
			var r Response
			var err error
			if c.clockCall != nil && req.Op == "clock" {
				r, err = c.clockCall(i, func() (Response, error) { return h.do(ctx, req) })
			} else {
				r, err = h.do(ctx, req)
			}
			if err == nil {
				c.noteFaults(i, r)
			}
			results <- result{i, r, err}
		}()
	}
	var events <-chan Event
	if req.Gen != 0 {
		events = c.events
	}
	out := make([]Response, len(c.handles))
	for n := 0; n < len(c.handles); {
		select {
		case res := <-results:
			if res.err != nil {
				return nil, fmt.Errorf("node %d %s: %w", res.i, req.Op, res.err)
			}
			out[res.i] = res.r
			n++
		case ev := <-events:
			if !c.stale(ev, req.Gen) {
				return nil, ev.err()
			}
		}
	}
	return out, nil
}

func (c *Coordinator) noteFaults(i int, r Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.faults[i] = r.Faults
	if r.Clock != nil {
		c.mu.last[i] = *r.Clock
	}
	var p int64
	for _, l := range c.mu.last {
		p += l.Processed
	}
	c.processed.Store(p + c.mu.banked.Processed)
}

// bank keeps the counters of worker i before it restarts with fresh ones.
func (c *Coordinator) bank(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, f := c.mu.last[i], c.mu.faults[i]
	c.mu.banked.Processed += l.Processed
	c.mu.banked.Crashes += l.Crashes
	c.mu.banked.Late += l.Late
	c.mu.banked.Filtered += l.Filtered
	c.mu.banked.WireBytes += l.WireBytes
	c.mu.banked.DataFrames += l.DataFrames
	c.mu.banked.CtrlFrames += l.CtrlFrames
	c.mu.bankF = c.mu.bankF.Add(f)
	c.mu.last[i], c.mu.faults[i] = ClockReply{}, transport.FaultStats{}
}

func (c *Coordinator) totals(res *Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, f := c.mu.banked, c.mu.bankF
	for i := range c.mu.last {
		t.Crashes += c.mu.last[i].Crashes
		t.Late += c.mu.last[i].Late
		t.Filtered += c.mu.last[i].Filtered
		t.WireBytes += c.mu.last[i].WireBytes
		t.DataFrames += c.mu.last[i].DataFrames
		t.CtrlFrames += c.mu.last[i].CtrlFrames
		f = f.Add(c.mu.faults[i])
	}
	res.Crashes, res.Late, res.Filtered, res.Transport = t.Crashes, t.Late, t.Filtered, f
	res.Kills = c.kills.Load()
	res.WireBytes = t.WireBytes
	res.DataFrames, res.CtrlFrames = t.DataFrames, t.CtrlFrames
}

// Run runs the job to the end of its input and returns the results, or
// the error that ended it: ctx's, a failure beyond the restart policy
// (errors.Is ErrRestartsExhausted), or a worker that could not start. A
// Coordinator runs once: a second call, even after the first failed, fails
// at once and touches nothing (a new Coordinator on the same Config.Dir
// resumes the job).
func (c *Coordinator) Run(ctx context.Context) (*Result, error) {
	if c.ran.Swap(true) {
		return nil, errors.New("engine: Coordinator.Run called again; a Coordinator runs once (a new one on the same Dir resumes the job)")
	}
	gen, err := c.openJournal()
	if err != nil {
		return nil, err
	}
	defer c.jr.Close()
	for i := range c.cfg.Nodes {
		var h handle
		var err error
		if c.cfg.Launch != nil {
			h, err = newProcessHandle(ctx, c.cfg.Launch, i, c.events)
		} else if c.cfg.Spawn != nil {
			h, err = newProcessHandle(ctx, spawnLauncher(c.cfg.Spawn), i, c.events)
		} else {
			h, err = newLocalHandle(c.job, WorkerConfig{Dir: filepath.Join(c.cfg.Dir, fmt.Sprintf("node%d", i)),
				Faults: c.nodeFaults(i), NoSync: c.cfg.NoSync, NoChain: c.cfg.NoChain, Logger: c.cfg.Logger,
				Transport: c.cfg.Transport, LogSegmentBytes: c.cfg.LogSegmentBytes}, i, c.events)
		}
		if err != nil {
			c.closeAll()
			return nil, err
		}
		c.hmu.Lock()
		c.handles = append(c.handles, h)
		c.hmu.Unlock()
	}
	defer c.closeAll()

	res := &Result{Resumed: c.resumed}
	placement := c.job.Placement(c.cfg.Nodes)
	ids := c.job.tasks()
	place := make([]int, len(ids))
	stateful := make([][]string, c.cfg.Nodes)
	for i, id := range ids {
		place[i] = placement[id]
		if p := c.job.Procs[id.Processor]; p.NewTask != nil {
			t, err := p.NewTask(int(id.Index))
			if err != nil {
				return nil, err
			}
			if _, ok := t.(Stateful); ok {
				stateful[place[i]] = append(stateful[place[i]], ckptName(id))
			}
		}
	}

	var restarts []time.Time
	backoff := c.cfg.Restart.MinBackoff
	progressed := false // the last generation committed a checkpoint
	var failedAt time.Time
	for {
		gen++
		// Events left from the generation that failed are old news: a
		// task's carries its generation, a node's death shows as a handle
		// that is not alive.
		c.drainEvents()
		// Restart nodes that died, then find the newest common checkpoint.
		for i, h := range c.handles {
			if !h.alive() {
				c.bank(i)
				if err := h.restart(ctx); err != nil {
					return nil, fmt.Errorf("engine: restarting node %d: %w", i, err)
				}
			}
		}
		restore, has, err := c.restorePoint(ctx, stateful)
		if err == nil && c.logFloor != math.MinInt64 && (!has || restore < c.logFloor) {
			// Checked before the generation is journaled and started:
			// starting it would discard every newer checkpoint.
			c.totals(res)
			return nil, c.checkpointsLost(ctx, stateful, restore, has)
		}
		if err == nil && c.resumed != nil && gen == c.resumed.Gen {
			c.resumed.Checkpoint, c.resumed.HasCheckpoint = restore, has
		}
		if err == nil {
			c.restorable = c.restorable[:0]
			if has {
				c.restorable = append(c.restorable, restore)
			}
			if err := c.journalGeneration(gen, restore, has); err != nil {
				return nil, err
			}
			err = c.start(ctx, gen, place, restore, has, progressed)
			progressed = false
		}
		if err == nil {
			c.statsGeneration(gen, time.Now())
			if !failedAt.IsZero() {
				res.RecoveryTimes = append(res.RecoveryTimes, time.Since(failedAt))
			}
			var results map[string][]byte
			before := res.Checkpoints
			results, err = c.drive(ctx, gen, res)
			if res.Checkpoints > before { // the generation made progress
				backoff, progressed = c.cfg.Restart.MinBackoff, true
			}
			if err == nil {
				res.Results = results
				c.totals(res)
				_, _ = c.all(ctx, Request{Op: "stop"})
				return res, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrSourceLogLost) || errors.Is(err, ErrInvalidJob) {
			c.totals(res)
			c.event("failure", err.Error())
			_, _ = c.all(ctx, Request{Op: "stop"})
			return nil, err
		}
		failedAt = time.Now()
		c.failed(failedAt, res)
		c.event("failure", err.Error())
		keep := restarts[:0]
		for _, t := range restarts {
			if failedAt.Sub(t) < c.cfg.Restart.Window {
				keep = append(keep, t)
			}
		}
		restarts = append(keep, failedAt)
		if len(restarts) > max(c.cfg.Restart.MaxRestarts, 0) {
			c.totals(res)
			return nil, fmt.Errorf("%w: %d failures within %v, the last: %v", ErrRestartsExhausted,
				len(restarts), c.cfg.Restart.Window, err)
		}
		res.Recoveries++
		c.statsRecovery()
		_, _ = c.allAlive(ctx, Request{Op: "stop"})
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.cfg.Restart.MaxBackoff)
		c.event("recovery", fmt.Sprintf("generation %d", gen+1))
	}
}

// causeWait is how long cause waits for the report of a failure.
const causeWait = 50 * time.Millisecond

// cause returns the failure behind err, a control call that failed in
// generation gen: a task's failure event, if one comes within causeWait (a
// checkpoint call fails with "task has failed" while the task's own report
// is still on its way), else err.
func (c *Coordinator) cause(gen uint64, err error) error {
	t := time.NewTimer(causeWait)
	defer t.Stop()
	for {
		select {
		case ev := <-c.events:
			if !c.stale(ev, gen) {
				return ev.err()
			}
		case <-t.C:
			return err
		}
	}
}

// drainEvents throws away the events waiting between two generations.
func (c *Coordinator) drainEvents() {
	for {
		select {
		case <-c.events:
		default:
			return
		}
	}
}

// stale says whether ev is old news for generation gen: a task failure of
// another generation, or the death of a process already replaced.
func (c *Coordinator) stale(ev Event, gen uint64) bool {
	if ev.Gen != 0 {
		return ev.Gen != gen
	}
	if ev.Node < 0 || ev.Node >= len(c.handles) {
		return true
	}
	return ev.Life != c.handles[ev.Node].life()
}

// lost is a failure whose cost is still being counted: the job has lost
// the time since at until the global clock passes mark.
type lost struct {
	at   time.Time
	mark int64
}

// failed notes a failure at now: it ends the count of the previous
// failure's lost time if the clock had not yet caught up, starts this
// one's, and remembers the gap between failures, which bounds how far
// apart checkpoints may be (see every).
func (c *Coordinator) failed(now time.Time, res *Result) {
	f := &c.failures
	if f.lost != nil {
		res.LostTimes = append(res.LostTimes, now.Sub(f.lost.at))
	}
	f.lost = &lost{at: now, mark: f.high}
	if !f.last.IsZero() {
		f.gap = now.Sub(f.last)
	}
	f.last = now
}

// progressed records the global clock m of a round: the lost time of the
// last failure ends once m passes the highest clock seen before it.
func (c *Coordinator) progressed(m int64, now time.Time, res *Result) {
	f := &c.failures
	if m == clock.Start {
		return
	}
	if f.lost != nil && m > f.lost.mark {
		res.LostTimes = append(res.LostTimes, now.Sub(f.lost.at))
		f.lost = nil
	}
	if m != clock.Idle {
		f.high = max(f.high, m)
	}
}

// restorableCheckpoints is how many completed checkpoints recovery may
// choose from. The workers' checkpoint stores keep one more per task (see
// NewWorker): the checkpoint being saved, which may complete on some nodes
// only, must not push out the oldest of these.
const restorableCheckpoints = 2

// rampStart is how much smaller than the learned interval the first step
// after a recovery is: the first checkpoint then completes soon after the
// recovery, whatever the failures' rate, and each later one, twice as far
// apart, keeps a larger share of the work done since (see limit). While
// generations fail before their first checkpoint, each first step is a
// quarter of the one before (see firstStep).
const rampStart = 64

// every is the wall time checkpoints aim to be apart: CheckpointEvery, or
// a quarter of the time between the last two failures when failures come
// more often (or of the time since the last one, once that is longer), so
// that several checkpoints complete between two failures.
func (c *Coordinator) every(now time.Time) time.Duration {
	e := c.cfg.CheckpointEvery
	if f := &c.failures; f.gap > 0 {
		if q := max(now.Sub(f.last), f.gap) / 4; q < e {
			e = max(q, time.Millisecond)
		}
	}
	return e
}

// limit is the step that matches every: the learned interval scaled to
// that wall time. After a checkpoint the step doubles up to it.
func (c *Coordinator) limit(now time.Time) int64 {
	return max(1, satInt64(float64(c.interval)*float64(c.every(now))/float64(c.cfg.CheckpointEvery)))
}

// satAdd is a+b for b >= 0, at most math.MaxInt64: timestamps may come
// close to it, and a checkpoint time or horizon that wrapped round to a
// negative one would go back below checkpoints already taken.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satInt64 converts f >= 0 to int64, at most math.MaxInt64 (converting a
// larger float is implementation-defined: math.MinInt64 on amd64).
func satInt64(f float64) int64 {
	if f >= math.MaxInt64 { // float64(math.MaxInt64) is 2^63
		return math.MaxInt64
	}
	return int64(f)
}

func (c *Coordinator) nodeFaults(i int) transport.Faults {
	f := c.cfg.Faults
	f.Seed += uint64(i) * 0x9e3779b97f4a7c15
	if i > 0 {
		f.Reset = 0 // one node resets, or every reset would count per node
	}
	return f
}

func (c *Coordinator) allAlive(ctx context.Context, req Request) ([]Response, error) {
	var err error
	for i, h := range c.handles {
		if !h.alive() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, e := h.do(cctx, req)
		cancel()
		if e != nil && err == nil {
			err = fmt.Errorf("node %d: %w", i, e)
		}
	}
	return nil, err
}

func (c *Coordinator) closeAll() {
	for _, h := range c.handles {
		h.close()
	}
}

// common lists the checkpoints, newest first, that every stateful task
// has and can load on its node: a restore point outside it fails the
// start of a task that cannot load it, after the nodes started before
// discarded every newer checkpoint.
func (c *Coordinator) common(ctx context.Context, stateful [][]string) ([]int64, error) {
	var common []int64
	first := true
	for i, h := range c.handles {
		if len(stateful[i]) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := h.do(cctx, Request{Op: "common", Tasks: stateful[i]})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node %d common: %w", i, err)
		}
		if first {
			common, first = r.Common, false
			continue
		}
		common = slices.DeleteFunc(common, func(ts int64) bool { return !slices.Contains(r.Common, ts) })
	}
	return common, nil
}

// start starts generation gen on every node, restoring from restore if
// has; progressed says whether the generation before committed a
// checkpoint.
func (c *Coordinator) start(ctx context.Context, gen uint64, place []int, restore int64, has, progressed bool) error {
	addrs := make([]string, len(c.handles))
	for i, h := range c.handles {
		addrs[i] = h.addr()
	}
	base := int64(0)
	if has {
		base = max(restore, 0)
	}
	if c.interval == 0 {
		c.interval = c.cfg.InitialInterval
	}
	if c.step == 0 { // the first generation of this coordinator (a resumed one too)
		c.step = c.interval
	}
	if gen > 1 {
		// After a recovery the first checkpoint comes soon, so that the
		// work redone is kept even if the next failure follows closely.
		// The interval may be far too large for that (a first interval
		// set for another rate, or one learned across a checkpoint that
		// took long): a generation that failed before its first checkpoint
		// cuts the next one's first step to a quarter, and one that
		// checkpointed lets it double back.
		s := max(1, c.interval/rampStart)
		if c.firstStep > 0 {
			if !progressed {
				s = min(s, max(1, c.firstStep/4))
			} else {
				s = min(s, satAdd(c.firstStep, c.firstStep))
			}
		}
		c.step = s
	}
	c.firstStep = c.step
	c.target = satAdd(base, c.step)
	c.horizon = satAdd(c.target, c.step)
	for i, h := range c.handles {
		cmd := StartCmd{Gen: gen, Node: i, Addrs: addrs, Placement: place, Restore: restore, HasRestore: has,
			Target: c.target, Horizon: c.horizon}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := h.do(cctx, Request{Op: "start", Start: &cmd})
		cancel()
		if err != nil {
			return fmt.Errorf("node %d start: %w", i, err)
		}
	}
	_, err := c.all(ctx, Request{Op: "run", Gen: gen})
	return err
}

// drive runs one generation until the end of input (returning the
// results) or a failure.
func (c *Coordinator) drive(ctx context.Context, gen uint64, res *Result) (map[string][]byte, error) {
	window := 1
	every := time.Millisecond
	if len(c.handles) > 1 {
		window = c.depth + 1
		every = 2 * time.Millisecond
	}
	clk := newRounds(len(c.handles), window)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	c.gen.Store(gen)
	// However the generation ends, a Kill that claimed it lands first.
	defer c.endGen(gen)
	// The clock's rate is learned between two checkpoints of one
	// generation at full step: the first after a start includes the
	// start, and ramping steps measure the checkpoints' cost more than
	// the clock's rate.
	var lastDone time.Time
	var lastTc int64
	var took time.Duration // how long the last checkpoint took
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev := <-c.events:
			if c.stale(ev, gen) {
				continue
			}
			return nil, ev.err()
		case <-ticker.C:
		}
		rs, err := c.all(ctx, Request{Op: "clock", Gen: gen})
		if err != nil {
			return nil, c.cause(gen, err)
		}
		for i, r := range rs {
			clk.report(i, r.Clock.Min)
		}
		clk.endRound()
		m := clk.min()
		c.statsClock(m, time.Now())
		c.progressed(m, time.Now(), res)
		if m == clock.Idle {
			// Taken back from Kill before the results are collected: a
			// kill claimed now would land after them, in a generation
			// that ends without a recovery.
			if killed, err := c.endGen(gen); err != nil || killed {
				if err == nil {
					err = c.cause(gen, fmt.Errorf("engine: a node of generation %d was killed", gen))
				}
				return nil, err
			}
			out := map[string][]byte{}
			rs, err := c.all(ctx, Request{Op: "finish", Gen: gen})
			if err != nil {
				return nil, err
			}
			for _, r := range rs {
				for id, b := range r.Results {
					out[id] = b
				}
			}
			return out, nil
		}
		if m < c.target {
			continue
		}
		// Every message below target is processed: checkpoint.
		tc, next := c.target, c.horizon
		ckptStart := time.Now()
		if _, err := c.all(ctx, Request{Op: "checkpoint", Gen: gen, Persist: true, Ts: tc, Next: next}); err != nil {
			return nil, c.cause(gen, err)
		}
		now := time.Now()
		if el := now.Sub(lastDone); !lastDone.IsZero() && el > 0 && tc > lastTc {
			// A checkpoint that takes longer than half CheckpointEvery
			// (a large state) gets checkpoints twice its own length
			// apart, so that checkpointing never takes most of the time.
			period := max(c.cfg.CheckpointEvery, 2*took)
			want := satInt64(float64(tc-lastTc) * float64(period) / float64(el))
			c.interval = max(1, min(max(want, c.interval/4), min(c.interval, math.MaxInt64/4)*4))
		}
		limit := c.limit(now)
		if c.step >= limit {
			lastDone, lastTc = now, tc // at full step: the next one measures the rate
		} else {
			lastDone = time.Time{}
		}
		c.step = max(1, min(satAdd(c.step, c.step), limit))
		if err := c.journalCheckpoint(gen, tc); err != nil {
			return nil, err
		}
		c.target = next
		c.horizon = satAdd(next, c.step)
		if _, err := c.all(ctx, Request{Op: "horizon", Gen: gen, Ts: c.horizon}); err != nil {
			return nil, err
		}
		if c.restorable = append(c.restorable, tc); len(c.restorable) > restorableCheckpoints {
			c.restorable = c.restorable[1:]
		}
		keep := c.restorable[0]
		if err := c.journalCommit(gen, keep); err != nil {
			return nil, err
		}
		// Raised before the call: a worker may cut its logs to keep even
		// if the call fails at another, and a recovery must not then
		// restore from below it.
		c.logFloor = max(c.logFloor, keep)
		if _, err := c.all(ctx, Request{Op: "commit", Gen: gen, Ts: keep}); err != nil {
			return nil, err
		}
		done := time.Now()
		c.log.Debug("engine: checkpoint", "ts", tc, "step", c.step, "interval", c.interval, "took", done.Sub(ckptStart))
		took = done.Sub(ckptStart)
		res.Checkpoints++ // counted once committed, as Stats counts it
		c.statsCheckpoint(took, done)
	}
}

// endGen takes generation gen back from Kill: from then on a Kill fails,
// killing nothing. Kill claims a generation and kills its node under hmu,
// so a Kill that claimed gen may not have killed yet (its goroutine
// descheduled between the two); endGen waits for it, so that the kill lands
// in gen, which its failure then ends, and not after the run or in the
// next generation (where it would be a second kill of that generation, or
// count without a recovery of its own). It says whether a Kill claimed
// gen, and returns the first failure of gen it read meanwhile. While it
// waits it reads the events: a Kill may be waiting, holding hmu, to hand
// its node's death to a full c.events (localHandle.kill). Events read here
// are the ones the caller would take, or Run would drop after gen.
func (c *Coordinator) endGen(gen uint64) (killed bool, failure error) {
	unclaimed := make(chan bool, 1)
	take := func() {
		defer c.hmu.Unlock()
		unclaimed <- c.gen.CompareAndSwap(gen, 0)
	}
	if c.hmu.TryLock() {
		take()
	} else {
		if c.killWait != nil {
			c.killWait()
		}
		go func() {
			c.hmu.Lock()
			take()
		}()
	}
	for {
		select {
		case ok := <-unclaimed:
			return !ok, failure
		case ev := <-c.events:
			if failure == nil && !c.stale(ev, gen) {
				failure = ev.err()
			}
		}
	}
}

// Kill kills node i abruptly, as a chaos driver does: a child process gets
// SIGKILL, whatever it is doing (inside a checkpoint too); an in-process
// worker stops its tasks and aborts its transport. The coordinator notices
// the death and recovers. Kill fails, killing nothing, unless a generation
// runs that no kill has hit yet: one kill, one failure, one recovery. A
// generation that has reached the end of its input is no longer running.
// Safe for concurrent use with Run.
func (c *Coordinator) Kill(i int) error {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if i < 0 || i >= len(c.handles) {
		return fmt.Errorf("engine: no node %d", i)
	}
	if g := c.gen.Load(); g == 0 || !c.gen.CompareAndSwap(g, 0) {
		return errors.New("engine: no generation runs that a kill has not hit")
	}
	if c.killClaimed != nil {
		c.killClaimed()
	}
	if err := c.handles[i].kill(); err != nil {
		return err
	}
	c.kills.Add(1)
	c.event("kill", fmt.Sprintf("node %d", i))
	return nil
}

// Crash makes task panic at its next step in the running generation, as
// a chaos driver does; the coordinator recovers. It fails between
// generations. Safe for concurrent use with Run.
func (c *Coordinator) Crash(task taskid.ID) error {
	gen := c.gen.Load()
	node, ok := c.job.Placement(c.cfg.Nodes)[task]
	c.hmu.Lock()
	if gen == 0 || !ok || node >= len(c.handles) {
		c.hmu.Unlock()
		return fmt.Errorf("engine: cannot crash task %v now", task)
	}
	h := c.handles[node]
	c.hmu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := h.do(ctx, Request{Op: "crash", Gen: gen, Task: task.String()}); err != nil {
		return err
	}
	c.event("crash", "task "+task.String())
	return nil
}

// Tasks lists the job's tasks, for a chaos driver to pick from.
func (c *Coordinator) Tasks() []taskid.ID { return c.job.tasks() }

// Nodes is the number of workers.
func (c *Coordinator) Nodes() int { return c.cfg.Nodes }
