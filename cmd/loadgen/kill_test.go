package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestWordCountSurvivesSIGKILLedProcesses runs word count in three real
// processes while one of them is SIGKILLed every 700 ms,
// and checks that its output equals a run in one process without faults.
// Kills come far enough apart that recovery (tens of milliseconds here)
// outpaces them even on a loaded machine.
func TestWordCountSurvivesSIGKILLedProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs three worker processes (about 20 s)")
	}
	if raceEnabled {
		// The workers are not built with the race detector, so it checks
		// nothing here, and under its load recovery can fall behind the
		// kills: the job would never finish.
		t.Skip("skipping under the race detector: it does not instrument the worker processes")
	}
	bin := buildLoadgen(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "input.txt")
	writeWords(t, input, 6_000_000, 7)

	run := func(name string, args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out := filepath.Join(dir, name+".tsv")
		args = append([]string{"run", "--scenario", "wordcount", "--input", input, "--output", out,
			"--out", filepath.Join(dir, name), "--json", "--checkpoint-every", "100ms"}, args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("loadgen %v: %v\n%s", args, err, tail(stderr.Bytes(), 2000))
		}
		lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
		var r map[string]any
		if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
			t.Fatalf("the last line of loadgen's output is not the JSON report: %v", err)
		}
		return r
	}
	run("clean")
	r := run("killed", "--nodes", "3", "--faults", "kill=700ms", "--seed", "11")

	clean, err := os.ReadFile(filepath.Join(dir, "clean.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	killed, err := os.ReadFile(filepath.Join(dir, "killed.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(clean, killed) {
		t.Errorf("the output with processes SIGKILLed differs from the clean output (%d vs %d bytes)", len(killed), len(clean))
	}
	if r["exactly_once"] != true || r["lost"] != 0.0 || r["duplicates"] != 0.0 {
		t.Errorf("the report does not confirm the independent count: exactly_once %v, lost %v, duplicates %v",
			r["exactly_once"], r["lost"], r["duplicates"])
	}
	faults, _ := r["faults"].(map[string]any)
	if kills, _ := faults["kill"].(float64); kills < 1 {
		t.Errorf("no process was killed (faults %v): the test proves nothing; make the input larger", r["faults"])
	}
	t.Logf("kills %v, recoveries %v, checkpoints %v, %.1f s", faults["kill"], r["recoveries"], r["checkpoints"], r["duration_s"])
}

// writeWords writes n words from a small vocabulary with a skewed
// distribution, a few to a line.
func writeWords(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	var b bytes.Buffer
	for i := range n {
		fmt.Fprintf(&b, "w%d", int(rng.ExpFloat64()*300))
		if i%9 == 8 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
