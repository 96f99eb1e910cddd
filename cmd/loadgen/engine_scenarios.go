package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/journal"
	"github.com/sluicehq/sluice/internal/durable"
	"github.com/sluicehq/sluice/transport"
)

// engineConfig holds the flags of the engine scenarios (wordcount,
// pipeline); --size, --duration, --faults and --seed come from the
// transport scenario's flags.
type engineConfig struct {
	input       string
	output      string
	nodes       int
	dir         string
	ckptEvery   time.Duration
	parallelism int
	maxRestarts int
	sync        bool
	chain       bool
	startOver   bool
	// expectRecoveries accepts recoveries in a run without crash or kill
	// faults (checkRecoveries).
	expectRecoveries bool
	// agents, when set (by coordinate), places node i on agent i mod
	// len(agents.agents) instead of in a child process.
	agents *agentLauncher
}

func (c *engineConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.input, "input", "", "wordcount: the text file to count")
	fs.StringVar(&c.output, "output", "", "wordcount: where to write word<TAB>count lines")
	fs.IntVar(&c.nodes, "nodes", 1, "engine scenarios: OS processes to place tasks in (1: this process)")
	fs.StringVar(&c.dir, "data-dir", "", "engine scenarios: directory for the coordinator's journal, source logs and checkpoints (default: a temporary one);\n"+
		"a directory that holds the same job resumes it from its last completed checkpoint")
	fs.BoolVar(&c.startOver, "start-over", false, "engine scenarios: discard what --data-dir holds instead of resuming it or refusing another job's;\n"+
		"coordinate first has the agents remove that job's workers' logs and checkpoints, and fails, discarding nothing, when one cannot")
	fs.DurationVar(&c.ckptEvery, "checkpoint-every", time.Second, "engine scenarios: wall time between checkpoints")
	fs.IntVar(&c.parallelism, "parallelism", 2, "engine scenarios: tasks of each processor after the source")
	fs.IntVar(&c.maxRestarts, "max-restarts", 100, "engine scenarios: recoveries allowed per minute before the run fails (0: none)")
	fs.BoolVar(&c.sync, "fsync", true, "engine scenarios: fsync logs and checkpoints")
	fs.BoolVar(&c.expectRecoveries, "expect-recoveries", false, "engine scenarios: a run without crash= or kill= faults may recover (a task that fails on its own) and still pass")
	fs.BoolVar(&c.chain, "chain", true, "engine scenarios: with --nodes 1 and no transport faults, hand messages between tasks by direct calls instead of the transport")
}

// chained says whether the engine chains the job's edges instead of using
// the transport: one node, no transport faults, --chain.
func (c *engineConfig) chained(tc transportConfig) bool {
	f, _, _, err := engineFaults(tc.faults, tc.seed)
	return err == nil && c.chain && c.nodes <= 1 && !f.Enabled()
}

// engineFaults splits --faults into transport faults and the engine's
// crash= and kill= periods.
func engineFaults(s string, seed uint64) (f transport.Faults, crash, kill time.Duration, err error) {
	f, rest, err := transport.ParseFaults(s, seed)
	if err != nil {
		return f, 0, 0, err
	}
	for _, kv := range rest {
		k, v, _ := strings.Cut(kv, "=")
		if k != "crash" && k != "kill" {
			return f, 0, 0, fmt.Errorf("unknown fault %q (want drop, ctrldrop, dup, reset, delay, jitter, bw, ge, partition, crash or kill)", k)
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return f, 0, 0, fmt.Errorf("fault %s: %w", k, err)
		}
		if k == "crash" {
			crash = d
		} else {
			kill = d
		}
	}
	return f, crash, kill, nil
}

