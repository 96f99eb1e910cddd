package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/journal"
)

func TestAnAgentRefusesABadWorkerPlanAndAKillOfNoWorker(t *testing.T) {
	a := startAgentWith(t, func(a *agent) { a.workDir = t.TempDir() })
	spec := json.RawMessage(`{"kind":"wordcount","input":"x"}`)
	good := control.WorkerPlan{Version: control.Version, Job: "job-1", Node: 0, Spec: spec}
	cases := []struct {
		name string
		kind control.Kind
		edit func(*control.WorkerPlan)
		want string
	}{
		{"another protocol version", control.KindWorker, func(p *control.WorkerPlan) { p.Version = control.Version + 1 }, "control protocol version"},
		{"a job name that is a path", control.KindWorker, func(p *control.WorkerPlan) { p.Job = "../etc" }, "job name"},
		{"a negative node", control.KindWorker, func(p *control.WorkerPlan) { p.Node = -1 }, "out of range"},
		{"a spec of no known job", control.KindWorker, func(p *control.WorkerPlan) { p.Spec = json.RawMessage(`{"kind":"nope"}`) }, "unknown job kind"},
		{"a spec that is not a spec", control.KindWorker, func(p *control.WorkerPlan) { p.Spec = json.RawMessage(`{"kind":5}`) }, "jobs: spec"},
		{"a listen address without a port", control.KindWorker, func(p *control.WorkerPlan) { p.Listen = "10.0.0.1" }, "listen address"},
		{"a kill of a worker that does not run", control.KindKill, func(p *control.WorkerPlan) {}, "no worker job-1/0 runs here"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := good
			c.edit(&p)
			cc := dialCtl(t, a.addr)
			if err := cc.Send(control.Msg{Kind: c.kind, Worker: &p}); err != nil {
				t.Fatal(err)
			}
			m := recvType(t, cc)
			if m.Kind != control.KindError || !strings.Contains(m.Error, c.want) {
				t.Fatalf("got %q %q, want an error saying %q", m.Kind, m.Error, c.want)
			}
		})
	}
}

