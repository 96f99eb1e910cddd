package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine/checkpoint"
	"github.com/sluicehq/sluice/engine/clock"
	"github.com/sluicehq/sluice/engine/store"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// WorkerConfig configures a [Worker].
type WorkerConfig struct {
	// Dir holds the node's source logs and checkpoints. It must survive a
	// restart of the node's process.
	Dir string
	// Listen is the transport address, "127.0.0.1:0" if empty.
	Listen string
	// Faults are injected into the node's outgoing traffic.
	Faults transport.Faults
	// NoSync skips fsyncs of logs and checkpoints (tests, benchmarks).
	NoSync bool
	// NoChain keeps the transport on every edge even when the whole job
	// runs on this node (to measure or test the transport through the
	// engine). Default: such edges are chained; see [Worker.Start].
	NoChain bool
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// Transport holds further options of the node's transport:
	// authentication (transport.WithKey), TLS, limits.
	Transport []transport.Option
	// LogSegmentBytes is the size of the source logs' segments, the unit
	// in which they are deleted; 0: store's default (64 MiB).
	LogSegmentBytes int64
	// KillAt, "point:n", makes the worker SIGKILL its own process at a
	// named point, for tests of worker processes (see killPoints); never
	// set it on a worker in a process that must survive.
	KillAt string
}

// Worker runs the tasks placed on one node. Its control methods are called
// by the coordinator, one at a time (in this process, or through
// [ServeWorker]); they are safe for concurrent use with the tasks' own
// goroutines.
type Worker struct {
	job   *Job
	cfg   WorkerConfig
	node  *transport.Node
	ckpts *checkpoint.Store
	lock  *os.File // held until Close: one worker per directory
	log   *slog.Logger

	events chan Event
	killAt *killPoint

	crashes   atomic.Int64 // injected crashes that fired
	processed atomic.Int64 // messages consumed by sink tasks
	late      atomic.Int64 // messages that arrived below a completed checkpoint
	filtered  atomic.Int64 // messages dropped by the restore filter

	inc atomic.Pointer[incarnation]

	// closeLog is (*store.Log).Close, syncLog (*store.Log).Sync and
	// appendLog (*store.Log).Append; tests substitute them to make
	// closing, syncing or appending to a source log fail.
	closeLog, syncLog func(*store.Log) error
	appendLog         func(*store.Log, []Record) error

	mu         sync.Mutex // serializes control calls
	registered map[taskid.ID]bool
	// lostLog is the first failure to close (and so to fsync) a source
	// log. Its records may not be on disk while the page cache still
	// serves them, and the fsync that took the error will not report it
	// again: a later generation would replay them and commit checkpoints
	// over them. The worker starts no generation after it.
	lostLog error
}

// Event is a failure reported to the coordinator: a task's, by its worker
// (Gen is the task's generation), or a node's death, by the coordinator's
// handle of the node (Gen 0, Node and Life say which process died).
type Event struct {
	Gen  uint64 `json:"gen"`
	Task string `json:"task"`
	Err  string `json:"err"`
	// Node and Life name the process of a node death: Life counts the
	// node's (re)starts, so that the death of a process the coordinator
	// has already replaced is recognised as old news.
	Node int    `json:"node,omitempty"`
	Life uint64 `json:"life,omitempty"`
	// LogLost marks an Err that wraps ErrSourceLogLost, as
	// Response.LogLost does: no recovery can help, and the coordinator
	// ends the run. A worker that predates it leaves it out: false.
	LogLost bool `json:"log_lost,omitempty"`
}

// err is the failure ev reports, wrapping ErrSourceLogLost when the
// worker said so.
func (ev Event) err() error {
	if ev.LogLost {
		return fmt.Errorf("task %s failed: %w", ev.Task, workerError{ev.Err, ErrSourceLogLost})
	}
	return fmt.Errorf("task %s failed: %s", ev.Task, ev.Err)
}

