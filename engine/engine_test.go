package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

// writeText writes lines of random words (with repeats, odd spacing and
// some non-ASCII) and returns the path.
func writeText(t *testing.T, lines int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	words := []string{"the", "a", "sluice", "gate", "water", "flow", "über", "naïve", "x", "y", "z", "exactly", "once"}
	var b strings.Builder
	for i := range lines {
		n := rng.IntN(12)
		for j := range n {
			if j > 0 {
				b.WriteString([]string{" ", "  ", "\t"}[rng.IntN(3)])
			}
			w := words[rng.IntN(len(words))]
			if rng.IntN(20) == 0 {
				w = fmt.Sprintf("w%d", rng.IntN(500))
			}
			b.WriteString(w)
		}
		if i%17 == 0 {
			b.WriteString("   ")
		}
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runGuard is how long a test lets a job under injected faults run before
// it calls it hung. Such a job ends in 1-10 s on an idle machine, but faults
// at fixed periods slow a loaded one more than in proportion, each recovery
// or redial a larger share of its time: on a third of one core, "all faults
// together" took over 20 s, and under the race detector (whose fault
// periods are stretched by slow) "reset connections are redialed" took 96.
const runGuard = 3 * time.Minute

// runGuarded runs c, failing t with the coordinator's stats if it has not
// ended within runGuard.
func runGuarded(t *testing.T, c *engine.Coordinator) (*engine.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runGuard)
	defer cancel()
	res, err := c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("the job had not ended after %v, a hang guard (%v); the coordinator's stats: %+v", runGuard, err, c.Stats())
	}
	return res, err
}

func runWordCount(t *testing.T, input string, cfg engine.Config, f faults) (*engine.Result, map[string]int64) {
	t.Helper()
	job := jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input, Middle: 2, Last: 2})
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "data")
	}
	cfg.NoSync = true
	c, err := engine.NewCoordinator(job, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer chaos(c, f)()
	res, err := runGuarded(t, c)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	got, err := jobs.MergeCounts(res.Results)
	if err != nil {
		t.Fatal(err)
	}
	return res, got
}

func reference(t *testing.T, input string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.ReferenceCounts(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameCounts(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d distinct words, want %d", len(got), len(want))
	}
	n := 0
	for k, v := range want {
		if got[k] != v {
			if n++; n <= 5 {
				t.Errorf("word %q: got %d, want %d", k, got[k], v)
			}
		}
	}
}

func TestWordCountEqualsReferenceWithoutFaults(t *testing.T) {
	input := writeText(t, 20000, 1)
	res, got := runWordCount(t, input, engine.Config{InitialInterval: 500}, faults{})
	sameCounts(t, got, reference(t, input))
	if res.Checkpoints == 0 {
		t.Errorf("no checkpoint was taken")
	}
	if res.Late != 0 {
		t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
	}
	t.Logf("checkpoints %d recoveries %d", res.Checkpoints, res.Recoveries)
}

func TestWordCountSurvivesCrashes(t *testing.T) {
	// Crashes come far enough apart that recovery (a few to tens of
	// milliseconds) outpaces them even on a loaded machine, and the
	// policy allows as many as they can make in its window, however long
	// a slow machine makes the run.
	input := writeText(t, 400000, 2)
	crash := 100 * slow * time.Millisecond
	res, got := runWordCount(t, input, engine.Config{InitialInterval: 500, CheckpointEvery: 10 * time.Millisecond, Restart: ampleRestarts(crash)},
		faults{crash: crash, seed: 3})
	sameCounts(t, got, reference(t, input))
	if res.Recoveries == 0 || res.Crashes == 0 {
		t.Errorf("recoveries %d crashes %d: the fault was not exercised", res.Recoveries, res.Crashes)
	}
	t.Logf("checkpoints %d recoveries %d crashes %d filtered %d", res.Checkpoints, res.Recoveries, res.Crashes, res.Filtered)
}

func TestRestartPolicyExhaustionIsAClearError(t *testing.T) {
	input := writeText(t, 200000, 3)
	job := jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input})
	c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true,
		Restart: engine.RestartPolicy{MaxRestarts: 2, Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	defer chaos(c, faults{crash: 5 * time.Millisecond, eager: true})()
	_, err = c.Run(ctx)
	if !errors.Is(err, engine.ErrRestartsExhausted) {
		t.Fatalf("got %v, want ErrRestartsExhausted", err)
	}
	if !strings.Contains(err.Error(), "injected crash") {
		t.Errorf("error %q does not name the last failure", err)
	}
}

