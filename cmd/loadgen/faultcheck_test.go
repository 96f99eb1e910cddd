package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

// withoutInjection makes the runs of the test inject no transport fault and
// start no crash or kill, whatever --faults says.
func withoutInjection(t *testing.T) {
	inject, start := injectFaults, startChaos
	injectFaults = func(f transport.Faults) transport.Faults { return transport.Faults{Seed: f.Seed} }
	startChaos = func(*engine.Coordinator, time.Duration, time.Duration, uint64) func() { return func() {} }
	t.Cleanup(func() { injectFaults, startChaos = inject, start })
}

// runReport runs loadgen with args and returns its error and what it
// printed.
func runReport(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	err := run(context.Background(), append(args, "--out", t.TempDir()), &out, &strings.Builder{})
	return out.String(), err
}

// framesNote is the note in which a report says how many frames its
// transport faults had to act on.
var framesNote = regexp.MustCompile(`had (\d+) DATA frames and (\d+) ACKREQUEST, ACK, PING and PONG frames`)

// runLongEnough calls run with duration d, and again with twice the
// duration while the report it returns says its nodes wrote too few frames
// for the faults drop and dup (probabilities; 0: not configured) to be
// expected minExpected times each: as many as the fault check wants before
// it fails a run that had none, and enough that a run with the injector on
// has some (a run with none is then e^-50 likely). How many frames a run
// writes in a given time depends on the machine: a slow or busy one batches
// more messages a frame (under -race on a core shared with two CPU-bound
// processes, a 1 s transport run at 20,000 messages a second wrote 125
// DATA frames, not the 1,000 that drop=0.05 needs, and a 1.5 s pipeline
// run 63). It returns the last run's report and error.
func runLongEnough(t *testing.T, d time.Duration, drop, dup float64, run func(d time.Duration) (string, error)) (string, error) {
	t.Helper()
	for {
		out, err := run(d)
		m := framesNote.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("a run of %v: the report does not say how many frames the faults had to act on (error %v):\n%s", d, err, out)
		}
		data, _ := strconv.ParseFloat(m[1], 64)
		ctrl, _ := strconv.ParseFloat(m[2], 64)
		// Dup draws for the frames drop spared.
		if (drop == 0 || drop*data >= minExpected) && (dup == 0 || dup*((1-drop)*data+ctrl) >= minExpected) {
			return out, err
		}
		if d >= 30*time.Second {
			t.Fatalf("a run of %v wrote %.0f DATA and %.0f control frames, too few to expect %d faults of drop=%g, dup=%g: the check cannot be tested",
				d, data, ctrl, minExpected, drop, dup)
		}
		t.Logf("a run of %v wrote %.0f DATA and %.0f control frames, too few to expect %d faults of drop=%g, dup=%g: again, twice as long",
			d, data, ctrl, minExpected, drop, dup)
		d *= 2
	}
}

// A transport run whose configured faults never happened (the injector
// switched off) fails, saying which and how many were expected, and its
// report counts them as 0; a run with the injector on passes, and counts
// them. Each runs until its nodes wrote enough frames for the faults to be
// expected (runLongEnough); the run without injection configures high
// rates, so that few frames do.
func TestATransportRunWhoseFaultsNeverHappenedFails(t *testing.T) {
	transportRun := func(faults string) func(time.Duration) (string, error) {
		return func(d time.Duration) (string, error) {
			return runReport(t, "run", "--scenario", "transport", "--faults", faults, "--rate", "20000", "--channels", "4", "--duration", d.String())
		}
	}
	out, err := runLongEnough(t, time.Second, 0.3, 0.3, transportRun("drop=0.3,dup=0.3"))
	if err != nil {
		t.Fatalf("with the injector on: %v\n%s", err, out)
	}
	for _, k := range []string{"| drop |", "| dup |"} {
		if !strings.Contains(out, k) || strings.Contains(out, k+" 0 |") {
			t.Errorf("with the injector on, the report counts no %s fault:\n%s", k, out)
		}
	}

	withoutInjection(t)
	out, err = runLongEnough(t, time.Second, 0.9, 0.9, transportRun("drop=0.9,dup=0.9"))
	if !errors.Is(err, errFailed) {
		t.Fatalf("with the injector off: error %v, want errFailed\n%s", err, out)
	}
	for _, want := range []string{
		"**Exactly-once held",
		"**The run FAILED: drop=0.9 was configured and no DATA frame was dropped, of ",
		"**The run FAILED: dup=0.9 was configured and no frame was duplicated, of ",
		"| drop | 0 |", "| dup | 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("with the injector off, the report does not say %q:\n%s", want, out)
		}
	}
	if !strings.Contains(err.Error(), "drop=0.9 was configured") {
		t.Errorf("error %q does not name the fault", err)
	}
}