// NewWorker starts the node's transport. The job must be the same in every
// worker and in the coordinator.
func NewWorker(job *Job, cfg WorkerConfig) (*Worker, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	kp, err := parseKillPoint(cfg.KillAt, cfg.Dir)
	if err != nil {
		return nil, err
	}
	lock, err := lockDir(cfg.Dir, 10*time.Second)
	if err != nil {
		return nil, err
	}
	ccfg := checkpoint.DefaultConfig()
	// Save keeps, beside the checkpoint it saves, the ones recovery may
	// still choose: a save can complete on this node and never on another
	// one, and the coordinator then still counts on the oldest. Commit
	// deletes those below the oldest recovery may choose.
	ccfg.NoSync, ccfg.Logger, ccfg.Keep = cfg.NoSync, lg, restorableCheckpoints+1
	cs, err := checkpoint.OpenConfig(filepath.Join(cfg.Dir, "checkpoints"), ccfg)
	if err != nil {
		lock.Close()
		return nil, err
	}
	// A record is one message, and records are as large as the input makes
	// them (a word of wordcount can be a 500 KiB token): let a channel's
	// window hold any message a frame can carry. Windows grow on demand and
	// the peer budget still bounds what all channels hold together.
	node, err := transport.NewNode(transport.WithListen(cfg.Listen), transport.WithFaults(cfg.Faults),
		transport.WithLogger(lg), transport.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
		transport.WithWindow(transport.DefaultWindowMessages, MaxMessageBytes), transport.WithOptions(cfg.Transport...))
	if err != nil {
		lock.Close()
		return nil, err
	}
	w := &Worker{job: job, cfg: cfg, node: node, ckpts: cs, lock: lock, log: lg, events: make(chan Event, 64),
		registered: map[taskid.ID]bool{}, killAt: kp, closeLog: (*store.Log).Close,
		syncLog: (*store.Log).Sync, appendLog: (*store.Log).Append}
	return w, nil
}

// Addr is the node's transport address.
func (w *Worker) Addr() string { return w.node.Addr() }

// Events delivers task failures.
func (w *Worker) Events() <-chan Event { return w.events }

// logDir is the directory of source task id's log.
func (w *Worker) logDir(id taskid.ID) string {
	return filepath.Join(w.cfg.Dir, "log", "task-"+id.String())
}

// abort cancels the running generation: its sources stop and its tasks'
// sends return, so that whatever waits on them ends. Safe for concurrent
// use with every other method; Stop or Start then tear it down.
func (w *Worker) abort() {
	if inc := w.inc.Load(); inc != nil {
		inc.cancel()
	}
}

// Close stops the tasks and the node, and lets go of the directory.
func (w *Worker) Close() {
	w.abort()
	w.mu.Lock()
	defer w.mu.Unlock()
	if inc := w.inc.Swap(nil); inc != nil {
		w.stopLocked(inc)
	}
	w.node.Abort()
	if w.lock != nil {
		w.lock.Close()
		w.lock = nil
	}
}

// TransportFaults returns the faults the node injected.
func (w *Worker) TransportFaults() transport.FaultStats { return w.node.Stats().Faults }

// StartCmd starts a generation of the job's tasks on a worker.
type StartCmd struct {
	Gen uint64 `json:"gen"`
	// Node is the worker's own node, one that Addrs names.
	Node int `json:"node"`
	// Addrs is the transport address of each node, every node of the job.
	Addrs []string `json:"addrs"`
	// Placement is the node of each task, in job order; each one that
	// Addrs names.
	Placement []int `json:"placement"`
	// Restore is the checkpoint to restore stateful tasks from; with
	// HasRestore false they start empty.
	Restore    int64 `json:"restore"`
	HasRestore bool  `json:"has_restore"`
	// Target is the first checkpoint time, Horizon the bound on sources.
	Target  int64 `json:"target"`
	Horizon int64 `json:"horizon"`
}