// runEngine runs spec on the engine and returns the coordinator's result.
func runEngine(ctx context.Context, spec jobs.Spec, ec engineConfig, tc transportConfig, sec nodeFlags, initial int64,
	rec *bench.Recorder, prog **bench.Progress, stderr io.Writer) (*engine.Result, time.Duration, error) {
	f, crash, kill, err := engineFaults(tc.faults, tc.seed)
	if err != nil {
		return nil, 0, err
	}
	if kill > 0 && ec.nodes < 2 {
		return nil, 0, errors.New("the kill fault needs --nodes 2 or more (it kills worker processes)")
	}
	jc := newJobConfig(spec, ec.agents != nil)
	if ec.dir != "" && !ec.startOver {
		adoptJournaled(ec.dir, &jc)
	}
	spec = jc.Spec
	jobConf, err := json.Marshal(jc)
	if err != nil {
		return nil, 0, err
	}
	var lat jobs.Latency
	if rec != nil {
		lat = rec.RecordN
	}
	job, err := buildJob(spec, lat)
	if err != nil {
		return nil, 0, err
	}
	dir := ec.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sluice-engine-"); err != nil {
			return nil, 0, err
		}
		defer os.RemoveAll(dir)
	}
	topts, err := sec.options()
	if err != nil {
		return nil, 0, err
	}
	cfg := engine.Config{
		Transport: topts,
		Nodes:     ec.nodes, Dir: dir, JobConfig: jobConf, StartOver: ec.startOver, CheckpointEvery: ec.ckptEvery, InitialInterval: initial,
		// A job with transport faults keeps its edges on the transport
		// (the engine would not chain them either), also when a test has
		// injectFaults leave them out.
		Faults: injectFaults(f), NoSync: !ec.sync, NoChain: !ec.chain || f.Enabled(),
		Restart: engine.RestartPolicy{MaxRestarts: ec.maxRestarts, Window: time.Minute, MinBackoff: 10 * time.Millisecond, MaxBackoff: time.Second},
	}
	if ec.maxRestarts == 0 { // the engine's 0 is its default
		cfg.Restart.MaxRestarts = engine.NoRestarts
	}
	nodeFaults := func(node int) transport.Faults {
		nf := injectFaults(f)
		nf.Seed += uint64(node) * 0x9e3779b97f4a7c15
		if node > 0 {
			nf.Reset = 0
		}
		return nf
	}
	if l := ec.agents; l != nil {
		l.job, l.fsync = jc.AgentJob, ec.sync
		l.spec, _ = json.Marshal(spec)
		l.faults = func(node int) (string, uint64) {
			nf := nodeFaults(node)
			return faultsArg(nf), nf.Seed
		}
		cfg.Launch = l.Launch
	} else if ec.nodes > 1 {
		exe, err := os.Executable()
		if err != nil {
			return nil, 0, err
		}
		specJSON, _ := json.Marshal(spec)
		cfg.Spawn = func(node int, listen string) (*exec.Cmd, error) {
			nf := nodeFaults(node)
			args := []string{"node", "--spec", string(specJSON), "--dir", filepath.Join(dir, fmt.Sprintf("node%d", node)),
				"--faults", faultsArg(nf), "--seed", strconv.FormatUint(nf.Seed, 10), "--fsync=" + strconv.FormatBool(ec.sync)}
			if listen != "" {
				args = append(args, "--listen", listen)
			}
			args = append(args, sec.args()...)
			cmd := exec.Command(exe, args...)
			cmd.Stderr = stderr
			return cmd, nil
		}
	}
	var c *engine.Coordinator
	cfg.OnEvent = func(kind, detail string) {
		if *prog != nil {
			(*prog).Mark(kind, detail)
		}
	}
	c, err = engine.NewCoordinator(job, cfg)
	if err != nil {
		return nil, 0, err
	}
	if ec.startOver && ec.dir != "" {
		// Now, while the journal the coordinator discards still names the
		// previous job on the agents.
		if err := dropPreviousJob(ctx, ec.agents, ec.dir, !ec.sync, stderr); err != nil {
			return nil, 0, err
		}
	}
	defer metricsHub.add(c)()
	*prog = bench.NewProgress(stderr, c.Processed(), rec)
	start := time.Now()
	(*prog).Start()
	stop := startChaos(c, crash, kill, tc.seed)
	res, err := c.Run(ctx)
	stop()
	elapsed := time.Since(start)
	(*prog).Stop()
	var kept []string // the agents that still hold a job nothing resumes
	if l := ec.agents; l != nil && (err == nil || ec.dir == "") {
		// Run returns once every worker has exited.
		kept = dropAgentJob(abortOf(ctx), l, err == nil, ec.dir, stderr)
	}
	if err != nil && ctx.Err() != nil {
		err = engineInterrupted(spec.Kind, elapsed, ec.dir, jc.AgentJob, kept)
	}
	return res, elapsed, err
}