// TestWordCountWithWorkersOnAgentsOverLoopback is the three-host test
// (TestEngineWorkersOnAgentsInThreeHosts) on one host, without root: three
// agent processes on loopback ports, workers SIGKILLed by their agents;
// then a coordinator SIGKILLed mid-job and started again on its --data-dir
// resumes the job on the agents' workers, which kept their directories.
func TestWordCountWithWorkersOnAgentsOverLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs word count on three agent processes (about 10 s)")
	}
	skipUnderRace(t)
	bin := buildLoadgen(t)
	dir := t.TempDir()
	input, want := wordCountInput(t, dir, 4_000_000, 13)
	var addrs []string
	var logs []*syncBuffer
	for i := range 3 {
		addr, log := startAgentProcess(t, bin, filepath.Join(dir, fmt.Sprintf("agent%d", i)), "")
		addrs, logs = append(addrs, addr), append(logs, log)
	}
	coordinate := func(ctx context.Context, out string, more ...string) *exec.Cmd {
		args := append([]string{"coordinate", "--scenario", "wordcount", "--agents", strings.Join(addrs, ","),
			"--input", input, "--output", out, "--checkpoint-every", "100ms", "--json", "--out", filepath.Join(dir, "report")}, more...)
		return exec.CommandContext(ctx, bin, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sameCounts := func(t *testing.T, out string) {
		t.Helper()
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("the counts differ from an independent count of the input (%d vs %d bytes)", len(got), len(want))
		}
	}

	t.Run("workers SIGKILLed by their agents", func(t *testing.T) {
		out := filepath.Join(dir, "counts.tsv")
		co := coordinate(ctx, out, "--faults", "kill=700ms", "--seed", "4")
		var stderr bytes.Buffer
		co.Stderr = &stderr
		if err := co.Run(); err != nil {
			t.Fatalf("coordinate: %v\n%s", err, tail(stderr.Bytes(), 3000))
		}
		sameCounts(t, out)
		kills := 0
		for _, l := range logs {
			kills += strings.Count(l.String(), "SIGKILLed worker")
		}
		if kills == 0 {
			t.Errorf("no agent SIGKILLed a worker: the test proves nothing; make the input larger")
		}
		t.Logf("%d workers SIGKILLed by their agents", kills)
	})

	t.Run("the coordinator SIGKILLed and started again resumes", func(t *testing.T) {
		out, data := filepath.Join(dir, "resumed.tsv"), filepath.Join(dir, "coordinator")
		first := coordinate(ctx, out, "--data-dir", data)
		var stderr bytes.Buffer
		first.Stderr = &stderr
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- first.Wait() }()
		for {
			select {
			case err := <-exited:
				t.Fatalf("coordinate ended (%v) before its journal held two checkpoints: make the input larger\n%s", err, tail(stderr.Bytes(), 2000))
			case <-time.After(5 * time.Millisecond):
			}
			if st, err := journal.Read(filepath.Join(data, engine.JournalFile)); err == nil && st.Checkpoints >= 2 {
				break
			}
		}
		_ = first.Process.Signal(syscall.SIGKILL)
		if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the first coordinator ended with %v, want killed mid-run", err)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatal("the output exists after the kill: the job had finished, the kill proves nothing")
		}
		second := coordinate(ctx, out, "--data-dir", data)
		var stdout bytes.Buffer
		stderr.Reset()
		second.Stdout, second.Stderr = &stdout, &stderr
		if err := second.Run(); err != nil {
			t.Fatalf("the restarted coordinator: %v\n%s", err, tail(stderr.Bytes(), 3000))
		}
		lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
		var r struct {
			Config map[string]any `json:"config"`
		}
		if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
			t.Fatal(err)
		}
		if r.Config["resumed"] != true || r.Config["resumed_from_checkpoint"] == nil {
			t.Errorf("the restarted coordinator did not resume from a checkpoint: config %v", r.Config)
		}
		sameCounts(t, out)
	})
}