// failingTask fails every message it is given.
type failingTask struct{}

var errAlwaysFails = errors.New("this task always fails")

func (failingTask) Process([]engine.Message, *engine.Emitter) error { return errAlwaysFails }

// TestAPartlyFilledRestartPolicyTakesTheDefaultsOfTheRest: a policy that
// sets only MaxRestarts gets the default window and backoffs, so a job
// whose task always fails is restarted MaxRestarts times (none for
// NoRestarts), then ends with ErrRestartsExhausted naming the task's
// failure. (With a zero window and no backoff it used to restart for ever,
// as fast as it could.)
func TestAPartlyFilledRestartPolicyTakesTheDefaultsOfTheRest(t *testing.T) {
	for _, tc := range []struct{ max, recoveries int32 }{{2, 2}, {engine.NoRestarts, 0}} {
		t.Run(fmt.Sprint("MaxRestarts ", tc.max), func(t *testing.T) {
			job := &engine.Job{
				Procs: []engine.Proc{
					{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
						return &jobs.GenSource{Size: 24, Limit: 1000}, nil
					}},
					{Name: "fail", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return failingTask{}, nil }},
				},
				Edges: []engine.Edge{{From: "gen", To: "fail", Partitioner: engine.Hash}},
			}
			var recoveries atomic.Int32
			c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true,
				Restart: engine.RestartPolicy{MaxRestarts: int(tc.max)},
				OnEvent: func(kind, _ string) {
					if kind == "recovery" {
						recoveries.Add(1)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
			defer cancel()
			_, err = c.Run(ctx)
			if !errors.Is(err, engine.ErrRestartsExhausted) {
				t.Fatalf("run ended with %v after %d recoveries, want ErrRestartsExhausted after %d", err, recoveries.Load(), tc.recoveries)
			}
			if want := fmt.Sprintf("%d failures within 1m0s", tc.recoveries+1); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q: the default window was not applied", err, want)
			}
			if !strings.Contains(err.Error(), errAlwaysFails.Error()) {
				t.Errorf("error %q does not name the task's failure", err)
			}
			if n := recoveries.Load(); n != tc.recoveries {
				t.Errorf("%d recoveries, want the %d the policy allows", n, tc.recoveries)
			}
		})
	}
}

// TestNewCoordinatorRefusesARestartPolicyThatMakesNoSense: negative
// durations and a minimum backoff above the maximum are refused, naming the field.
func TestNewCoordinatorRefusesARestartPolicyThatMakesNoSense(t *testing.T) {
	job := &engine.Job{Procs: []engine.Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (engine.Source, error) { return idleSource{}, nil }}}}
	for _, tc := range []struct {
		name   string
		policy engine.RestartPolicy
		says   string
	}{
		{"a negative Window", engine.RestartPolicy{Window: -time.Second}, "Window is -1s"},
		{"a negative MinBackoff", engine.RestartPolicy{MinBackoff: -time.Millisecond}, "MinBackoff is -1ms"},
		{"a negative MaxBackoff", engine.RestartPolicy{MaxBackoff: -time.Millisecond}, "MaxBackoff is -1ms"},
		{"MinBackoff above MaxBackoff", engine.RestartPolicy{MinBackoff: 2 * time.Second, MaxBackoff: time.Second}, "MinBackoff 2s is above MaxBackoff 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), Restart: tc.policy})
			if !errors.Is(err, engine.ErrInvalidRestartPolicy) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("NewCoordinator returned %v, want ErrInvalidRestartPolicy saying %q", err, tc.says)
			}
		})
	}
}