// dropAgentJob has the agents remove the directories of l's job, which can
// no longer be resumed: it completed, or it ended and its journal was in
// a temporary directory (dir ""). A completed job's journal in dir goes
// too: resumed, it would restore checkpoints and replay logs that are
// gone, where the same command now runs the job afresh. What fails is a
// warning, not a failed run; it returns the agents that keep the job.
func dropAgentJob(ctx context.Context, l *agentLauncher, completed bool, dir string, stderr io.Writer) (kept []string) {
	failed := l.dropJob(ctx)
	for a, err := range failed {
		kept = append(kept, a)
		fmt.Fprintf(stderr, "loadgen coordinate: warning: the workers' logs and checkpoints of job %s, which nothing will resume, are left on agent %s, in %s under its --data-dir (remove it there): %v\n",
			l.job, a, l.job, err)
	}
	slices.Sort(kept)
	if completed && dir != "" {
		if err := os.Remove(filepath.Join(dir, engine.JournalFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "loadgen coordinate: warning: the journal of job %s, whose workers' data is gone from the agents, is left in %s (remove it, or give --start-over next time): %v\n",
				l.job, dir, err)
		}
	}
	return kept
}

// dropPreviousJob has l's agents drop the job whose journal dir holds, which
// --start-over is about to discard: the journal is the only record of the
// job's name on the agents, so once it is gone nothing could ever drop the
// logs and checkpoints the job's workers keep there. It asks every agent
// of this run (the previous job's are not recorded: with the same
// --agents, they are these), an agent that never held the job answers as
// one that dropped it, and a job that ran no worker on agents, or no
// journal, asks nothing.
//
// An agent that fails to drop the job (unreachable, a worker of the job
// still runs there) fails the start-over before anything is discarded, with
// a *startOverError: the journal stays, so that the same command, run
// again, drops the job where it is left; dropping is idempotent. Warning
// and starting over instead would forget the job's name, leaving its data
// for good, which is what this is for; and an unreachable agent would fail
// the new job anyway, after its start-over. So would a journal another
// coordinator has open: that is refused here, before its job is dropped,
// and the journal stays locked while the agents drop it, so that no
// coordinator resumes it meanwhile. Without l (loadgen run), nothing can
// reach the agents: a previous job that ran on them is a warning.
func dropPreviousJob(ctx context.Context, l *agentLauncher, dir string, noSync bool, stderr io.Writer) error {
	who := "loadgen coordinate"
	if l == nil {
		who = "loadgen run"
	}
	path := filepath.Join(dir, engine.JournalFile)
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	j, err := journal.Open(path, journal.Options{NoSync: noSync})
	var st journal.State
	switch {
	case errors.Is(err, journal.ErrLocked):
		return err
	case err != nil:
		// A damaged journal, which the start-over discards: its job
		// record, the first, may still be intact.
		st, _ = journal.Read(path)
	default:
		defer j.Close()
		st = j.State()
	}
	var prev jobConfig
	if st.Job == nil || json.Unmarshal(st.Job.Config, &prev) != nil {
		if err != nil {
			fmt.Fprintf(stderr, "%s: warning: --start-over discards %s, whose job cannot be read (%v): if it ran on agents, its workers' logs and checkpoints stay there, in a job-<id> directory under their --data-dir\n",
				who, path, err)
		}
		return nil
	}
	if prev.AgentJob == "" {
		return nil
	}
	if err := (&control.WorkerPlan{Version: control.Version, Job: prev.AgentJob}).ValidateDrop(); err != nil {
		fmt.Fprintf(stderr, "%s: warning: the job --start-over discards from %s names its directories on the agents %q, which no drop takes (%v): they stay on the agents\n",
			who, dir, prev.AgentJob, err)
		return nil
	}
	if l == nil {
		fmt.Fprintf(stderr, "%s: warning: the job --start-over discards from %s ran its workers on agents, which this command does not reach: their logs and checkpoints stay there, in %s under each agent's --data-dir (remove it there)\n",
			who, dir, prev.AgentJob)
		return nil
	}
	nodes := make([]int, len(l.agents))
	for i := range nodes {
		nodes[i] = i
	}
	if failed := l.drop(ctx, prev.AgentJob, nodes); len(failed) > 0 {
		e := &startOverError{Dir: dir, Job: prev.AgentJob, Failed: failed}
		for _, a := range l.agents {
			if failed[a] == nil {
				e.Dropped = append(e.Dropped, a)
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w before the job started: %w", errInterrupted, e)
		}
		return e
	}
	fmt.Fprintf(stderr, "%s: --start-over: the agents dropped job %s, the previous job in %s\n", who, prev.AgentJob, dir)
	if st.Job.Nodes != len(l.agents) {
		fmt.Fprintf(stderr, "%s: warning: job %s, the previous job in %s, ran %d workers, on agents of its own --agents; only these %d were asked to drop it, and one it ran on that is not among them keeps its logs and checkpoints in %s under its --data-dir (remove it there)\n",
			who, prev.AgentJob, dir, st.Job.Nodes, len(l.agents), prev.AgentJob)
	}
	return nil
}

// startOverError is a --start-over refused before it discarded anything:
// agents failed to drop the previous job in Dir, Job on the agents.
type startOverError struct {
	Dir, Job string
	Failed   map[string]error // by agent
	Dropped  []string         // the agents that dropped it
}

func (e *startOverError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "--start-over: job %s, the previous job in %s, could not be dropped on every agent: ", e.Job, e.Dir)
	for i, err := range e.Unwrap() {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	fmt.Fprintf(&b, "; nothing was discarded: its journal stays in %s, so that this command, run again once those agents can drop the job, drops it where it is left", e.Dir)
	if len(e.Dropped) > 0 {
		fmt.Fprintf(&b, " (it is gone from %s already, so it can no longer be resumed)", strings.Join(e.Dropped, ", "))
	}
	fmt.Fprintf(&b, "; to start over anyway, leaving its workers' logs and checkpoints in %s under the --data-dir of the agents named, remove %s",
		e.Job, filepath.Join(e.Dir, engine.JournalFile))
	return b.String()
}

// Unwrap returns why each agent failed, in the order of their addresses.
func (e *startOverError) Unwrap() []error {
	agents := slices.Sorted(maps.Keys(e.Failed))
	errs := make([]error, len(agents))
	for i, a := range agents {
		errs[i] = e.Failed[a]
	}
	return errs
}

// engineInterrupted is the error of an engine run whose context ended
// (Ctrl-C, SIGTERM) before its job completed. Unlike the transport
// scenario's, such a run cannot report what it measured: the engine gives
// the sinks' results, which the exactly-once check needs, only for a
// completed job. What it can say is where its data is and how to resume
// the job: from dir, the coordinator's --data-dir ("": a temporary one);
// agentJob names its workers' directories on the agents ("": the workers
// ran here), kept lists the agents that failed to remove theirs.
func engineInterrupted(kind string, elapsed time.Duration, dir, agentJob string, kept []string) error {
	var resume string
	switch {
	case dir != "" && agentJob != "":
		resume = fmt.Sprintf("run it again with --data-dir %s to resume the job from its last completed checkpoint; its journal is there, "+
			"its workers' logs and checkpoints stay on the agents, in %s under each agent's --data-dir (an agent without one keeps them until it stops)",
			dir, agentJob)
	case dir != "":
		resume = fmt.Sprintf("run it again with --data-dir %s to resume the job from its last completed checkpoint", dir)
	case agentJob != "" && len(kept) == 0:
		resume = fmt.Sprintf("its data was in temporary directories, now removed: its journal here, its workers' logs and checkpoints (%s) on the agents "+
			"(give --data-dir to keep an interrupted job and resume it)", agentJob)
	case agentJob != "":
		resume = fmt.Sprintf("its journal was in a temporary directory, now removed, so nothing can resume it; its workers' logs and checkpoints (%s) were removed on the agents "+
			"but %s, which failed to (see the warnings above), and still hold them (give --data-dir to keep an interrupted job and resume it)",
			agentJob, strings.Join(kept, ", "))
	default:
		resume = "its data was in a temporary directory, now removed (give --data-dir to keep an interrupted job and resume it)"
	}
	return fmt.Errorf("%s %w after %.1f s, before its job completed: the engine reports only a completed job, so there is no report; %s",
		kind, errInterrupted, elapsed.Seconds(), resume)
}

// jobConfig is what the coordinator's journal records of a loadgen job:
// its spec; for an input file, its size and modification time (where the
// coordinator can see it), so that a changed input is another job, never
// resumed; and, for workers on agents, the job's name there.
type jobConfig struct {
	Spec       jobs.Spec `json:"spec"`
	InputSize  int64     `json:"input_size,omitempty"`
	InputModNs int64     `json:"input_mod_ns,omitempty"`
	AgentJob   string    `json:"agent_job,omitempty"`
}

func newJobConfig(spec jobs.Spec, onAgents bool) jobConfig {
	jc := jobConfig{Spec: spec}
	if spec.Input != "" {
		if fi, err := os.Stat(spec.Input); err == nil {
			jc.InputSize, jc.InputModNs = fi.Size(), fi.ModTime().UnixNano()
		}
	}
	if onAgents {
		// Random for a new job, kept by one that resumes
		// (adoptJournaled).
		jc.AgentJob = control.NewJobID()
	}
	return jc
}

// adoptJournaled makes jc the job dir's journal holds when that job is jc
// but for what a new run picks afresh: a pipeline generates until a
// wall-clock deadline set from --duration when it first starts, and a job
// on agents has a new name there; a resumed run continues the job,
// deadline and name included. Anything else (no journal, another job, a
// damaged journal) is the coordinator's to report.
func adoptJournaled(dir string, jc *jobConfig) {
	st, err := journal.Read(filepath.Join(dir, engine.JournalFile))
	if err != nil || st.Job == nil {
		return
	}
	var have jobConfig
	if json.Unmarshal(st.Job.Config, &have) != nil || (have.AgentJob == "") != (jc.AgentJob == "") {
		return
	}
	same := have
	same.Spec.DeadlineNs, same.AgentJob = jc.Spec.DeadlineNs, jc.AgentJob
	if same == *jc {
		*jc = have
	}
}

func faultsArg(f transport.Faults) string { return f.String() }

// buildJob builds the job of spec (jobs.Build), but in tests that make a
// task fail on its own.
var buildJob = jobs.Build

// startChaos starts the crash and kill faults (chaos), but in tests that
// check what a run says when they never happened.
var startChaos = chaos

// engineReport starts the report of an engine run of tc's faults: its
// counts, and the faults configured that never happened though the run gave
// them the chance, and recoveries nothing injected (Failures).
func engineReport(scenario string, cfg map[string]any, res *engine.Result, elapsed time.Duration, prog *bench.Progress, ec engineConfig, tc transportConfig) *bench.Report {
	r := bench.NewReport(scenario, cfg)
	r.DurationS = elapsed.Seconds()
	r.Checkpoints = res.Checkpoints
	r.Recoveries = res.Recoveries
	r.WireBytes = res.WireBytes
	f, crash, kill, _ := engineFaults(tc.faults, tc.seed) // runEngine checked them
	m := faultMap(f, res.Transport)
	if m == nil {
		m = map[string]int64{}
	}
	if res.Crashes > 0 || crash > 0 {
		m["crash"] = res.Crashes
	}
	if res.Kills > 0 || kill > 0 {
		m["kill"] = res.Kills
	}
	// Killed workers restart with their nodes' clocks at zero: the timed
	// transport faults (reset, partition) are checked only without kills.
	ran := elapsed
	if kill > 0 {
		ran = 0
	}
	chances := faultChances{dataFrames: res.DataFrames, ctrlFrames: res.CtrlFrames, ran: ran}
	r.Failures = append(checkTransportFaults(f, res.Transport, chances), checkChaos(crash, kill, res.Crashes, res.Kills, elapsed)...)
	r.Failures = append(r.Failures, checkRecoveries(crash, kill, res.Recoveries, ec.expectRecoveries)...)
	if n := chancesNote(f, chances); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if len(m) > 0 {
		r.Faults = m
	}
	r.Timeline = prog.Samples()
	r.Events = prog.Events()
	if rs := res.Resumed; rs != nil {
		r.Config["resumed"] = true
		from := "the start of its sources' logs (no checkpoint had completed)"
		if rs.HasCheckpoint {
			r.Config["resumed_from_checkpoint"] = rs.Checkpoint
			from = fmt.Sprintf("its checkpoint at timestamp %d", rs.Checkpoint)
		}
		r.Notes = append(r.Notes, fmt.Sprintf("resumed the job an earlier run left in its data directory (%d generations, %d checkpoints journaled) from %s, with generation %d; "+
			"the results cover the whole job, the duration, rates and timeline this run only", rs.Generations, rs.Checkpoints, from, rs.Gen))
	}
	r.Recovery = bench.NewRecovery(res.RecoveryTimes, res.LostTimes)
	if res.Late > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d messages reached a task below a completed checkpoint", res.Late))
	}
	return r
}

