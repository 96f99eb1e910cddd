package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cancelOnProgress cancels ctx once progress shows the run's first
// second: the run is under way.
func cancelOnProgress(ctx context.Context, cancel context.CancelFunc, progress *syncBuffer) {
	for !strings.Contains(progress.String(), "t=1s") && ctx.Err() == nil {
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
				go cancelOnProgress(ctx, cancel, progress)
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