// incarnation is one generation of the tasks on this worker.
type incarnation struct {
	w          *Worker
	gen        uint64
	ctx        context.Context
	cancel     context.CancelFunc
	agg        aggregator
	horizon    atomic.Int64
	tasks      map[taskid.ID]*taskRun
	sources    []*sourceRun
	outs       []*outputs
	wg         sync.WaitGroup
	tickerDone chan struct{}
	ticking    atomic.Bool // tick was started: stop waits for tickerDone
	running    bool
}

// check says what is wrong with cmd for a job of the tasks ids: Node and
// every node of Placement must be one that Addrs names, and Placement must
// place every task. The command comes from the network (ServeWorker).
func (cmd *StartCmd) check(ids []taskid.ID) error {
	nodes := len(cmd.Addrs)
	if nodes == 0 {
		return errors.New("engine: start: the command's Addrs name no node; they must name every node of the job")
	}
	if cmd.Node < 0 || cmd.Node >= nodes {
		return fmt.Errorf("engine: start: the command is for node %d; its Addrs name nodes 0 to %d", cmd.Node, nodes-1)
	}
	if len(cmd.Placement) != len(ids) {
		return fmt.Errorf("engine: start: placement names %d tasks, the job has %d", len(cmd.Placement), len(ids))
	}
	for i, n := range cmd.Placement {
		if n < 0 || n >= nodes {
			return fmt.Errorf("engine: start: placement puts task %v on node %d; the command's Addrs name nodes 0 to %d", ids[i], n, nodes-1)
		}
	}
	return nil
}

