package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
)

// engineAgents starts n agents in this process, each with a --data-dir of
// its own, whose engine workers run bin. It returns their addresses and
// directories.
func engineAgents(t *testing.T, bin string, n int) (addrs, dirs []string) {
	t.Helper()
	for range n {
		dir := t.TempDir()
		a := startAgentWith(t, func(a *agent) { a.workDir, a.exe = dir, bin })
		addrs, dirs = append(addrs, a.addr), append(dirs, dir)
	}
	return addrs, dirs
}

// jobDirs lists what each agent's --data-dir holds.
func jobDirs(t *testing.T, dirs []string) []string {
	t.Helper()
	var held []string
	for _, d := range dirs {
		es, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			held = append(held, filepath.Join(d, e.Name()))
		}
	}
	return held
}

// waitForJobDirs waits until every agent holds a node directory of the
// job, that is until the job's workers have started.
func waitForJobDirs(t *testing.T, ctx context.Context, dirs []string, exited <-chan error) {
	t.Helper()
	for _, d := range dirs {
		for {
			if m, _ := filepath.Glob(filepath.Join(d, "job-*", "node*")); len(m) > 0 {
				break
			}
			select {
			case err := <-exited:
				t.Fatalf("coordinate ended (%v) before its workers started", err)
			case <-ctx.Done():
				t.Fatalf("the workers never made their directories in %s", d)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// TestAJobOnAgentsLeavesItsDataThereOnlyWhileItCanBeResumed: the workers
// of a job on agents keep their source logs and checkpoints in the
// agents' --data-dir. A completed job, and an interrupted one whose
// coordinator had no --data-dir (its journal is gone with its temporary
// directory), can never be resumed: coordinate has its agents remove the
// job's directory. An interrupted job whose coordinator has a --data-dir
// can be resumed, and keeps it; the interrupted run says where its data
// is.
func TestAJobOnAgentsLeavesItsDataThereOnlyWhileItCanBeResumed(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs engine jobs on two agents")
	}
	bin := buildLoadgen(t)
	dir := t.TempDir()
	input, want := wordCountInput(t, dir, 20_000, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a hang guard
	defer cancel()
	// wordcount runs the job and returns its report's config.
	wordcount := func(t *testing.T, addrs []string, out string, more ...string) map[string]any {
		t.Helper()
		args := append([]string{"--scenario", "wordcount", "--agents", strings.Join(addrs, ","), "--input", input, "--output", out,
			"--checkpoint-every", "50ms", "--fsync=false", "--json", "--out", t.TempDir()}, more...)
		var stdout, stderr bytes.Buffer
		if err := coordinateCmd(ctx, args, &stdout, &stderr); err != nil {
			t.Fatalf("coordinate: %v\n%s", err, tail(stderr.Bytes(), 3000))
		}
		if strings.Contains(stderr.String(), "warning") {
			t.Errorf("coordinate warned:\n%s", tail(stderr.Bytes(), 3000))
		}
		if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("the counts differ from an independent count of the input (%v)", err)
		}
		lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
		var r struct {
			Config map[string]any `json:"config"`
		}
		if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
			t.Fatalf("the last line of coordinate's output is not the JSON report: %v", err)
		}
		return r.Config
	}

	t.Run("a completed job is removed from its agents", func(t *testing.T) {
		addrs, dirs := engineAgents(t, bin, 2)
		wordcount(t, addrs, filepath.Join(t.TempDir(), "counts.tsv"))
		if held := jobDirs(t, dirs); len(held) > 0 {
			t.Errorf("the agents still hold the completed job's data: %q", held)
		}
	})

	t.Run("a completed job whose coordinator has a data dir is removed, and runs again", func(t *testing.T) {
		addrs, dirs := engineAgents(t, bin, 2)
		data := filepath.Join(t.TempDir(), "coordinator")
		wordcount(t, addrs, filepath.Join(t.TempDir(), "counts.tsv"), "--data-dir", data)
		if held := jobDirs(t, dirs); len(held) > 0 {
			t.Errorf("the agents still hold the completed job's data: %q", held)
		}
		// The journal of a job whose workers' data is gone must not
		// be resumed: the same command runs the job again, afresh.
		if cfg := wordcount(t, addrs, filepath.Join(t.TempDir(), "again.tsv"), "--data-dir", data); cfg["resumed"] != nil {
			t.Errorf("the second run resumed the completed job, whose workers' data is gone: config %v", cfg)
		}
		if held := jobDirs(t, dirs); len(held) > 0 {
			t.Errorf("the agents still hold the job's data after its second run: %q", held)
		}
	})

	interrupt := func(t *testing.T, addrs, dirs []string, more ...string) error {
		t.Helper()
		args := append([]string{"--scenario", "pipeline", "--agents", strings.Join(addrs, ","), "--duration", "1h",
			"--checkpoint-every", "50ms", "--fsync=false", "--out", t.TempDir()}, more...)
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		exited := make(chan error, 1)
		var stderr syncBuffer
		go func() { exited <- coordinateCmd(rctx, args, &bytes.Buffer{}, &stderr) }()
		waitForJobDirs(t, ctx, dirs, exited)
		stop()
		err := <-exited
		if !errors.Is(err, errInterrupted) {
			t.Fatalf("the interrupted run ended with %v, want errInterrupted\n%s", err, stderr.String())
		}
		if strings.Contains(stderr.String(), "warning") {
			t.Errorf("coordinate warned:\n%s", stderr.String())
		}
		return err
	}

	t.Run("an interrupted job without a coordinator data dir is removed from its agents", func(t *testing.T) {
		addrs, dirs := engineAgents(t, bin, 2)
		err := interrupt(t, addrs, dirs)
		if held := jobDirs(t, dirs); len(held) > 0 {
			t.Errorf("the agents still hold the data of a job nothing can resume: %q", held)
		}
		if msg := err.Error(); !strings.Contains(msg, "now removed") || !strings.Contains(msg, "on the agents") {
			t.Errorf("the interrupted run says %q; want it to say that the data on the agents was removed", msg)
		}
	})

	t.Run("an interrupted job with a coordinator data dir stays on its agents", func(t *testing.T) {
		addrs, dirs := engineAgents(t, bin, 2)
		data := filepath.Join(t.TempDir(), "coordinator")
		err := interrupt(t, addrs, dirs, "--data-dir", data)
		held := jobDirs(t, dirs)
		if len(held) != len(dirs) {
			t.Fatalf("the agents hold %q; want the job's directory on each of them, to resume it", held)
		}
		msg := err.Error()
		if !strings.Contains(msg, "run it again with --data-dir "+data) || !strings.Contains(msg, filepath.Base(held[0])) {
			t.Errorf("the interrupted run says %q; want it to say how to resume the job and that its workers' data, %s, stays on the agents",
				msg, filepath.Base(held[0]))
		}
	})

	t.Run("an interrupted job that a start-over discards is removed from its agents", func(t *testing.T) {
		addrs, dirs := engineAgents(t, bin, 2)
		data := filepath.Join(t.TempDir(), "coordinator")
		interrupt(t, addrs, dirs, "--data-dir", data)
		if held := jobDirs(t, dirs); len(held) != len(dirs) {
			t.Fatalf("the agents hold %q; want the interrupted job's directory on each of them", held)
		}
		// Its journal, the only record of its name on the agents, goes:
		// nothing could drop it later.
		if cfg := wordcount(t, addrs, filepath.Join(t.TempDir(), "counts.tsv"), "--data-dir", data, "--start-over"); cfg["resumed"] != nil {
			t.Errorf("the run that started over resumed: config %v", cfg)
		}
		if held := jobDirs(t, dirs); len(held) > 0 {
			t.Errorf("the agents still hold data after the start-over completed: %q", held)
		}
	})
}

// TestAFailedDropIsAWarningThatNamesTheAgent: an agent that cannot be
// reached to drop a job is named in a warning and in the interrupted
// run's error, which no longer says the data was removed.
func TestAFailedDropIsAWarningThatNamesTheAgent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // nothing listens there now
	up := startAgentWith(t, func(a *agent) { a.workDir = t.TempDir() })
	job := control.NewJobID()
	l := &agentLauncher{agents: []string{up.addr, gone}, job: job, timeout: 5 * time.Second, launched: map[int]bool{0: true, 1: true}}
	var stderr bytes.Buffer
	kept := dropAgentJob(context.Background(), l, false, "", &stderr)
	if len(kept) != 1 || kept[0] != gone {
		t.Fatalf("dropAgentJob says %q kept the job; want only the unreachable agent %s", kept, gone)
	}
	if w := stderr.String(); !strings.Contains(w, "warning") || !strings.Contains(w, gone) || !strings.Contains(w, job) {
		t.Errorf("the warning %q does not name agent %s and job %s", w, gone, job)
	}
	msg := engineInterrupted("pipeline", time.Second, "", job, kept).Error()
	if strings.Contains(msg, "now removed:") || !strings.Contains(msg, gone) {
		t.Errorf("the interrupted run says %q; want it to name agent %s as still holding the job", msg, gone)
	}
}
