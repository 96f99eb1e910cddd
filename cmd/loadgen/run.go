package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"

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

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: loadgen %s [flags]\n\n%s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "Runs a scenario and reports what it measured.\n"+
		"Scenarios:\n"+
		"  pipeline   source -> processor -> sink of --size-byte messages for --duration, with checkpoints,\n"+
		"             checked against per-key sums: is the pipeline exactly-once? (the default)\n"+
		"  transport  two transport nodes over loopback sockets: throughput, latency, loss, duplicates\n"+
		"  wordcount  counts the words of --input into --output, identical under any --faults", stderr)
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
		if err := tc.validate(); err != nil {
			return err
		}
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
	default:
		return fmt.Errorf("run: unknown scenario %q (want transport, wordcount or pipeline)", *scenario)
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
// line when asked. It returns errFailed when exactly-once did not hold.
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
	return nil
}