// Start stops the running generation, if any, and starts gen: stateful
// tasks restored from the checkpoint, channels opened with epoch gen,
// sources replaying their logs from the checkpoint's timestamp. The
// checkpoints after the restore point are discarded only once every
// stateful task has restored: a start that cannot load one keeps them. A command
// that does not fit the job (a placement of another length, a node that
// its Addrs do not name) is refused with an error before anything is
// stopped: the running generation goes on. Once a source log of this
// worker has failed to close (its fsync failed), every Start fails with
// that error: the log can no longer back exactly-once. So does every Start
// of a later worker on the directory once an fsync of a source log failed
// (the log keeps the failure on disk, store.ErrSyncFailed), even if the
// process that saw it died before telling anyone: both wrap
// ErrSourceLogLost.
func (w *Worker) Start(cmd StartCmd) error {
	ids := w.job.tasks()
	if err := cmd.check(ids); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.inc.Swap(nil); old != nil {
		w.stopLocked(old)
	}
	if w.lostLog != nil {
		return fmt.Errorf("engine: worker refuses to start generation %d: %w", cmd.Gen, w.lostLog)
	}
	ctx, cancel := context.WithCancel(context.Background())
	inc := &incarnation{w: w, gen: cmd.Gen, ctx: ctx, cancel: cancel, tasks: map[taskid.ID]*taskRun{},
		tickerDone: make(chan struct{})}
	inc.horizon.Store(cmd.Horizon)
	where := map[taskid.ID]int{}
	single := true
	for i, id := range ids {
		where[id] = cmd.Placement[i]
		single = single && cmd.Placement[i] == cmd.Node
	}
	// With every task in this process, and no transport faults to inject,
	// edges are chained, like Flink's operator chaining: the sending task
	// calls the target's handler directly on its own goroutine, and the
	// transport hop (copy into the window, batch, two syscalls, inbox,
	// ack) is saved. Measured on 2 cores, that hop costs more than the
	// second core it could bring. With several nodes every edge keeps the
	// transport, so that channels, epochs and acks behave the same across
	// processes and within one.
	chain := func(outEdge) bool { return single && !w.cfg.Faults.Enabled() && !w.cfg.NoChain }
	restoreTs := int64(math.MinInt64)
	if cmd.HasRestore {
		restoreTs = cmd.Restore
	}
	fail := func(err error) error {
		w.inc.CompareAndSwap(inc, nil)
		return errors.Join(err, w.stopLocked(inc))
	}
	for _, id := range ids {
		if where[id] != cmd.Node {
			continue
		}
		proc := w.job.Procs[id.Processor]
		edges := w.job.outEdges(int(id.Processor))
		sends := make([][]*transport.Sender, len(edges))
		// Until the task's outputs are in inc.outs, which stop closes, its
		// senders are closed here if it cannot start: an open one stays in
		// its peer, opened again on every reconnect, for the node's life.
		failTask := func(err error) error {
			for _, ss := range sends {
				for _, s := range ss {
					if s != nil {
						_ = s.Close()
					}
				}
			}
			return fail(err)
		}
		// Two edges to one processor reach each of its tasks on one
		// channel: one sender, whose acknowledgements outputs count once.
		opened := map[taskid.ID]*transport.Sender{}
		for e, ed := range edges {
			sends[e] = make([]*transport.Sender, 0, ed.n)
			for t := range ed.n {
				if chain(ed) {
					sends[e] = append(sends[e], nil)
					continue
				}
				tid := taskid.ID{Processor: uint32(ed.proc), Index: uint32(t)}
				if s := opened[tid]; s != nil {
					sends[e] = append(sends[e], s)
					continue
				}
				peer, err := w.node.Peer(cmd.Addrs[where[tid]])
				if err != nil {
					return failTask(err)
				}
				s, err := peer.OpenSenderEpoch(ctx, id, tid, cmd.Gen)
				if err != nil {
					return failTask(err)
				}
				opened[tid] = s
				sends[e] = append(sends[e], s)
			}
		}
		if proc.NewSource != nil {
			src, err := proc.NewSource(int(id.Index))
			if err != nil {
				return failTask(fmt.Errorf("engine: source %v: %w", id, err))
			}
			if src == nil {
				return failTask(errNilProcessor(proc.Name, "NewSource", id, "source"))
			}
			sr := &sourceRun{inc: inc, id: id, src: src, restore: restoreTs}
			sr.pendingDelete.Store(math.MinInt64)
			low := int64(0)
			if cmd.HasRestore {
				low = max(cmd.Restore, 0)
			}
			sr.out = newOutputs(edges, sends, &inc.agg, low)
			inc.outs = append(inc.outs, sr.out)
			lg, err := store.Open(w.logDir(id), store.Options{NoSync: w.cfg.NoSync, SegmentBytes: w.cfg.LogSegmentBytes})
			if errors.Is(err, store.ErrSyncFailed) {
				// A worker before this one on the directory (a process
				// that died before its coordinator heard of it) failed
				// to make the log durable.
				err = fmt.Errorf("%w: source %q task %v: %w", ErrSourceLogLost, proc.Name, id, err)
			}
			if err != nil {
				return fail(err)
			}
			sr.log = lg
			inc.sources = append(inc.sources, sr)
			continue
		}
		t, err := w.newTaskRun(inc, id, proc, cmd, restoreTs)
		if err != nil {
			return failTask(err)
		}
		t.out = newOutputs(edges, sends, &inc.agg, clock.Idle)
		t.sink = len(edges) == 0
		inc.outs = append(inc.outs, t.out)
		inc.tasks[id] = t
	}
	for _, o := range inc.outs {
		for e, ss := range o.sends {
			for t, snd := range ss {
				if snd == nil {
					o.chained[e][t] = inc.tasks[taskid.ID{Processor: uint32(o.edges[e].proc), Index: uint32(t)}]
				}
			}
		}
	}
	// Only now that every stateful task has restored are the checkpoints
	// after the restore point discarded: a start that fails to load one
	// leaves them, and the coordinator may choose one of them next.
	if err := w.ckpts.DiscardAfter(restoreTs, statefulNames(inc)...); err != nil {
		return fail(err)
	}
	w.inc.Store(inc)
	for id := range inc.tasks {
		if !w.registered[id] {
			if err := w.node.Handle(id, w.dispatch(id)); err != nil {
				return fail(err)
			}
			w.registered[id] = true
		}
	}
	inc.ticking.Store(true)
	go inc.tick()
	return nil
}

