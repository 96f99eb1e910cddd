package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/transport"
)

// outputFlags are the flags every command that writes a report shares.
type outputFlags struct {
	json bool
	out  string
}

func (o *outputFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the report as one JSON object on the last line of stdout")
	fs.StringVar(&o.out, "out", filepath.Join("results", "local"), "directory for report.json, report.md, latency.hgrm and the SVG charts")
}

// check makes sure the --out directory can be made and written, so that
// one that cannot take the report is refused before a run rather than found
// at its end, the run lost. It creates nothing: it writes a file, and
// removes it, in the directory or in the nearest of its parents that
// exists.
func (o *outputFlags) check() error {
	dir := o.out
	if dir == "" {
		return nil
	}
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if !fi.IsDir() {
				return fmt.Errorf("--out %s: %s is not a directory", o.out, dir)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			return fmt.Errorf("--out %s: %w", o.out, err)
		}
		dir = filepath.Dir(dir)
	}
	f, err := os.CreateTemp(dir, ".loadgen-check-*")
	if err != nil {
		return fmt.Errorf("--out %s: %w", o.out, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: loadgen %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		printDefaults(fs)
	}
	return fs
}

// hiddenUsage is the usage of a flag that -h leaves out (hideFlags).
const hiddenUsage = "\x00hidden"

// hideFlags leaves the named flags out of fs's -h: flags a command gets
// with a group it shares with others (transportConfig, engineConfig) but
// refuses itself, with an error that says why, so that -h lists only what
// the command takes.
func hideFlags(fs *flag.FlagSet, names ...string) {
	for _, n := range names {
		fs.Lookup(n).Usage = hiddenUsage
	}
}

// setDefault makes v the default of the flag name, in what -h prints as
// well as in the value: a command that shares a flag group with others
// and wants another default for one of them.
func setDefault(fs *flag.FlagSet, name, v string) error {
	f := fs.Lookup(name)
	if err := f.Value.Set(v); err != nil {
		return err
	}
	f.DefValue = v
	return nil
}

// printDefaults is fs.PrintDefaults without the hidden flags.
func printDefaults(fs *flag.FlagSet) {
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage != hiddenUsage {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue
		}
	})
	shown.PrintDefaults()
}

// scenarioFlags names the flags that mean something to some scenarios
// only, with those scenarios. run and coordinate refuse such a flag given
// for another scenario (checkScenarioFlags) rather than ignore it, so that
// a report never records a setting that did not apply.
var scenarioFlags = func() map[string][]string {
	m := map[string][]string{}
	add := func(scenarios []string, names ...string) {
		for _, n := range names {
			m[n] = scenarios
		}
	}
	transport, engine := []string{"transport"}, []string{"wordcount", "pipeline"}
	// The transport scenario's load and delivery, and coordinate's run
	// of it.
	add(transport, "rate", "channels", "connections", "consume-rate", "producers", "delivery",
		"topology", "messages", "start-delay", "heartbeat-timeout", "clock-correction")
	// What the transport scenario sends and the pipeline generates.
	add([]string{"transport", "pipeline"}, "size", "duration")
	add([]string{"wordcount"}, "input", "output")
	add(engine, "nodes", "data-dir", "start-over", "checkpoint-every", "parallelism", "max-restarts", "fsync", "chain", "expect-recoveries")
	return m
}()

// checkScenarioFlags refuses the flags set in fs that scenarioFlags gives
// to scenarios other than scenario; cmd names the command in the error.
func checkScenarioFlags(cmd, scenario string, fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if in, ok := scenarioFlags[f.Name]; ok && err == nil && !slices.Contains(in, scenario) {
			err = fmt.Errorf("%s: --%s is for --scenario %s, not %s", cmd, f.Name, strings.Join(in, " or "), scenario)
		}
	})
	return err
}

// validate refuses the engine flags no engine run takes, rather than let
// the engine put a default in their place while the report records them.
func (c *engineConfig) validate() error {
	switch {
	case c.nodes < 1:
		return fmt.Errorf("--nodes must be >= 1, got %d", c.nodes)
	case c.parallelism < 1:
		return fmt.Errorf("--parallelism must be >= 1, got %d", c.parallelism)
	case c.ckptEvery <= 0:
		return fmt.Errorf("--checkpoint-every must be positive, got %v", c.ckptEvery)
	case c.maxRestarts < 0:
		return fmt.Errorf("--max-restarts must not be negative, got %d", c.maxRestarts)
	}
	return nil
}

// checkEngineRun checks the flags of an engine scenario's run.
func checkEngineRun(scenario string, ec engineConfig, tc transportConfig) error {
	if err := ec.validate(); err != nil {
		return err
	}
	if scenario == "pipeline" && tc.duration <= 0 {
		return fmt.Errorf("--duration must be positive, got %v", tc.duration)
	}
	if scenario == "wordcount" {
		if ec.input == "" || ec.output == "" {
			return errors.New("wordcount needs --input and --output")
		}
		// Here, not when the source opens it: a path that is wrong is a
		// mistake in the command, which no restart of the source mends.
		// (The check at the end counts the input again here, also when
		// coordinate runs the source on an agent.)
		if err := readableInput(ec.input); err != nil {
			return fmt.Errorf("--input: %w", err)
		}
	}
	return nil
}

