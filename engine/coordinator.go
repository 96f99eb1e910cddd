package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
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
// while failures follow each other closely.
type RestartPolicy struct {
	MaxRestarts int
	Window      time.Duration
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
}

// DefaultRestartPolicy allows 10 restarts a minute, backing off from 10 ms
// to 1 s.
func DefaultRestartPolicy() RestartPolicy {
	return RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}
}

// ErrRestartsExhausted means the pipeline failed more often than its
// RestartPolicy allows; the error wrapping it names the last failure.
var ErrRestartsExhausted = errors.New("engine: restart policy exhausted")

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
	// Restart is the restart policy; zero value: DefaultRestartPolicy.
	Restart RestartPolicy
	// Faults are the transport faults every in-process worker injects
	// (children get theirs from Spawn).
	Faults transport.Faults
	// CrashEvery makes a random task panic every CrashEvery; KillEvery
	// kills a random node (SIGKILL for child processes) and starts it
	// again. 0: never.
	CrashEvery, KillEvery time.Duration
	// Seed seeds the choice of crashed tasks and killed nodes.
	Seed uint64
	// NoSync skips fsyncs (in-process workers).
	NoSync bool
	// NoChain keeps the transport on every edge of a one-node job
	// (WorkerConfig.NoChain).
	NoChain bool
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
	Crashes     int64 // injected task crashes that fired
	Kills       int64 // nodes killed
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
	Resumed   *Resumed
	Transport transport.FaultStats
	// WireBytes is what the workers' transport nodes wrote to their
	// sockets, as of their last clock round (0 when every edge was
	// chained).
	WireBytes int64
}

// Coordinator runs a job on its workers: it starts every generation, polls
// the clocks, triggers checkpoints, injects crash and kill faults, and
// recovers from failures. A Coordinator runs one job once.
type Coordinator struct {
	job       *Job
	cfg       Config
	log       *slog.Logger
	depth     int
	processed atomic.Int64
	events    chan Event
	handles   []handle
	rng       *rand.Rand
	jr        *journal.Journal // the decisions a restarted coordinator resumes from
	resumed   *Resumed

	// the checkpoint schedule of the running generation
	target, horizon, interval int64
	// the fault schedules
	crashes, kills faultSchedule

	st stats

	// per worker cumulative counters, banked when a worker restarts
	mu struct {
		sync.Mutex
		last   []ClockReply
		faults []transport.FaultStats
		banked ClockReply
		bankF  transport.FaultStats
	}
}

// NewCoordinator checks the job and the configuration.
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
	if cfg.Restart == (RestartPolicy{}) {
		cfg.Restart = DefaultRestartPolicy()
	}
	if cfg.Dir == "" {
		return nil, errors.New("engine: Config.Dir is required")
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{job: job, cfg: cfg, log: lg, depth: d, events: make(chan Event, 256),
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed))}
	c.crashes.every, c.kills.every = cfg.CrashEvery, cfg.KillEvery
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