// Run starts the sources of generation gen. The coordinator calls it once
// every worker has started gen, so that no task receives data of a
// generation it does not run yet (it would drop it).
func (w *Worker) Run(gen uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	inc, err := w.current(gen)
	if err != nil {
		return err
	}
	if inc.running {
		return nil
	}
	inc.running = true
	for _, sr := range inc.sources {
		inc.wg.Add(1)
		go sr.run()
	}
	return nil
}

func (w *Worker) newTaskRun(inc *incarnation, id taskid.ID, proc Proc, cmd StartCmd, restoreTs int64) (*taskRun, error) {
	task, err := proc.NewTask(int(id.Index))
	if err != nil {
		return nil, fmt.Errorf("engine: task %v: %w", id, err)
	}
	if task == nil {
		return nil, errNilProcessor(proc.Name, "NewTask", id, "task")
	}
	t := &taskRun{inc: inc, id: id, task: task, restore: restoreTs, target: cmd.Target, persisted: restoreTs}
	st, ok := task.(Stateful)
	if !ok {
		return t, nil
	}
	t.state = st
	name := ckptName(id)
	if cmd.HasRestore {
		// The checkpoints after cmd.Restore are discarded once every task
		// of this worker has restored (see Start).
		b, err := w.ckpts.Load(name, cmd.Restore)
		if err != nil {
			return nil, err
		}
		if err := st.Restore(b); err != nil {
			return nil, fmt.Errorf("engine: restoring %v: %w", id, err)
		}
	}
	cp, err := proc.NewTask(int(id.Index))
	if err != nil {
		return nil, err
	}
	if cp == nil {
		return nil, errNilProcessor(proc.Name, "NewTask", id, "task")
	}
	cst, ok := cp.(Stateful)
	if !ok {
		return nil, fmt.Errorf("engine: task %v: a second instance is not Stateful", id)
	}
	t.ckpt, t.ckptState = cp, cst // copied when a message reaches cmd.Target
	return t, nil
}

// errNilProcessor is the error of a constructor, ctor of processor name,
// that returned neither a source or task (what) nor an error for task id:
// a defect of the job that no restart mends, so it wraps ErrInvalidJob,
// which ends the run at once.
func errNilProcessor(name, ctor string, id taskid.ID, what string) error {
	return fmt.Errorf("%w: processor %q: %s(%d) returned a nil %s and no error (task %v)",
		ErrInvalidJob, name, ctor, id.Index, what, id)
}

// dispatch is the transport handler of task id: it hands runs of the
// current generation to the task and drops older ones.
func (w *Worker) dispatch(id taskid.ID) transport.Handler {
	return func(ch taskid.Channel, _ uint64, msgs []transport.Message) {
		inc := w.inc.Load()
		if inc == nil || ch.Epoch != inc.gen {
			return
		}
		if t := inc.tasks[id]; t != nil {
			t.handle(msgs)
		}
	}
}

func (inc *incarnation) failed(id taskid.ID, err error) {
	inc.w.log.Warn("engine: task failed", "task", id.String(), "gen", inc.gen, "err", err)
	select {
	case inc.w.events <- Event{Gen: inc.gen, Task: id.String(), Err: err.Error(), LogLost: errors.Is(err, ErrSourceLogLost)}:
	default:
	}
}

// tick pops acknowledged runs every millisecond so clocks advance while
// tasks are idle.
func (inc *incarnation) tick() {
	defer close(inc.tickerDone)
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-inc.ctx.Done():
			return
		case <-t.C:
			for _, o := range inc.outs {
				o.tick()
			}
		}
	}
}

// errLogLost is the error of source task id whose log lg may have lost
// records: doing what to it failed with err.
func (w *Worker) errLogLost(id taskid.ID, lg *store.Log, what string, err error) error {
	return fmt.Errorf("%w: source %q task %v: %s failed (its log %s), so the records it holds may not be on disk and cannot be replayed exactly once: %w",
		ErrSourceLogLost, w.job.Procs[id.Processor].Name, id, what, lg.Dir(), err)
}