func TestCoordinateRefusesFlagsOfAnotherScenario(t *testing.T) {
	dir := t.TempDir()
	input, missing, output := filepath.Join(dir, "words.txt"), filepath.Join(dir, "missing.txt"), filepath.Join(dir, "counts.txt")
	if err := os.WriteFile(input, []byte("a b a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1", "--nodes", "3"}, "one engine worker per agent"},
		{[]string{"--scenario", "pipeline", "--agents", "127.0.0.1:1", "--topology", "ring"}, "--topology is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--agents", "127.0.0.1:1", "--rate", "1000"}, "--rate is for --scenario transport"},
		{[]string{"--scenario", "transport", "--agents", "127.0.0.1:1,127.0.0.1:2", "--input", "x"}, "--input is for --scenario wordcount, not transport"},
		{[]string{"--scenario", "transport", "--agents", "127.0.0.1:1,127.0.0.1:2", "--chain=false"}, "--chain is for --scenario wordcount or pipeline"},
		{[]string{"--scenario", "pipeline", "--agents", "127.0.0.1:1", "--input", "x"}, "--input is for --scenario wordcount, not pipeline"},
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1", "--duration", "3s"}, "--duration is for --scenario transport or pipeline, not wordcount"},
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1", "--clock-correction=false"}, "--clock-correction is for --scenario transport"},
		{[]string{"--scenario", "pipeline", "--agents", "127.0.0.1:1", "--parallelism", "0"}, "--parallelism must be >= 1, got 0"},
		{[]string{"--scenario", "wordcount", "--agents", ""}, "--agents names no agent"},
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1,127.0.0.1:1", "--input", input, "--output", output}, "listed twice"},
		{[]string{"--scenario", "wordcount", "--agents", "nohost", "--input", input, "--output", output}, "agent address"},
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1"}, "wordcount needs --input and --output"},
		// The coordinator counts the input again to check the output.
		{[]string{"--scenario", "wordcount", "--agents", "127.0.0.1:1", "--input", missing, "--output", output}, "coordinate: --input: open " + missing},
		{[]string{"--scenario", "sort", "--agents", "127.0.0.1:1"}, "unknown scenario"},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		err := coordinateCmd(context.Background(), c.args, &bytes.Buffer{}, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("coordinate %v: got %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestAWordCountInputMissingOnItsAgentFailsTheRunAtOnce: the input is
// given as a path the coordinator reads (relative to its directory) but
// the agent of node 0, which runs the job's source, does not have. That is
// a mistake in the command, which no restart mends: the run must fail at
// once, before a worker starts, with an error naming the file and the
// agent. It used to start the worker, whose source failed, restart it until
// the restart policy gave up, and report that.
func TestAWordCountInputMissingOnItsAgentFailsTheRunAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs an agent process")
	}
	skipUnderRace(t)
	bin := buildLoadgen(t)
	dir, agentDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "words.txt"), []byte("a b c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The agent runs where words.txt is not.
	addr, log := startAgentProcess(t, bin, filepath.Join(agentDir, "data"), agentDir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	co := exec.CommandContext(ctx, bin, "coordinate", "--scenario", "wordcount", "--agents", addr,
		"--input", "words.txt", "--output", filepath.Join(dir, "counts.tsv"), "--max-restarts", "3")
	var stderr bytes.Buffer
	co.Dir, co.Stderr = dir, &stderr
	err := co.Run()
	msg := stderr.String()
	if err == nil {
		t.Fatalf("coordinate succeeded although its agent has no input:\n%s", msg)
	}
	if !strings.Contains(msg, "agent "+addr) || !strings.Contains(msg, "open words.txt") || strings.Contains(msg, "restart policy") {
		t.Fatalf("coordinate failed with\n%s\nwant an error naming agent %s and the input words.txt, not the restart policy", tail(stderr.Bytes(), 3000), addr)
	}
	if strings.Contains(log.String(), "started worker") {
		t.Errorf("the agent started a worker for a job whose input it does not have:\n%s", log.String())
	}
}

// startAgentProcess starts bin's agent on a free loopback port, keeping its
// data in dataDir and running in workDir ("": the test's), and returns its
// address and its log once it listens. It is killed when the test ends.
func startAgentProcess(t *testing.T, bin, dataDir, workDir string) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the agent
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	log := &syncBuffer{}
	cmd := exec.Command(bin, "agent", "--listen", addr, "--data-dir", dataDir)
	cmd.Dir, cmd.Stderr = workDir, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	log.waitFor(t, "listening for coordinators")
	return addr, log
}