func runWordCountScenario(ctx context.Context, ec engineConfig, tc transportConfig, sec nodeFlags, stderr io.Writer) (*bench.Report, *bench.Recorder, error) {
	spec := jobs.Spec{Kind: "wordcount", Input: ec.input, Middle: ec.parallelism, Last: ec.parallelism}
	var prog *bench.Progress
	res, elapsed, err := runEngine(ctx, spec, ec, tc, sec, 4096, nil, &prog, stderr)
	if err != nil {
		return nil, nil, err
	}
	counts, err := jobs.MergeCounts(res.Results)
	if err != nil {
		return nil, nil, err
	}
	if err := durable.WriteFile(ec.output, true, func(w io.Writer) error { return jobs.WriteCounts(w, counts) }); err != nil {
		return nil, nil, err
	}
	var words int64
	for _, v := range counts {
		words += v
	}
	// The check: an independent count of the input (jobs.ReferenceCounts
	// shares no code with the job's path).
	in, err := os.Open(ec.input)
	if err != nil {
		return nil, nil, err
	}
	want, err := jobs.ReferenceCounts(in)
	in.Close()
	if err != nil {
		return nil, nil, err
	}
	var wantWords int64
	for _, v := range want {
		wantWords += v
	}
	lost, dup, diff := jobs.CompareCounts(counts, want)
	// The output file is what the user gets: read it back and hold it
	// against the independent count too, so that a count lost or changed
	// on its way to the file fails the check as one lost in the job does.
	written, err := readCountsFile(ec.output)
	if err != nil {
		return nil, nil, err
	}
	wlost, wdup, wdiff := jobs.CompareCounts(written, want)
	lost, dup = max(lost, wlost), max(dup, wdup)
	for _, d := range wdiff {
		diff = append(diff, "in "+ec.output+": "+d)
	}
	r := engineReport("wordcount", map[string]any{"input": ec.input, "output": ec.output, "nodes": ec.nodes,
		"faults": tc.faults, "seed": tc.seed, "parallelism": ec.parallelism, "checkpoint_every": ec.ckptEvery.String()}, res, elapsed, prog, ec, tc)
	r.MessagesSent = wantWords
	r.MessagesDelivered = words
	r.Lost, r.Duplicates = lost, dup
	ok := lost == 0 && dup == 0
	r.ExactlyOnce = &ok
	r.Finish(nil)
	r.Notes = append(r.Notes, fmt.Sprintf("%d distinct words, %d words, written to %s; an independent count of the input has %d distinct words, %d words",
		len(counts), words, ec.output, len(want), wantWords))
	for _, d := range diff {
		r.Notes = append(r.Notes, "differs from the independent count: "+d)
	}
	return r, nil, nil
}