// stopLocked stops inc and keeps the first failure to close a source log
// in w.lostLog. w.mu must be held.
func (w *Worker) stopLocked(inc *incarnation) error {
	err := inc.stop()
	if err != nil {
		w.log.Error("engine: a source log failed to close; the worker starts no further generation", "gen", inc.gen, "err", err)
		if w.lostLog == nil {
			w.lostLog = fmt.Errorf("%w: %w", ErrSourceLogLost, err)
		}
	}
	return err
}

// stop ends the generation: sources stop, handlers return, channels close,
// and the source logs are closed, which fsyncs them. It returns the errors
// of closing the logs.
func (inc *incarnation) stop() error {
	inc.cancel()
	inc.wg.Wait()
	if inc.ticking.Load() {
		<-inc.tickerDone
	}
	for _, t := range inc.tasks {
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
	}
	for _, o := range inc.outs {
		o.closeSenders()
	}
	var errs []error
	for _, s := range inc.sources {
		s.deleting.Wait()
		if s.log == nil {
			continue
		}
		if err := inc.w.closeLog(s.log); err != nil {
			errs = append(errs, fmt.Errorf("engine: source %q task %v: closing its log %s failed, so the records it holds may not be on disk and cannot be replayed exactly once: %w",
				inc.w.job.Procs[s.id.Processor].Name, s.id, s.log.Dir(), err))
		}
	}
	return errors.Join(errs...)
}

// ClockReply is a worker's answer to a clock round.
type ClockReply struct {
	Gen       uint64 `json:"gen"`
	Min       int64  `json:"min"`
	Crashes   int64  `json:"crashes"`
	Processed int64  `json:"processed"`
	Late      int64  `json:"late"`
	Filtered  int64  `json:"filtered"`
	// WireBytes is what the worker's transport node wrote to its sockets
	// since it started, framing and control frames included.
	WireBytes int64 `json:"wire_bytes"`
	// DataFrames and CtrlFrames are the frames of the kinds transport
	// faults drop that the node wrote since it started
	// ([transport.ConnStats]).
	DataFrames int64 `json:"data_frames"`
	CtrlFrames int64 `json:"ctrl_frames"`
}

// Clock returns the least clock of the worker's tasks in generation gen.
func (w *Worker) Clock(gen uint64) (ClockReply, error) {
	t := w.node.Stats().Totals()
	r := ClockReply{Gen: gen, Crashes: w.crashes.Load(), Processed: w.processed.Load(),
		Late: w.late.Load(), Filtered: w.filtered.Load(), WireBytes: int64(t.WireOut),
		DataFrames: int64(t.DataFrames), CtrlFrames: int64(t.CtrlFrames)}
	inc := w.inc.Load()
	if inc == nil || inc.gen != gen {
		return r, fmt.Errorf("engine: worker is not running generation %d", gen)
	}
	r.Min = inc.agg.min()
	return r, nil
}

var errStale = errors.New("engine: stale generation")

func (w *Worker) current(gen uint64) (*incarnation, error) {
	inc := w.inc.Load()
	if inc == nil || inc.gen != gen {
		return nil, fmt.Errorf("%w: worker is not running generation %d", errStale, gen)
	}
	return inc, nil
}