// readableInput says why the file at path cannot be read, or nil.
func readableInput(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 1)); err != nil && err != io.EOF { // a directory opens, and fails here
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "Runs a scenario and reports what it measured.\n"+
		"Scenarios:\n"+
		"  pipeline   source -> processor -> sink of --size-byte messages for --duration, with checkpoints,\n"+
		"             checked against per-key sums: is the pipeline exactly-once? (the default)\n"+
		"  transport  two transport nodes over loopback sockets: throughput, latency, loss, duplicates\n"+
		"  wordcount  counts the words of --input into --output, identical under any --faults\n"+
		"A flag of another scenario is refused, not ignored: --size and --duration are for transport and\n"+
		"pipeline, --input and --output for wordcount, the flags marked \"engine scenarios\" for pipeline\n"+
		"and wordcount, and --rate, --channels, --connections, --consume-rate, --producers and --delivery\n"+
		"for transport.\n"+
		"Interrupted (Ctrl-C, SIGTERM), a transport run reports what it measured, after waiting for the receiver to\n"+
		"acknowledge what was sent unless interrupted again; an engine run cannot (the engine reports only a\n"+
		"completed job) and says how to resume it with --data-dir. Either exits with status 1.", stderr)
	scenario := fs.String("scenario", "pipeline", "scenario to run: pipeline, transport or wordcount")
	var sec nodeFlags
	sec.register(fs)
	sec.registerMetrics(fs)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	memProfile := fs.String("memprofile", "", "write a heap profile to this file when the run ends (go tool pprof reads it)")
	var out outputFlags
	out.register(fs)
	var tc transportConfig
	tc.register(fs)
	var ec engineConfig
	ec.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	switch *scenario {
	case "transport", "wordcount", "pipeline":
	default:
		return fmt.Errorf("run: unknown scenario %q (want transport, wordcount or pipeline)", *scenario)
	}
	if err := checkScenarioFlags("run", *scenario, fs); err != nil {
		return err
	}
	if *scenario != "transport" {
		if err := checkEngineRun(*scenario, ec, tc); err != nil {
			return fmt.Errorf("run: %w", err)
		}
	}
	if *scenario == "transport" {
		if err := tc.validate(); err != nil {
			return err
		}
	}
	if err := out.check(); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if err := sec.startMetrics(ctx, stderr); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var (
		report *bench.Report
		rec    *bench.Recorder
		err    error
	)
	switch *scenario {
	case "transport":
		fmt.Fprintf(stderr, "loadgen: transport scenario: %d-byte messages, %s, rate %s, %d channel(s), %d connection(s)%s\n",
			tc.size, tc.duration, rateString(tc.rate), tc.channels, tc.connections, faultString(tc.faults))
		var opts []transport.Option
		if opts, err = sec.options(); err != nil {
			return err
		}
		report, rec, err = runTransport(ctx, tc, stdout, stderr, opts...)
	case "wordcount":
		report, rec, err = runWordCountScenario(ctx, ec, tc, sec, stderr)
	case "pipeline":
		report, rec, err = runPipelineScenario(ctx, ec, tc, sec, stderr)
	}
	if err != nil {
		return err
	}
	if report.Config != nil {
		report.Config["socket_buffer"] = sec.socketBuffer
		report.Config["peer_budget"] = sec.peerBudget
	}
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	return finishReport(report, rec, out, stdout, stderr)
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func rateString(r float64) string {
	if r == 0 {
		return "as fast as possible"
	}
	return fmt.Sprintf("%.0f msgs/s", r)
}

func faultString(f string) string {
	if f == "" {
		return ""
	}
	return ", faults " + f
}

// finishReport writes the report files, prints the summary, and the JSON
// line when asked. It returns errFailed when exactly-once did not hold or
// the report lists failures.
func finishReport(r *bench.Report, rec *bench.Recorder, out outputFlags, stdout, stderr io.Writer) error {
	if out.out != "" {
		if err := os.MkdirAll(out.out, 0o755); err != nil {
			return err
		}
		if err := bench.WriteDir(out.out, r, rec); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteMarkdown(stdout, r); err != nil {
		return err
	}
	if out.out != "" {
		fmt.Fprintf(stdout, "\nReport files: %s\n", out.out)
	}
	if out.json {
		if err := bench.WriteJSON(stdout, r); err != nil {
			return err
		}
	}
	if r.ExactlyOnce != nil && !*r.ExactlyOnce {
		return fmt.Errorf("%w: %s", errFailed, r.ExactlyOnceStatement())
	}
	if len(r.Failures) > 0 {
		return fmt.Errorf("%w: %s", errFailed, strings.Join(r.Failures, "; "))
	}
	return nil
}
