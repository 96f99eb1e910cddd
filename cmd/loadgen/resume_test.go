package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/journal"
)

// TestARestartedLoadgenResumesWordCount SIGKILLs the loadgen process that
// coordinates a word count once its journal holds a completed checkpoint,
// before the job ends, starts it again with the same --data-dir, and checks
// that it resumed from the journal's last checkpoint and that its output
// equals an independent count of the input. With --nodes 3 the killed
// coordinator's worker processes are left to end on their own (their
// control pipe closes); the new ones wait for their directories.
func TestARestartedLoadgenResumesWordCount(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs word count twice per case (about 20 s)")
	}
	skipUnderRace(t)
	bin := buildLoadgen(t)
	dir := t.TempDir()
	input, want := wordCountInput(t, dir, 6_000_000, 5)

	for _, nodes := range []string{"1", "3"} {
		t.Run("nodes="+nodes, func(t *testing.T) {
			data := filepath.Join(dir, "data"+nodes)
			out := filepath.Join(dir, "counts"+nodes+".tsv")
			args := []string{"run", "--scenario", "wordcount", "--input", input, "--output", out, "--nodes", nodes,
				"--data-dir", data, "--out", filepath.Join(dir, "report"+nodes), "--json", "--checkpoint-every", "100ms"}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			first := exec.CommandContext(ctx, bin, args...)
			var stderr bytes.Buffer
			first.Stderr = &stderr
			if err := first.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- first.Wait() }()
			var before journal.State
			for before.Checkpoints < 2 {
				select {
				case err := <-exited:
					t.Fatalf("loadgen ended (%v) before its journal held two checkpoints: make the input larger\n%s", err, tail(stderr.Bytes(), 2000))
				case <-time.After(5 * time.Millisecond):
				}
				st, err := journal.Read(filepath.Join(data, engine.JournalFile))
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
				before = st
			}
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			err := <-exited
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the first loadgen ended with %v, want killed by SIGKILL mid-run\n%s", err, tail(stderr.Bytes(), 2000))
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the output exists after the kill (%v): the job had finished, the kill proves nothing", err)
			}
			killed, err := journal.Read(filepath.Join(data, engine.JournalFile))
			if err != nil {
				t.Fatal(err)
			}

			second := exec.CommandContext(ctx, bin, args...)
			var stdout bytes.Buffer
			stderr.Reset()
			second.Stdout, second.Stderr = &stdout, &stderr
			if err := second.Run(); err != nil {
				t.Fatalf("the restarted loadgen: %v\n%s", err, tail(stderr.Bytes(), 2000))
			}
			lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
			var r struct {
				Config      map[string]any `json:"config"`
				Checkpoints int64          `json:"checkpoints"`
			}
			if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
				t.Fatalf("the last line of loadgen's output is not the JSON report: %v", err)
			}
			from, _ := r.Config["resumed_from_checkpoint"].(float64)
			if r.Config["resumed"] != true || int64(from) != killed.Checkpoint || killed.Checkpoint < before.Checkpoint {
				t.Errorf("the restarted run says resumed %v from checkpoint %v; the journal's last checkpoint at the kill was %d",
					r.Config["resumed"], r.Config["resumed_from_checkpoint"], killed.Checkpoint)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the resumed run's counts differ from an independent count of the input (%d vs %d bytes)", len(got), len(want))
			}
			t.Logf("killed after %d checkpoints (the last at %d) in generation %d; the restarted run took %d more checkpoints",
				killed.Checkpoints, killed.Checkpoint, killed.Gen, r.Checkpoints)
		})
	}
}