func (c *Coordinator) all(ctx context.Context, req Request) ([]Response, error) {
	out := make([]Response, len(c.handles))
	errs := make([]error, len(c.handles))
	var wg sync.WaitGroup
	for i, h := range c.handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			out[i], errs[i] = h.do(cctx, req)
			if errs[i] == nil {
				c.noteFaults(i, out[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return out, fmt.Errorf("node %d %s: %w", i, req.Op, err)
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
		f = f.Add(c.mu.faults[i])
	}
	res.Crashes, res.Late, res.Filtered, res.Transport = t.Crashes, t.Late, t.Filtered, f
	res.WireBytes = t.WireBytes
}

// Run runs the job to the end of its input and returns the results, or
// the error that ended it: ctx's, a failure beyond the restart policy
// (errors.Is ErrRestartsExhausted), or a worker that could not start.
func (c *Coordinator) Run(ctx context.Context) (*Result, error) {
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
				Transport: c.cfg.Transport}, i, c.events)
		}
		if err != nil {
			c.closeAll()
			return nil, err
		}
		c.handles = append(c.handles, h)
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
	var failedAt time.Time
	for {
		gen++
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
		if err == nil {
			if err := c.journalGeneration(gen, restore, has); err != nil {
				return nil, err
			}
			err = c.start(ctx, gen, place, restore, has)
		}
		if err == nil {
			c.statsGeneration(gen, time.Now())
			if !failedAt.IsZero() {
				res.RecoveryTimes = append(res.RecoveryTimes, time.Since(failedAt))
			}
			var results map[string][]byte
			before := res.Checkpoints
			results, err = c.drive(ctx, gen, restore, has, res)
			if res.Checkpoints > before {
				backoff = c.cfg.Restart.MinBackoff // the last generation made progress
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
		failedAt = time.Now()
		c.event("failure", err.Error())
		now := time.Now()
		keep := restarts[:0]
		for _, t := range restarts {
			if now.Sub(t) < c.cfg.Restart.Window {
				keep = append(keep, t)
			}
		}
		restarts = append(keep, now)
		if len(restarts) > c.cfg.Restart.MaxRestarts {
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

// latest is the newest checkpoint common to every stateful task: the least
// of each node's newest common one (checkpoints complete in lockstep and
// each task keeps two, so the least is present everywhere).
func (c *Coordinator) latest(ctx context.Context, stateful [][]string) (int64, bool, error) {
	ts, any := int64(math.MaxInt64), false
	for i, h := range c.handles {
		if len(stateful[i]) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		r, err := h.do(cctx, Request{Op: "latest", Tasks: stateful[i]})
		cancel()
		if err != nil {
			return 0, false, err
		}
		if !r.LatestOK {
			return 0, false, nil
		}
		ts, any = min(ts, r.LatestTs), true
	}
	return ts, any, nil
}

func (c *Coordinator) start(ctx context.Context, gen uint64, place []int, restore int64, has bool) error {
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
	c.target = base + c.interval
	c.horizon = c.target + c.interval
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
func (c *Coordinator) drive(ctx context.Context, gen uint64, restore int64, has bool, res *Result) (map[string][]byte, error) {
	window := 1
	every := time.Millisecond
	if len(c.handles) > 1 {
		window = c.depth + 1
		every = 2 * time.Millisecond
	}
	clk := newRounds(len(c.handles), window)
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	now := time.Now()
	crashC, killC := c.crashes.arm(now), c.kills.arm(now)
	defer c.crashes.stop()
	defer c.kills.stop()
	ids := c.job.tasks()
	lastDone, lastTc := time.Now(), c.target-c.interval
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev := <-c.events:
			if ev.Gen != 0 && ev.Gen != gen {
				continue
			}
			return nil, fmt.Errorf("task %s failed: %s", ev.Task, ev.Err)
		case <-crashC:
			c.crashes.fired()
			id := ids[c.rng.IntN(len(ids))]
			node := c.job.Placement(len(c.handles))[id]
			if _, err := c.handles[node].do(ctx, Request{Op: "crash", Gen: gen, Task: id.String()}); err == nil {
				c.event("crash", "task "+id.String())
			}
			continue
		case <-killC:
			c.kills.fired()
			i := c.rng.IntN(len(c.handles))
			if err := c.handles[i].kill(); err == nil {
				res.Kills++
				c.event("kill", fmt.Sprintf("node %d", i))
			}
			continue
		case <-ticker.C:
		}
		rs, err := c.all(ctx, Request{Op: "clock", Gen: gen})
		if err != nil {
			return nil, err
		}
		for i, r := range rs {
			clk.report(i, r.Clock.Min)
		}
		clk.endRound()
		m := clk.min()
		c.statsClock(m, time.Now())
		if m == clock.Idle {
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
			return nil, err
		}
		res.Checkpoints++
		now := time.Now()
		if el := now.Sub(lastDone); el > 0 && tc > lastTc {
			want := int64(float64(tc-lastTc) * float64(c.cfg.CheckpointEvery) / float64(el))
			c.interval = max(1, min(max(want, c.interval/4), c.interval*4))
		}
		lastDone, lastTc = now, tc
		if err := c.journalCheckpoint(gen, tc); err != nil {
			return nil, err
		}
		c.target = next
		c.horizon = next + c.interval
		if _, err := c.all(ctx, Request{Op: "horizon", Gen: gen, Ts: c.horizon}); err != nil {
			return nil, err
		}
		if _, err := c.all(ctx, Request{Op: "commit", Gen: gen, Ts: tc}); err != nil {
			return nil, err
		}
		done := time.Now()
		c.statsCheckpoint(done.Sub(ckptStart), done)
	}
}

var _ = taskid.ID{}

// faultSchedule injects one kind of fault every period. Its next time
// outlives generations, so that frequent recoveries do not keep postponing
// the other kind of fault.
type faultSchedule struct {
	every time.Duration // 0: never
	next  time.Time
	timer *time.Timer // the running generation's
}

// arm starts a generation's timer and returns its channel, nil when the
// fault is off.
func (f *faultSchedule) arm(now time.Time) <-chan time.Time {
	if f.every <= 0 {
		return nil
	}
	if f.next.IsZero() {
		f.next = now.Add(f.every)
	}
	f.timer = time.NewTimer(max(0, f.next.Sub(now)))
	return f.timer.C
}

// fired schedules the next fault after one was injected.
func (f *faultSchedule) fired() {
	f.next = time.Now().Add(f.every)
	f.timer.Reset(f.every)
}

// stop releases a generation's timer.
func (f *faultSchedule) stop() {
	if f.timer != nil {
		f.timer.Stop()
	}
}
