package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// cancelOnProgress cancels ctx once progress shows the run's second at
// (a progress line "t=1s", say): the run is under way.
func cancelOnProgress(ctx context.Context, cancel context.CancelFunc, progress *syncBuffer, at string) {
	for !strings.Contains(progress.String(), at) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
}

// An engine run interrupted (Ctrl-C, SIGTERM: its context ends) cannot
// report: the engine gives its results only when the job completes. It
// says so, and how to resume, and fails with the exit status of an
// interrupted transport run (1), where it failed with a bare 'context
// canceled' (exit status 2).
func TestAnInterruptedEngineRunSaysSoAndFails(t *testing.T) {
	input := filepath.Join(t.TempDir(), "in.txt")
	if err := os.WriteFile(input, []byte("a b a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	for _, c := range []struct {
		name   string
		args   []string
		during bool   // interrupted once under way, not before it starts
		want   string // what the error says of resuming
	}{
		{"pipeline", []string{"--scenario", "pipeline", "--duration", "1h"}, true,
			"give --data-dir to keep an interrupted job"},
		{"pipeline with --data-dir", []string{"--scenario", "pipeline", "--duration", "1h", "--data-dir", dataDir}, true,
			"run it again with --data-dir " + dataDir + " to resume"},
		{"wordcount", []string{"--scenario", "wordcount", "--input", input, "--output", filepath.Join(t.TempDir(), "out.tsv")}, false,
			"give --data-dir to keep an interrupted job"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			progress := &syncBuffer{}
			if c.during {
				go cancelOnProgress(ctx, cancel, progress, "t=1s")
			} else {
				cancel()
			}
			var stdout bytes.Buffer
			err := run(ctx, append([]string{"run", "--out", t.TempDir()}, c.args...), &stdout, progress)
			if err == nil || exitCode(err) != 1 {
				t.Fatalf("an interrupted run returned %v (exit status %d), want exit status 1", err, exitCode(err))
			}
			if msg := err.Error(); !strings.Contains(msg, "interrupted after") || !strings.Contains(msg, "no report") ||
				!strings.Contains(msg, c.want) || strings.Contains(msg, "context canceled") {
				t.Errorf("error %q does not say the run was interrupted, that there is no report, and %q (or names context canceled)", msg, c.want)
			}
		})
	}
}

// The first interrupt ends the run's context, the second its abortOf, and
// lets go of the signals so that a third gets Go's default (the process
// dies): main's signal.NotifyContext caught every interrupt after the
// first and did nothing with them.
func TestInterruptsEndTheRunThenItsWaits(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	released := make(chan struct{}, 3)
	ctx, stop := notifyInterrupts(t.Context(), sigs, func() { released <- struct{}{} })
	defer stop()
	abort := abortOf(ctx)
	sigs <- os.Interrupt
	<-ctx.Done()
	if abort.Err() != nil || len(released) > 0 {
		t.Fatalf("the first interrupt ended the waits too (abort %v, released %d)", abort.Err(), len(released))
	}
	sigs <- os.Interrupt
	<-abort.Done()
	<-released
}

// A second interrupt ends the transport scenario's wait for its receiver
// to acknowledge what was sent at once (a drain that cannot end here: a
// partition holds every frame from 1 s after the nodes started, so what
// was sent in the 2 s before the first interrupt stays unacknowledged), and the report says what was not confirmed:
// the drain waited for its own 2 minutes whatever the user did.
func TestASecondInterruptEndsTheTransportDrain(t *testing.T) {
	abort, interruptAgain := context.WithCancel(t.Context())
	defer interruptAgain()
	ctx, cancel := context.WithCancel(withAbort(t.Context(), abort))
	defer cancel()
	progress := &syncBuffer{}
	go func() {
		cancelOnProgress(ctx, cancel, progress, "t=3s")
		for !strings.Contains(progress.String(), "interrupt again") && abort.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		interruptAgain()
	}()
	var stdout bytes.Buffer
	err := run(ctx, []string{"run", "--scenario", "transport", "--rate", "1000", "--duration", "1h", "--faults", "partition=1h@1s",
		"--json", "--out", t.TempDir()}, &stdout, progress)
	if !errors.Is(err, errFailed) {
		t.Errorf("the run returned %v, want a failed run's", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r bench.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("no report: %v\n%s", err, stdout.String())
	}
	f := strings.Join(r.Failures, "; ")
	if !strings.Contains(f, "a second interrupt ended the wait for acknowledgements") || !strings.Contains(f, "had not reached the receiver") {
		t.Errorf("the report's failures %q do not say the second interrupt cut the drain short and what it did not confirm", f)
	}
	if r.ExactlyOnce != nil {
		t.Errorf("the report says exactly-once %v of messages it did not wait for (lost %d)", *r.ExactlyOnce, r.Lost)
	}
}