func TestWordCountExactlyOnceUnderEachFault(t *testing.T) {
	large := writeText(t, 100000, 4)
	want := map[string]map[string]int64{large: reference(t, large)}
	// Faults come by chance per frame or on timers: every case counts an
	// input that takes many frames and several periods even on a fast
	// machine. (A slower one takes longer and sees more faults.)
	cases := []struct {
		name   string
		input  string
		faults string
		crash  time.Duration
		kill   time.Duration
	}{
		{name: "dropped data frames are re-sent", input: large, faults: "drop=0.05"},
		{name: "dropped acks and ack requests are repeated", input: large, faults: "ctrldrop=0.05"},
		{name: "duplicated frames are dropped", input: large, faults: "dup=0.05"},
		{name: "reset connections are redialed", input: large, faults: "reset=20ms"},
		{name: "crashed tasks are recovered from the checkpoint", input: large, crash: 100 * time.Millisecond},
		{name: "killed nodes are restarted and recovered", input: large, kill: 150 * time.Millisecond},
		{name: "all faults together", input: large, faults: "drop=0.02,ctrldrop=0.02,dup=0.02,reset=50ms", crash: 60 * time.Millisecond, kill: 100 * time.Millisecond},
	}
	seeds := []uint64{1, 2}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, tc := range cases {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", tc.name, seed), func(t *testing.T) {
				f, rest, err := transport.ParseFaults(tc.faults, seed)
				if err != nil || len(rest) > 0 {
					t.Fatal(err, rest)
				}
				f.Reset *= slow // as the crash and kill periods are
				res, got := runWordCount(t, tc.input, engine.Config{Nodes: 3, InitialInterval: 300, CheckpointEvery: 10 * time.Millisecond,
					Faults: f, Restart: ampleRestarts(tc.crash*slow, tc.kill*slow)}, faults{crash: tc.crash * slow, kill: tc.kill * slow, seed: seed})
				sameCounts(t, got, want[tc.input])
				if res.Late != 0 {
					t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
				}
				// Every fault asked for happened, or the case proves nothing.
				tr := res.Transport
				for _, c := range []struct {
					kind  string
					asked bool
					n     int64
				}{
					{"dropped data frames", f.Drop > 0, int64(tr.DataDropped)},
					{"dropped control frames", f.CtrlDrop > 0, int64(tr.CtrlDropped)},
					{"duplicated frames", f.Dup > 0, int64(tr.Duplicated)},
					{"connection resets", f.Reset > 0, int64(tr.Resets)},
					{"task crashes", tc.crash > 0, res.Crashes},
					{"node kills", tc.kill > 0, res.Kills},
				} {
					if c.asked && c.n == 0 {
						t.Errorf("no %s were injected: the case did not exercise its fault", c.kind)
					}
				}
				// Two faults may land in one generation, which then
				// recovers once; a fault never causes two recoveries.
				// (With both kinds, a crash that fired on a node killed
				// before it reported is lost from the count.)
				if (tc.crash == 0 || tc.kill == 0) && res.Recoveries > res.Crashes+res.Kills {
					t.Errorf("%d recoveries for %d crashes and %d kills: more than one per failure", res.Recoveries, res.Crashes, res.Kills)
				}
				t.Logf("checkpoints %d recoveries %d crashes %d kills %d transport %+v", res.Checkpoints, res.Recoveries, res.Crashes, res.Kills, res.Transport)
			})
		}
	}
}

