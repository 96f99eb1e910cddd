// Command loadgen measures Sluice: it runs a scenario and reports
// throughput, latency percentiles and whether every message arrived exactly
// once.
//
//	loadgen                      run the default scenario (the exactly-once pipeline) for about 10 s
//	loadgen run [flags]          run a scenario: pipeline, transport or wordcount
//	loadgen sweep [flags]        the transport scenario over message sizes and channel counts
//	loadgen serve [flags]        receive from loadgen send, until interrupted
//	loadgen send [flags]         send to a loadgen serve and wait until it confirms everything
//	loadgen agent [flags]        run parts of a scenario for loadgen coordinate
//	loadgen coordinate [flags]   run a scenario across hosts on agents and merge their reports
//	loadgen stat --node ADDR     show a live table of the counters a --metrics ADDR endpoint serves
//	loadgen bench [flags]        every figure of issue 14 as ratios to baselines measured in the same run
//
// Each command's -h lists its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `loadgen measures Sluice.

Usage:
  loadgen                 run the default scenario (pipeline) for about 10 seconds
  loadgen run   [flags]   run a scenario: pipeline (default), transport or wordcount
  loadgen sweep [flags]   the transport scenario over message sizes and channel counts, charted
  loadgen serve [flags]   receive from 'loadgen send' until interrupted
  loadgen send  [flags]   send to a 'loadgen serve' and wait until it confirms everything
  loadgen agent [flags]   run parts of a scenario for a 'loadgen coordinate' on another host
  loadgen coordinate --agents A,B [flags]   run a scenario across hosts on agents, merge their reports
  loadgen stat  --node ADDR   a live table of the counters a run, serve, send or agent with --metrics ADDR serves
  loadgen node  [flags]   a worker process of a multi-process engine run (started by 'run --nodes N')
  loadgen bench [flags]   check a machine in about three minutes: throughput, fixed-rate latency and ping-pong of both
                          backends, in one process and in two, each as a ratio to plain TCP measured in the same run
  loadgen benchpeer       the second process of 'loadgen bench' (started by it)

Run 'loadgen <command> -h' for the flags of a command.
Reports go to --out (default results/local/): report.json, report.md, latency.hgrm, SVG charts.
With --json the last line on stdout is the report as one JSON object.
`

func main() {
	// The first interrupt ends the run, the second the waits for its
	// report (interrupt.go), the third the process.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, stop := notifyInterrupts(context.Background(), sigs, func() { signal.Stop(sigs) })
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
		}
		os.Exit(exitCode(err))
	}
}

// errFailed means the run completed but its check failed (messages lost or
// repeated, a configured fault that never happened, a recovery nothing
// injected) or was cut short by an interrupt (a transport run still reports
// what it measured); the report says which.
var errFailed = errors.New("the run's check failed")

// errInterrupted means the run was cut short by an interrupt (its context
// ended) and could not report what it measured (an engine scenario); the
// error says what became of the job. Its exit status is a failed run's.
var errInterrupted = errors.New("interrupted")

func exitCode(err error) int {
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errFailed), errors.Is(err, errInterrupted):
		return 1
	}
	return 2
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "loadgen: no command given; running the default scenario (see loadgen -h for the others)")
		return runCmd(ctx, nil, stdout, stderr)
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "serve":
		return serveCmd(ctx, args[1:], stdout, stderr)
	case "sweep":
		return sweepCmd(ctx, args[1:], stdout, stderr)
	case "send":
		return sendCmd(ctx, args[1:], stdout, stderr)
	case "node":
		return nodeCmd(ctx, args[1:], os.Stdin, stdout, stderr)
	case "agent":
		return agentCmd(ctx, args[1:], stdout, stderr)
	case "coordinate":
		return coordinateCmd(ctx, args[1:], stdout, stderr)
	case "stat":
		return statCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "benchpeer":
		return benchPeerCmd(ctx, args[1:], os.Stdin, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