// readCountsFile reads the word<TAB>count lines word count wrote, with
// nothing of jobs.WriteCounts: a word at most once, every line ending in a
// newline, counts positive.
func readCountsFile(path string) (map[string]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	if len(b) == 0 {
		return m, nil
	}
	if b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%s: the last line has no newline (a truncated file?)", path)
	}
	for i, line := range strings.Split(string(b[:len(b)-1]), "\n") {
		w, c, ok := strings.Cut(line, "\t")
		n, perr := strconv.ParseInt(c, 10, 64)
		if !ok || w == "" || perr != nil || n <= 0 {
			return nil, fmt.Errorf("%s: line %d is not word<TAB>count: %q", path, i+1, line)
		}
		if _, dup := m[w]; dup {
			return nil, fmt.Errorf("%s: word %q on two lines", path, w)
		}
		m[w] = n
	}
	return m, nil
}

func runPipelineScenario(ctx context.Context, ec engineConfig, tc transportConfig, sec nodeFlags, stderr io.Writer) (*bench.Report, *bench.Recorder, error) {
	rec := bench.NewRecorder()
	if ec.nodes > 1 || ec.agents != nil {
		rec = nil // the sinks run in other processes
	}
	spec := jobs.Spec{Kind: "pipeline", Size: tc.size, DeadlineNs: jobs.Now() + int64(tc.duration), Keys: 64,
		Middle: ec.parallelism, Last: ec.parallelism}
	var prog *bench.Progress
	res, elapsed, err := runEngine(ctx, spec, ec, tc, sec, 1<<17, rec, &prog, stderr)
	if err != nil {
		return nil, nil, err
	}
	chk, err := jobs.CheckPipeline(res.Results, spec.Keys)
	if err != nil {
		return nil, nil, err
	}
	r := engineReport("pipeline", map[string]any{"size": tc.size, "duration": tc.duration.String(), "nodes": ec.nodes,
		"faults": tc.faults, "seed": tc.seed, "parallelism": ec.parallelism, "checkpoint_every": ec.ckptEvery.String(),
		"fsync": ec.sync, "chained": ec.chained(tc)}, res, elapsed, prog, ec, tc)
	r.MessagesSent = chk.Generated
	r.MessagesDelivered = chk.Delivered
	r.Lost, r.Duplicates = chk.Lost, chk.Duplicated
	ok := chk.Lost == 0 && chk.Duplicated == 0
	r.ExactlyOnce = &ok
	if !ok {
		r.Notes = append(r.Notes, "the sinks' records differ from what the source generated: "+chk.Diff)
	}
	r.Finish(rec)
	r.ThroughputBytesPerS = r.ThroughputMsgsPerS * float64(tc.size)
	if rec == nil {
		r.Notes = append(r.Notes, "latency is not recorded with --nodes > 1")
	}
	return r, rec, nil
}
