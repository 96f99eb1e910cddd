package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/bench"
)

// sweepCmd runs the transport scenario for every pair of message size and
// channel count and charts throughput against size, one line per channel
// count.
func sweepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sweep", "Runs the transport scenario for every combination of --sizes and --channel-counts\n"+
		"and writes sweep.json, sweep.md and sweep.svg (throughput against message size,\n"+
		"one line per channel count), with each run's report beside them. Interrupted (Ctrl-C),\n"+
		"it summarizes the runs made, the last cut short, and fails (exit status 1).", stderr)
	sizes := fs.String("sizes", "16,100,1024", "message sizes in bytes, comma-separated, each at least 16 and given once")
	counts := fs.String("channel-counts", "1,100,10000", "channel counts, comma-separated, each given once")
	var out outputFlags
	out.register(fs)
	var tc transportConfig
	tc.register(fs)
	if err := setDefault(fs, "duration", "5s"); err != nil {
		return err
	}
	if err := setDefault(fs, "out", filepath.Join("results", "local", "sweep")); err != nil {
		return err
	}
	hideFlags(fs, "size", "channels") // --sizes and --channel-counts set them
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sweep: unexpected arguments %q", fs.Args())
	}
	var set error
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "size":
			set = errors.New("sweep: --size is for 'loadgen run'; give sweep --sizes")
		case "channels":
			set = errors.New("sweep: --channels is for 'loadgen run'; give sweep --channel-counts")
		}
	})
	if set != nil {
		return set
	}
	sz, err := intList("--sizes", *sizes)
	if err != nil {
		return err
	}
	ch, err := intList("--channel-counts", *counts)
	if err != nil {
		return err
	}
	// Every combination is checked before the first runs, each value
	// against sweep's own flag: the rest of the flags at a size and count
	// in range, then each size and each count.
	check := func(size, channels int) error {
		run := tc
		run.size, run.channels = size, channels
		return run.validate()
	}
	if err := check(headerLen, 1); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	for _, s := range sz {
		if err := check(s, 1); err != nil {
			return fmt.Errorf("sweep: --sizes: %d: %w", s, err)
		}
	}
	for _, c := range ch {
		if err := check(headerLen, c); err != nil {
			return fmt.Errorf("sweep: --channel-counts: %d: %w", c, err)
		}
	}
	if err := out.check(); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	sw := bench.NewSweepReport("transport")
	// failures says, for each run, what its report's Failures say (a
	// configured fault that never happened, an interrupt): the run counts
	// as failed.
	var failures []string
combinations:
	for _, c := range ch {
		for _, s := range sz {
			run := tc
			run.size, run.channels = s, c
			fmt.Fprintf(stderr, "loadgen sweep: %d-byte messages, %d channel(s), %s\n", s, c, run.duration)
			r, rec, err := runTransport(ctx, run, stdout, stderr)
			if err != nil {
				return fmt.Errorf("sweep: %d bytes, %d channels: %w", s, c, err)
			}
			dir := filepath.Join(out.out, fmt.Sprintf("size%d-ch%d", s, c))
			if err := bench.WriteDir(dir, r, rec); err != nil {
				return err
			}
			sw.Reports = append(sw.Reports, r)
			if len(r.Failures) > 0 {
				failures = append(failures, fmt.Sprintf("%d bytes, %d channels: %s", s, c, strings.Join(r.Failures, "; ")))
			}
			if ctx.Err() != nil { // interrupted: the runs so far are summarized
				break combinations
			}
		}
	}
	if err := bench.WriteSweepDir(out.out, sw); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if err := bench.WriteSweepMarkdown(stdout, sw); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nSweep files: %s\n", out.out)
	failed := 0
	for _, r := range sw.Reports {
		if r.ExactlyOnce != nil && !*r.ExactlyOnce {
			failed++
		}
	}
	if out.json {
		b, err := json.Marshal(sw)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("sweep: %w after %d of %d runs, the last cut short; the summary of those and each one's report are in %s",
			errInterrupted, len(sw.Reports), len(ch)*len(sz), out.out)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d runs did not deliver every message exactly once", errFailed, failed, len(sw.Reports))
	}
	if len(failures) > 0 {
		return fmt.Errorf("%w: %s", errFailed, strings.Join(failures, "; "))
	}
	return nil
}

func intList(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive whole number", flag, f)
		}
		// Each combination has one directory and one point on the
		// chart: a value given twice would run it twice, the second
		// report over the first.
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("%s: %d is given twice", flag, n)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is empty", flag)
	}
	return out, nil
}