// Checkpoint persists every stateful task's checkpoint copy at tc (when
// persist is set) and fsyncs the source logs, then makes next the tasks'
// new checkpoint time. Sources must not have read at or beyond next. A
// source log that fails to sync fails it with an error wrapping
// ErrSourceLogLost, and every later Start with it (see Start).
func (w *Worker) Checkpoint(gen uint64, persist bool, tc, next int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	inc, err := w.current(gen)
	if err != nil {
		return err
	}
	if persist {
		for _, s := range inc.sources {
			if err := w.syncLog(s.log); err != nil {
				// The log refuses every later Append and Sync, and every
				// later Open of its directory: no recovery can replay it.
				err = w.errLogLost(s.id, s.log, "syncing it", err)
				if w.lostLog == nil {
					w.lostLog = err
				}
				return err
			}
		}
		w.reached("checkpoint-after-log-sync")
	}
	for _, t := range inc.tasks {
		if err := t.checkpoint(persist, tc, next); err != nil {
			return err
		}
	}
	if persist {
		w.reached("checkpoint-after-save")
	}
	return nil
}

// Horizon lets sources read below h.
func (w *Worker) Horizon(gen uint64, h int64) error {
	inc, err := w.current(gen)
	if err != nil {
		return err
	}
	inc.horizon.Store(h)
	return nil
}

// Commit tells sources that no checkpoint older than keep will ever be
// restored: their log segments older than keep are deleted, and so are
// the stateful tasks' checkpoints older than keep. The coordinator passes
// the oldest checkpoint that recovery may still choose, not the newest,
// which a corrupt file can make unusable.
func (w *Worker) Commit(gen uint64, keep int64) error {
	inc, err := w.current(gen)
	if err != nil {
		return err
	}
	w.reached("commit")
	for _, s := range inc.sources {
		s.pendingDelete.Store(keep)
	}
	return w.ckpts.DiscardBefore(keep, statefulNames(inc)...)
}

// statefulNames returns the checkpoint names of inc's stateful tasks.
func statefulNames(inc *incarnation) []string {
	var names []string
	for id, t := range inc.tasks {
		if t.state != nil {
			names = append(names, ckptName(id))
		}
	}
	return names
}

// Crash makes task panic at its next step.
func (w *Worker) Crash(gen uint64, task taskid.ID) error {
	inc, err := w.current(gen)
	if err != nil {
		return err
	}
	if t := inc.tasks[task]; t != nil {
		t.crash.Store(true)
		return nil
	}
	for _, s := range inc.sources {
		if s.id == task {
			s.crash.Store(true)
			return nil
		}
	}
	return fmt.Errorf("engine: task %v is not on this worker", task)
}

// Finish collects the results of the tasks and sources that implement
// [Finisher], by task id string.
func (w *Worker) Finish(gen uint64) (map[string][]byte, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	inc, err := w.current(gen)
	if err != nil {
		return nil, err
	}
	res := map[string][]byte{}
	for id, t := range inc.tasks {
		t.mu.Lock()
		f, ok := t.task.(Finisher)
		var b []byte
		if ok && !t.failed {
			b, err = f.Finish()
		}
		bad := t.failed
		t.mu.Unlock()
		if bad {
			return nil, fmt.Errorf("engine: task %v failed before finishing", id)
		}
		if err != nil {
			return nil, fmt.Errorf("engine: finishing %v: %w", id, err)
		}
		if ok {
			res[id.String()] = b
		}
	}
	for _, s := range inc.sources {
		s.mu.Lock()
		f, ok := s.src.(Finisher)
		var b []byte
		if ok {
			b, err = f.Finish()
		}
		s.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("engine: finishing %v: %w", s.id, err)
		}
		if ok {
			res[s.id.String()] = b
		}
	}
	return res, nil
}

// Stop stops the running generation. It aborts the generation before it
// waits for the control call in progress, which may be waiting on it. A
// source log that fails to close makes every later Start fail (see Start).
func (w *Worker) Stop() {
	w.abort()
	w.mu.Lock()
	defer w.mu.Unlock()
	if inc := w.inc.Swap(nil); inc != nil {
		w.stopLocked(inc) // kept in w.lostLog: the next Start fails with it
	}
}

// Common returns every checkpoint, newest first, that every named task has
// on this node and that loads.
func (w *Worker) Common(tasks []string) ([]int64, error) {
	return w.ckpts.Common(tasks)
}

// removeAll deletes dir's contents (a fresh job).
func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
