package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/journal"
)

// previousJob makes a coordinator --data-dir holding the journal of a job
// of nodes workers, as a coordinate interrupted before the job completed
// leaves it; agentJob is the job's name on the agents ("": its workers
// ran on this host).
func previousJob(t *testing.T, agentJob string, nodes int) (data string) {
	t.Helper()
	data = filepath.Join(t.TempDir(), "coordinator")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	conf, err := json.Marshal(jobConfig{Spec: jobs.Spec{Kind: "pipeline", Size: 64, Keys: 64, Middle: 2, Last: 2}, AgentJob: agentJob})
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(filepath.Join(data, engine.JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(&journal.Job{Config: conf, Shape: "previous", Nodes: nodes, Placement: make([]int, 5)}); err != nil {
		t.Fatal(err)
	}
	return data
}

// journaledJob returns the name on the agents of the job data's journal
// holds ("" for none).
func journaledJob(t *testing.T, data string) string {
	t.Helper()
	st, err := journal.Read(filepath.Join(data, engine.JournalFile))
	if err != nil || st.Job == nil {
		t.Fatalf("the journal in %s holds no job: %v", data, err)
	}
	var jc jobConfig
	if err := json.Unmarshal(st.Job.Config, &jc); err != nil {
		t.Fatal(err)
	}
	return jc.AgentJob
}

// jobAgent starts an agent whose --data-dir holds the directory of node's
// worker of job (none for job ""), and returns that directory. The agent
// cannot start an engine worker (its loadgen is missing): a coordinate
// that gets as far as starting the new job's workers fails there, after
// what --start-over does before it.
func jobAgent(t *testing.T, job string, node int) (a *testAgent, jobDir string) {
	t.Helper()
	work := t.TempDir()
	if job != "" {
		jobDir = filepath.Join(work, job)
		log := filepath.Join(jobDir, fmt.Sprintf("node%d", node), "log")
		if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(log, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing-loadgen")
	return startAgentWith(t, func(a *agent) { a.workDir, a.exe = work, missing }), jobDir
}

// startOver runs coordinate --start-over of a pipeline on agents with
// data as its --data-dir, and returns its stderr and its error.
func startOver(t *testing.T, data string, agents ...string) (stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	args := []string{"--scenario", "pipeline", "--agents", strings.Join(agents, ","), "--duration", "1h",
		"--checkpoint-every", "50ms", "--fsync=false", "--max-restarts", "0", "--data-dir", data, "--start-over", "--out", t.TempDir()}
	var b bytes.Buffer
	err = coordinateCmd(ctx, args, &bytes.Buffer{}, &b)
	return b.String(), err
}

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestAStartOverOnAgentsDropsThePreviousJobFromThem: coordinate
// --start-over discards the journal of the job in its --data-dir, and with
// it the only record of the job's name on the agents, where its workers'
// logs and checkpoints are: it has the agents drop the job first. They
// stayed there for good.
func TestAStartOverOnAgentsDropsThePreviousJobFromThem(t *testing.T) {
	job := control.NewJobID()
	data := previousJob(t, job, 2)
	a0, dir0 := jobAgent(t, job, 0)
	a1, dir1 := jobAgent(t, job, 1)
	stderr, err := startOver(t, data, a0.addr, a1.addr)
	if err == nil {
		t.Fatal("coordinate started workers on agents that cannot start them")
	}
	for _, d := range []string{dir0, dir1} {
		if exists(t, d) {
			t.Errorf("%s, the previous job's data, is still on its agent after --start-over (coordinate: %v)\n%s", d, err, stderr)
		}
	}
	if strings.Contains(stderr, "warning") {
		t.Errorf("coordinate warned:\n%s", stderr)
	}
}

// TestAStartOverAsksNoDropWithoutAPreviousJobOnAgents: a --data-dir that
// holds no journal, or the journal of a job whose workers ran on the
// coordinator's host, names no job on the agents: nothing is dropped.
func TestAStartOverAsksNoDropWithoutAPreviousJobOnAgents(t *testing.T) {
	for _, tt := range []struct {
		name string
		data func(t *testing.T) string
	}{
		{"no journal", func(t *testing.T) string { return filepath.Join(t.TempDir(), "coordinator") }},
		{"the journal of a job that ran on this host", func(t *testing.T) string { return previousJob(t, "", 2) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a0, _ := jobAgent(t, "", 0)
			a1, _ := jobAgent(t, "", 1)
			stderr, err := startOver(t, tt.data(t), a0.addr, a1.addr)
			if err == nil {
				t.Fatal("coordinate started workers on agents that cannot start them")
			}
			for _, a := range []*testAgent{a0, a1} {
				if log := a.log.String(); strings.Contains(log, "drop") {
					t.Errorf("agent %s was asked to drop a job:\n%s", a.addr, log)
				}
			}
			if strings.Contains(stderr, "warning") {
				t.Errorf("coordinate warned:\n%s", stderr)
			}
		})
	}
}

// TestAStartOverTheAgentsCannotDropDiscardsNothing: when an agent cannot
// drop the previous job (unreachable, or a worker of the job still runs
// there), or another coordinator has the journal open, coordinate
// --start-over fails before it discards anything: the journal stays, so
// that the same command, run again, drops the job where it is left, and
// the error names the agent, the job and the directory.
func TestAStartOverTheAgentsCannotDropDiscardsNothing(t *testing.T) {
	t.Run("an unreachable agent", func(t *testing.T) {
		job := control.NewJobID()
		data := previousJob(t, job, 2)
		up, dir := jobAgent(t, job, 0)
		gone := closedAddr(t)
		_, err := startOver(t, data, up.addr, gone)
		if !errors.Is(err, errAgentUnreachable) {
			t.Fatalf("coordinate returned %v, want errAgentUnreachable", err)
		}
		// The reachable agent dropped it: the job cannot be resumed
		// any more, and the error says so.
		wantRefused(t, err, data, job, gone, "can no longer be resumed", up.addr)
		if exists(t, dir) {
			t.Errorf("the reachable agent still holds %s", dir)
		}
	})

	t.Run("an agent where a worker of the job still runs", func(t *testing.T) {
		job := control.NewJobID()
		data := previousJob(t, job, 2)
		a0, dir0 := jobAgent(t, job, 0)
		busy, dir1 := jobAgent(t, job, 1)
		if err := busy.workers.begin(job); err != nil {
			t.Fatal(err)
		}
		defer busy.workers.end(job)
		_, err := startOver(t, data, a0.addr, busy.addr)
		if !errors.Is(err, errAgentFailed) {
			t.Fatalf("coordinate returned %v, want errAgentFailed", err)
		}
		wantRefused(t, err, data, job, busy.addr, "still run")
		if !exists(t, dir1) {
			t.Errorf("%s, where a worker of the job runs, is gone", dir1)
		}
		if exists(t, dir0) {
			t.Errorf("the agent that could drop the job still holds %s", dir0)
		}
	})

	t.Run("a journal another coordinator has open", func(t *testing.T) {
		job := control.NewJobID()
		data := previousJob(t, job, 2)
		a0, dir0 := jobAgent(t, job, 0)
		a1, dir1 := jobAgent(t, job, 1)
		j, err := journal.Open(filepath.Join(data, engine.JournalFile), journal.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		_, err = startOver(t, data, a0.addr, a1.addr)
		if !errors.Is(err, journal.ErrLocked) {
			t.Fatalf("coordinate returned %v, want journal.ErrLocked", err)
		}
		for _, d := range []string{dir0, dir1} {
			if !exists(t, d) {
				t.Errorf("%s, the data of a job another coordinator runs, is gone", d)
			}
		}
	})
}

// wantRefused checks a start-over refused before it discarded anything:
// the error err names the directory data, the job and each of says, and
// the journal in data still holds job.
func wantRefused(t *testing.T, err error, data, job string, says ...string) {
	t.Helper()
	msg := err.Error()
	t.Logf("coordinate: %v", err)
	for _, want := range append([]string{job, data, "nothing was discarded"}, says...) {
		if !strings.Contains(msg, want) {
			t.Errorf("the error %q does not say %q", msg, want)
		}
	}
	if got := journaledJob(t, data); got != job {
		t.Errorf("the journal in %s now holds job %q, want the previous job %s, kept", data, got, job)
	}
}

// TestAStartOverOfAJobOnAgentsWithoutThemIsAWarning: loadgen run, which
// reaches no agent, starting over a --data-dir whose job ran on agents
// says that its workers' data stays there, and where.
func TestAStartOverOfAJobOnAgentsWithoutThemIsAWarning(t *testing.T) {
	job := control.NewJobID()
	data := previousJob(t, job, 2)
	var stderr bytes.Buffer
	if err := dropPreviousJob(context.Background(), nil, data, true, &stderr); err != nil {
		t.Fatal(err)
	}
	if w := stderr.String(); !strings.Contains(w, "warning") || !strings.Contains(w, job) || !strings.Contains(w, data) {
		t.Errorf("the warning %q does not name job %s and %s", w, job, data)
	}
}
