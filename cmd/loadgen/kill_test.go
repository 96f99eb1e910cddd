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
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
)

// TestWordCountSurvivesSIGKILLedProcesses runs word count in three real
// processes while they are SIGKILLed, and checks that its output equals a
// run in one process without faults, and that the report's independent
// count confirms it. The kills come at random instants every 700 ms or so
// (whatever the coordinator is doing, inside checkpoints too), or, in one
// case per named kill point, where the worker kills itself (once per node):
// between its log sync and its checkpoint save, after the save before the
// coordinator commits, and when the commit arrives.
func TestWordCountSurvivesSIGKILLedProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs three worker processes (about a minute)")
	}
	// Under the race detector's load recovery can also fall behind the
	// kills: the job would never finish.
	skipUnderRace(t)
	bin := buildLoadgen(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "input.txt")
	writeWords(t, input, 6_000_000, 7)

	run := func(name string, env []string, args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out := filepath.Join(dir, name+".tsv")
		args = append([]string{"run", "--scenario", "wordcount", "--input", input, "--output", out,
			"--out", filepath.Join(dir, name), "--json", "--checkpoint-every", "100ms"}, args...)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), env...)
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
	run("clean", nil)
	clean, err := os.ReadFile(filepath.Join(dir, "clean.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		env  []string
		args []string
	}{
		{name: "at-random-instants", args: []string{"--faults", "kill=700ms", "--seed", "11"}},
		{name: "checkpoint-after-log-sync", env: []string{"SLUICE_KILL_AT=checkpoint-after-log-sync:3"}, args: []string{"--expect-recoveries"}},
		{name: "checkpoint-after-save", env: []string{"SLUICE_KILL_AT=checkpoint-after-save:3"}, args: []string{"--expect-recoveries"}},
		{name: "commit", env: []string{"SLUICE_KILL_AT=commit:3"}, args: []string{"--expect-recoveries"}},
	}
	// The kill points kill without a kill= fault: their runs recover
	// without one, which only --expect-recoveries lets pass.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := run(tc.name, tc.env, append([]string{"--nodes", "3"}, tc.args...)...)
			killed, err := os.ReadFile(filepath.Join(dir, tc.name+".tsv"))
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
			if tc.env == nil {
				if kills, _ := faults["kill"].(float64); kills < 1 {
					t.Errorf("no process was killed (faults %v): the test proves nothing; make the input larger", r["faults"])
				}
			}
			// A self-kill is a failure the coordinator recovers from.
			if recs, _ := r["recoveries"].(float64); recs < 1 {
				t.Errorf("no recovery (report %v): no process died", r["recoveries"])
			}
			t.Logf("kills %v, recoveries %v, checkpoints %v, %.1f s", faults["kill"], r["recoveries"], r["checkpoints"], r["duration_s"])
		})
	}
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

// wordCountInput writes n words (writeWords) to dir/input.txt and returns
// its path and the counts an independent count of it gives, as loadgen
// writes them.
func wordCountInput(t *testing.T, dir string, n int, seed uint64) (input string, want []byte) {
	t.Helper()
	input = filepath.Join(dir, "input.txt")
	writeWords(t, input, n, seed)
	in, err := os.Open(input)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	ref, err := jobs.ReferenceCounts(in)
	if err != nil {
		t.Fatal(err)
	}
	// Formatted here, not by jobs.WriteCounts, which writes the output
	// under test: a line it lost would be lost from want too.
	words := make([]string, 0, len(ref))
	for w := range ref {
		words = append(words, w)
	}
	sort.Strings(words)
	var b bytes.Buffer
	for _, w := range words {
		b.WriteString(w + "\t" + strconv.FormatInt(ref[w], 10) + "\n")
	}
	return input, b.Bytes()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// The word count check reads the output file back: a file with a line
// lost, a count changed, a word twice or a last line cut short does not
// read as the counts it should hold.
func TestReadCountsFileReadsWhatWasWrittenAndRefusesTheMalformed(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.tsv")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	m, err := readCountsFile(write("a\t1\nb\t22\n"))
	if err != nil || len(m) != 2 || m["a"] != 1 || m["b"] != 22 {
		t.Fatalf("read %v, %v; want a 1, b 22", m, err)
	}
	want := map[string]int64{"a": 1, "b": 22}
	if lost, dup, _ := jobs.CompareCounts(map[string]int64{"a": 1}, want); lost != 22 || dup != 0 {
		t.Errorf("a file missing b's line compares as %d lost, %d duplicated; want 22, 0", lost, dup)
	}
	for _, bad := range []string{"a\t1\nb\t2", "a\t1\na\t1\n", "a 1\n", "a\t0\n", "\t3\n", "a\tx\n"} {
		if m, err := readCountsFile(write(bad)); err == nil {
			t.Errorf("%q read as %v, want an error", bad, m)
		}
	}
}