// An engine run whose configured crashes and link faults never happened
// fails, naming each; with them injected it passes. Each runs until its
// nodes wrote enough frames for the drops to be expected (runLongEnough),
// and for 1.5 s at least, over three crash periods.
func TestAnEngineRunWhoseFaultsNeverHappenedFails(t *testing.T) {
	// A crash every 200 ms or so makes up to 300 a minute, beyond the
	// default restart policy's 100 once a slow machine's run lasts 20 s.
	pipelineRun := func(faults string) func(time.Duration) (string, error) {
		return func(d time.Duration) (string, error) {
			return runReport(t, "run", "--scenario", "pipeline", "--faults", faults, "--duration", d.String(), "--fsync=false", "--max-restarts", "10000")
		}
	}
	out, err := runLongEnough(t, 1500*time.Millisecond, 0.3, 0, pipelineRun("crash=200ms,drop=0.3"))
	if err != nil {
		t.Fatalf("with the injector on: %v\n%s", err, out)
	}
	for _, k := range []string{"| crash |", "| drop |"} {
		if !strings.Contains(out, k) || strings.Contains(out, k+" 0 |") {
			t.Errorf("with the injector on, the report counts no %s fault:\n%s", k, out)
		}
	}

	withoutInjection(t)
	out, err = runLongEnough(t, 1500*time.Millisecond, 0.9, 0, pipelineRun("crash=200ms,drop=0.9"))
	if !errors.Is(err, errFailed) {
		t.Fatalf("with the injector off: error %v, want errFailed\n%s", err, out)
	}
	for _, want := range []string{
		"**The run FAILED: crash=200ms was configured and no task crashed in ",
		"**The run FAILED: drop=0.9 was configured and no DATA frame was dropped, of ",
		"| crash | 0 |", "| drop | 0 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("with the injector off, the report does not say %q:\n%s", want, out)
		}
	}
}

// The check fails a kind only when it had the chance: at least minExpected
// expected, or a reset or partition due well inside the run; and never a
// kind that happened.
func TestFaultCheckFailsOnlyFaultsThatHadTheirChance(t *testing.T) {
	f := transport.Faults{Drop: 0.05, CtrlDrop: 0.1, Reset: time.Second, PartitionAt: time.Second, PartitionFor: 2 * time.Second}
	for _, c := range []struct {
		name string
		s    transport.FaultStats
		ch   faultChances
		want []string // the kinds that fail, by their prefix
	}{
		{"999 DATA frames: 49.95 drops expected", transport.FaultStats{CtrlDropped: 1}, faultChances{dataFrames: 999}, nil},
		{"1,000 DATA frames: 50 drops expected", transport.FaultStats{CtrlDropped: 1}, faultChances{dataFrames: 1000}, []string{"drop="}},
		{"500 control frames", transport.FaultStats{DataDropped: 1}, faultChances{ctrlFrames: 500}, []string{"ctrldrop="}},
		{"every kind happened", transport.FaultStats{DataDropped: 1, CtrlDropped: 1, Resets: 1, PartitionHeld: 1},
			faultChances{dataFrames: 1e6, ctrlFrames: 1e6, ran: time.Hour}, nil},
		{"a run of 3.9 s: the reset was due by 4 s", transport.FaultStats{DataDropped: 1, CtrlDropped: 1},
			faultChances{ran: 3900 * time.Millisecond}, nil},
		{"a run of 5 s: the partition heals at 3 s", transport.FaultStats{DataDropped: 1, CtrlDropped: 1},
			faultChances{ran: 5 * time.Second}, []string{"reset=", "partition="}},
		{"timed faults unchecked (ran 0)", transport.FaultStats{DataDropped: 1, CtrlDropped: 1}, faultChances{}, nil},
	} {
		got := checkTransportFaults(f, c.s, c.ch)
		ok := len(got) == len(c.want)
		for i := 0; ok && i < len(got); i++ {
			ok = strings.HasPrefix(got[i], c.want[i])
		}
		if !ok {
			t.Errorf("%s: failures %q, want those of %q", c.name, got, c.want)
		}
	}
	if got := checkChaos(time.Second, 0, 0, 0, 2999*time.Millisecond); got != nil {
		t.Errorf("no crash in a run of 2.999 periods: %q, want no failure", got)
	}
	if got := checkChaos(time.Second, time.Second, 0, 1, 3*time.Second); len(got) != 1 || !strings.HasPrefix(got[0], "crash=1s") {
		t.Errorf("no crash and a kill in a run of 3 periods: %q, want the crash's failure", got)
	}
}