func TestPipelineSumsAreExactUnderCrashes(t *testing.T) {
	cases := []struct {
		name    string
		noChain bool
		limit   int64
		crash   time.Duration
	}{
		{name: "with chained tasks", limit: 1000000 / slow, crash: 50 * slow * time.Millisecond},
		{name: "with every edge on the transport", noChain: true, limit: 600000 / slow, crash: 100 * slow * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := jobs.Spec{Kind: "pipeline", Size: 100, Limit: tc.limit, Keys: 16}
			job, err := jobs.Build(spec, nil)
			if err != nil {
				t.Fatal(err)
			}
			c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true, NoChain: tc.noChain,
				InitialInterval: 20000, CheckpointEvery: 20 * time.Millisecond, Restart: ampleRestarts(tc.crash)})
			if err != nil {
				t.Fatal(err)
			}
			defer chaos(c, faults{crash: tc.crash, seed: 9})()
			res, err := runGuarded(t, c)
			if err != nil {
				t.Fatal(err)
			}
			chk, err := jobs.CheckPipeline(res.Results, spec.Keys)
			if err != nil {
				t.Fatal(err)
			}
			if chk.Generated != spec.Limit || chk.Delivered != chk.Generated || chk.Lost != 0 || chk.Duplicated != 0 {
				t.Errorf("%+v", chk)
			}
			if res.Late != 0 {
				t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
			}
			if res.Crashes == 0 {
				t.Errorf("no injected crash fired: the recovery was not exercised")
			}
			t.Logf("checkpoints %d recoveries %d crashes %d", res.Checkpoints, res.Recoveries, res.Crashes)
		})
	}
}

// lateEmitter gives each output a timestamp later than its input's.
type lateEmitter struct{}

func (lateEmitter) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		out.Emit(m.Ts+5, m.Key, m.Payload)
	}
	return nil
}

// A task that gives an output another timestamp than its input's fails,
// saying so, rather than let a later recovery lose the output.
func TestATaskEmittingOutsideItsInputsTimestampsFails(t *testing.T) {
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &jobs.GenSource{Size: 24, Limit: 1000}, nil
			}},
			{Name: "late", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return lateEmitter{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return keepTask{got: make(chan string, 2000)}, nil }},
		},
		Edges: []engine.Edge{{From: "gen", To: "late", Partitioner: engine.RoundRobin}, {From: "late", To: "sink", Partitioner: engine.RoundRobin}},
	}
	c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true, Restart: engine.RestartPolicy{MaxRestarts: engine.NoRestarts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	_, err = c.Run(ctx)
	if !errors.Is(err, engine.ErrRestartsExhausted) || !strings.Contains(err.Error(), "emitted a message with timestamp") {
		t.Fatalf("run ended with %v, want the task's failure for its output's timestamp", err)
	}
}

// eagerSource reads records 0..n-1, as many as it has, whatever limit it
// is given.
type eagerSource struct{ n, next int64 }

func (s *eagerSource) Start(next int64) error { s.next = max(next, 0); return nil }

func (s *eagerSource) Read(dst []engine.Record, _ int64) ([]engine.Record, int64, error) {
	for ; s.next < s.n; s.next++ {
		dst = append(dst, engine.Record{Ts: s.next, Payload: []byte("x")})
	}
	return dst, s.next, io.EOF
}

// A source that reads records at or beyond the limit it was given (the
// horizon, the next checkpoint time) fails, saying so: a stateful task
// would hold such a record in the checkpoint below it, and a recovery to
// that checkpoint would replay the record again. It used to run on, and
// the job came out with a duplicate after such a recovery.
func TestASourceReadingBeyondItsLimitFails(t *testing.T) {
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "eager", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &eagerSource{n: 1000}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (engine.Task, error) { return keepTask{got: make(chan string, 2000)}, nil }},
		},
		Edges: []engine.Edge{{From: "eager", To: "sink", Partitioner: engine.RoundRobin}},
	}
	c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true, InitialInterval: 16,
		Restart: engine.RestartPolicy{MaxRestarts: engine.NoRestarts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	_, err = c.Run(ctx)
	if !errors.Is(err, engine.ErrRestartsExhausted) || !strings.Contains(err.Error(), "at or beyond the limit") {
		t.Fatalf("run ended with %v, want the source's failure for reading beyond its limit", err)
	}
}