// TestAnAgentDropsOnlyAJobsOwnDirectoryAndNotWhileItRuns: a drop removes
// <data-dir>/<job> and nothing else; one that names no job id (a path, a
// name the directory holds for something else, nothing), of another
// protocol version, of a job whose worker runs, or from a peer without the
// key, is refused and removes nothing.
func TestAnAgentDropsOnlyAJobsOwnDirectoryAndNotWhileItRuns(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	job := control.NewJobID()
	files := []string{
		filepath.Join(work, job, "node0", "log"),
		filepath.Join(work, "other", "node0", "log"), // not a job id: kept
		filepath.Join(work, "keep"),
		filepath.Join(root, "outside"),
	}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	allThere := func(t *testing.T) {
		t.Helper()
		for _, f := range files {
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("a refused drop removed something: %v", err)
			}
		}
	}
	key := []byte("0123456789abcdef0123456789abcdef")
	a := startAgentWith(t, func(a *agent) { a.workDir = work })
	keyed := startAgentWith(t, func(a *agent) { a.workDir, a.key = work, key })
	drop := func(t *testing.T, p control.WorkerPlan) control.Msg {
		t.Helper()
		cc := dialCtl(t, a.addr)
		if err := cc.Send(control.Msg{Kind: control.KindDrop, Worker: &p}); err != nil {
			t.Fatal(err)
		}
		return recvType(t, cc)
	}

	refused := []struct {
		name string
		p    control.WorkerPlan
		want string
	}{
		{"the parent directory", control.WorkerPlan{Version: control.Version, Job: ".."}, "not a job id"},
		{"the directory itself", control.WorkerPlan{Version: control.Version, Job: "."}, "not a job id"},
		{"no job", control.WorkerPlan{Version: control.Version, Job: ""}, "not a job id"},
		{"a path out of the directory", control.WorkerPlan{Version: control.Version, Job: "../outside"}, "not a job id"},
		{"a path through a job out of the directory", control.WorkerPlan{Version: control.Version, Job: job + "/../.."}, "not a job id"},
		{"an absolute path", control.WorkerPlan{Version: control.Version, Job: root}, "not a job id"},
		{"a slash", control.WorkerPlan{Version: control.Version, Job: "/"}, "not a job id"},
		{"a name in the directory that is no job id", control.WorkerPlan{Version: control.Version, Job: "other"}, "not a job id"},
		{"another protocol version", control.WorkerPlan{Version: control.Version + 1, Job: job}, "control protocol version"},
	}
	for _, c := range refused {
		t.Run("a drop of "+c.name+" is refused", func(t *testing.T) {
			if m := drop(t, c.p); m.Kind != control.KindError || !strings.Contains(m.Error, c.want) {
				t.Fatalf("got %q %q, want an error saying %q", m.Kind, m.Error, c.want)
			}
			allThere(t)
		})
	}

	t.Run("a drop from a peer without the key is refused", func(t *testing.T) {
		cc := dialCtl(t, keyed.addr)
		if err := cc.Send(control.Msg{Kind: control.KindDrop, Worker: &control.WorkerPlan{Version: control.Version, Job: job}}); err != nil {
			t.Fatal(err)
		}
		// The agent's challenge, then its verdict, then the end.
		for {
			if _, err := cc.Recv(5 * time.Second); err != nil {
				break
			}
		}
		keyed.log.waitFor(t, "refused coordinator")
		allThere(t)
	})

	t.Run("a drop of a job whose worker runs is refused", func(t *testing.T) {
		if err := a.workers.begin(job); err != nil {
			t.Fatal(err)
		}
		m := drop(t, control.WorkerPlan{Version: control.Version, Job: job})
		a.workers.end(job)
		if m.Kind != control.KindError || !strings.Contains(m.Error, "still run here") {
			t.Fatalf("got %q %q, want an error saying a worker still runs", m.Kind, m.Error)
		}
		allThere(t)
	})

	t.Run("a drop removes the job's directory and nothing else", func(t *testing.T) {
		if m := drop(t, control.WorkerPlan{Version: control.Version, Job: job}); m.Kind != control.KindDropped {
			t.Fatalf("got %q %q, want dropped", m.Kind, m.Error)
		}
		if _, err := os.Stat(filepath.Join(work, job)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the job's directory is still there (%v)", err)
		}
		for _, f := range files[1:] {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("the drop removed more than its job: %v", err)
			}
		}
		// Dropping what is gone is done at once: a coordinator that
		// retries, or drops a job on an agent whose worker never wrote,
		// is answered the same.
		if m := drop(t, control.WorkerPlan{Version: control.Version, Job: job}); m.Kind != control.KindDropped {
			t.Fatalf("dropping it again: got %q %q, want dropped", m.Kind, m.Error)
		}
	})

	t.Run("a worker of a job being dropped is refused", func(t *testing.T) {
		a.workers.mu.Lock()
		a.workers.dropping[job] = true
		a.workers.mu.Unlock()
		err := a.workers.begin(job)
		a.workers.mu.Lock()
		delete(a.workers.dropping, job)
		a.workers.mu.Unlock()
		if err == nil || !strings.Contains(err.Error(), "being dropped") {
			t.Fatalf("begin: %v, want it refused while the job is being dropped", err)
		}
	})
}