// failingOnce is a stateful sink task whose first batch, of all its
// incarnations, fails.
type failingOnce struct {
	task interface {
		engine.Task
		engine.Stateful
		engine.Finisher
	}
	failed *atomic.Bool
}

func (f failingOnce) Process(in []engine.Message, out *engine.Emitter) error {
	if len(in) > 0 && f.failed.CompareAndSwap(false, true) {
		return errors.New("the test's task fails once")
	}
	return f.task.Process(in, out)
}
func (f failingOnce) Snapshot(dst []byte) ([]byte, error) { return f.task.Snapshot(dst) }
func (f failingOnce) Restore(b []byte) error              { return f.task.Restore(b) }
func (f failingOnce) Finish() ([]byte, error)             { return f.task.Finish() }

// A run with no crash or kill fault whose task failed on its own (once) is
// not reported as plainly held: it fails, saying so, unless
// --expect-recoveries accepts it.
func TestARecoveryNothingInjectedFailsTheRun(t *testing.T) {
	build := buildJob
	t.Cleanup(func() { buildJob = build })
	var failed atomic.Bool
	buildJob = func(spec jobs.Spec, lat jobs.Latency) (*engine.Job, error) {
		job, err := build(spec, lat)
		if err != nil {
			return nil, err
		}
		last := &job.Procs[len(job.Procs)-1]
		newTask := last.NewTask
		last.NewTask = func(i int) (engine.Task, error) {
			task, err := newTask(i)
			if err != nil || i != 0 {
				return task, err
			}
			st, ok := task.(interface {
				engine.Task
				engine.Stateful
				engine.Finisher
			})
			if !ok {
				return nil, fmt.Errorf("the sink %T is not a stateful finisher", task)
			}
			return failingOnce{st, &failed}, nil
		}
		return job, nil
	}
	args := []string{"run", "--scenario", "pipeline", "--duration", "1s", "--fsync=false"}
	out, err := runReport(t, args...)
	if !failed.Load() {
		t.Fatal("the task never failed")
	}
	if !errors.Is(err, errFailed) {
		t.Fatalf("error %v, want errFailed\n%s", err, out)
	}
	for _, want := range []string{"**Exactly-once held", "**The run FAILED: 1 recovery though no crash or kill fault was configured: a task failed on its own", "| recoveries | 1 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}

	failed.Store(false)
	out, err = runReport(t, append(args, "--expect-recoveries")...)
	if err != nil || !failed.Load() || strings.Contains(out, "FAILED") || !strings.Contains(out, "| recoveries | 1 |") {
		t.Errorf("--expect-recoveries: error %v, the task failed %v; want one recovery and a run that passes\n%s", err, failed.Load(), out)
	}
}

// A sweep whose configured faults never happened in one of its runs fails
// as 'loadgen run' does, naming the run and the fault.
func TestASweepWhoseFaultsNeverHappenedFails(t *testing.T) {
	withoutInjection(t)
	out, err := runLongEnough(t, time.Second, 0.9, 0, func(d time.Duration) (string, error) {
		var stdout, stderr strings.Builder
		err := sweepCmd(context.Background(), []string{"--sizes", "100", "--channel-counts", "4", "--faults", "drop=0.9",
			"--rate", "20000", "--duration", d.String(), "--json", "--out", t.TempDir()}, &stdout, &stderr)
		return stdout.String(), err
	})
	if !errors.Is(err, errFailed) {
		t.Fatalf("sweep with the injector off: error %v, want errFailed\n%s", err, out)
	}
	if want := "100 bytes, 4 channels: drop=0.9 was configured and no DATA frame was dropped"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
