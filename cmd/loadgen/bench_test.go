package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// issue14 is what loadgen bench must report for each topology, written out
// from issue 14 rather than taken from the command: the figure, what it is
// held against, and its goal (nil: shown for comparison only).
var issue14 = append([]wantRow{
	{"tcp-ceiling", "msgs_per_s", "", nil},
	{"tcp-ceiling/slower", "msgs_per_s", "", nil},
	{"tcp-flow", "msgs_per_s", "tcp-ceiling", nil},
	{"max-runs/default", "msgs_per_s", "tcp-ceiling", &bench.Goal{On: "ratio", Op: ">=", Limit: 0.8}},
	{"max-runs/default", "msgs_per_s", "tcp-flow", nil},
	{"max-send/default", "msgs_per_s", "tcp-ceiling", &bench.Goal{On: "ratio", Op: ">=", Limit: 0.8}},
	{"max-runs/net", "msgs_per_s", "tcp-ceiling", nil},
	{"max-send/net", "msgs_per_s", "tcp-ceiling", nil},
	{"fixed/driver", "p50_us", "", nil},
	{"fixed/driver", "p99_us", "", nil},
	{"fixed/driver", "p999_us", "", nil},
	{"fixed/driver", "max_lag_us", "", nil},
	{"fixed/default", "p50_us", "fixed/tcp", nil},
	{"fixed/default", "p99_us", "fixed/tcp", &bench.Goal{On: "value", Op: "<=", Limit: 1000}},
	{"fixed/default", "p99_us", "fixed/net", &bench.Goal{On: "ratio", Op: "<=", Limit: 1.25}},
	{"fixed/default", "p999_us", "fixed/tcp", &bench.Goal{On: "value", Op: "<=", Limit: 2000}},
	{"fixed/default", "max_lag_us", "fixed/tcp", nil},
	{"fixed/net", "p50_us", "fixed/tcp", nil},
	{"fixed/net", "p99_us", "fixed/tcp", nil},
	{"fixed/net", "p999_us", "fixed/tcp", nil},
	{"fixed/net", "max_lag_us", "fixed/tcp", nil},
	{"pingpong/default", "p50_us", "pingpong/tcp", &bench.Goal{On: "ratio", Op: "<=", Limit: 2}},
	{"pingpong/default", "p99_us", "pingpong/tcp", &bench.Goal{On: "ratio", Op: "<=", Limit: 4}},
	{"pingpong/default/hand-off", "p50_us", "pingpong/tcp", nil},
	{"pingpong/default/hand-off", "p99_us", "pingpong/tcp", nil},
	{"pingpong/net", "p50_us", "pingpong/tcp", nil},
	{"pingpong/net", "p99_us", "pingpong/tcp", nil},
	{"pingpong/tcp/hand-off", "p50_us", "pingpong/tcp", nil},
	{"pingpong/default", "p50_us", "pingpong/tcp/hand-off", nil},
	{"pingpong/tcp/hand-off", "p99_us", "pingpong/tcp", nil},
	{"pingpong/default", "p99_us", "pingpong/tcp/hand-off", nil},
}, append(cpuRows(), stallRows()...)...)

// wantRow is a row loadgen bench must print: a run's metric, the run it is
// held against ("": none), and its goal.
type wantRow struct {
	run, metric, baseRun string
	goal                 *bench.Goal
}

// cpuCases are the runs that measure their CPU time, the ceiling first.
var cpuCases = []string{"tcp-ceiling", "max-runs/default", "max-send/default", "max-runs/net", "max-send/net"}

// readsCPU says whether loadgen bench reads process CPU time here (Linux's
// /proc).
var readsCPU = runtime.GOOS == "linux"

// cpuRows are the rows beside issue 14's where process CPU time can be
// read: each throughput case's CPU per message, both ends together,
// against the ceiling's.
func cpuRows() []wantRow {
	if !readsCPU {
		return nil
	}
	rows := []wantRow{{cpuCases[0], "cpu_ns_per_msg", "", nil}}
	for _, id := range cpuCases[1:] {
		rows = append(rows, wantRow{id, "cpu_ns_per_msg", cpuCases[0], nil})
	}
	return rows
}

// probesStalls says whether loadgen bench measures the CPUs' stalls here
// (bench.MeasureStalls: Linux).
var probesStalls = runtime.GOOS == "linux"

// stallRows are the rows of the CPU stalls measured before the fixed-rate
// cases, where they are measured: figures alone, no baseline, no goal.
func stallRows() []wantRow {
	if !probesStalls {
		return nil
	}
	var rows []wantRow
	for _, m := range []string{"longest_us", "over_1ms_count", "host_longest_us", "host_over_1ms_count", "lost_share"} {
		rows = append(rows, wantRow{"fixed/stalls", m, "", nil})
	}
	return rows
}

// checked are the runs whose delivery is checked message by message.
var checked = []string{"tcp-ceiling", "tcp-ceiling/slower", "tcp-flow", "max-runs/default", "max-runs/net", "max-send/default", "max-send/net",
	"fixed/tcp", "fixed/default", "fixed/net"}

// TestBenchReportsEveryFigure runs loadgen bench, built as a binary so that
// it can re-execute itself, with cases of 100 ms in both topologies, and
// checks its scorecard against issue 14 and against itself: every case is
// there, every ratio is the quotient of the two figures the scorecard
// holds, every verdict follows from the goal, every checked run was exactly
// once, and the two-process cases ran in another process. No figure is
// asserted: the machine's speed is what the command reports, not what the
// test checks.
func TestBenchReportsEveryFigure(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs 34 cases of 100 ms")
	}
	out := t.TempDir()
	sc, text, cmd := runBench(t, buildLoadgen(t), "--duration", "100ms", "--out", out)
	benchPID := cmd.Process.Pid
	written, err := bench.ReadScorecard(filepath.Join(out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(written.Rows) != len(sc.Rows) || len(written.Runs) != len(sc.Runs) || written.GoalsMet != sc.GoalsMet {
		t.Errorf("bench.json holds %d rows, %d runs, %d goals met; stdout %d, %d, %d",
			len(written.Rows), len(written.Runs), written.GoalsMet, len(sc.Rows), len(sc.Runs), sc.GoalsMet)
	}
	md, err := os.ReadFile(filepath.Join(out, "bench.md"))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Machine.CPU == "" || !strings.Contains(text, "machine: "+sc.Machine.String()) {
		t.Errorf("the table does not start with the machine (%q):\n%s", sc.Machine, text)
	}

	runs := map[string]bench.Run{}
	for _, r := range sc.Runs {
		runs[r.ID] = r
	}
	figure := func(id, metric string) float64 {
		t.Helper()
		r, ok := runs[id]
		if !ok {
			t.Fatalf("no run %s", id)
		}
		v, ok := r.Figures[metric]
		if !ok {
			t.Fatalf("run %s has no %s", id, metric)
		}
		return v
	}
	goals, met := 0, 0
	for _, topo := range []struct{ prefix, name string }{{"1p/", topoOne}, {"2p/", topoTwo}} {
		for _, id := range checked {
			r := runs[topo.prefix+id]
			if r.ExactlyOnce == nil || !*r.ExactlyOnce || r.Delivery == nil || r.Sent == 0 ||
				r.Delivery.Delivered != r.Sent || r.Delivery.Duplicates != 0 || r.Delivery.Missing != 0 {
				t.Errorf("%s%s: delivery %+v of %d sent, exactly once %v", topo.prefix, id, r.Delivery, r.Sent, r.ExactlyOnce)
			}
		}
		for _, r := range sc.Runs {
			if !strings.HasPrefix(r.ID, topo.prefix) {
				continue
			}
			if r.Topology != topo.name {
				t.Errorf("run %s is labelled %q, want %q", r.ID, r.Topology, topo.name)
			}
			switch {
			case strings.HasSuffix(r.ID, "fixed/driver"), strings.HasSuffix(r.ID, "fixed/stalls"):
				// The driver alone and the stall probe have no receiving
				// end: they run in bench.
				if r.PID != benchPID {
					t.Errorf("run %s ran in pid %d, not in loadgen bench's %d", r.ID, r.PID, benchPID)
				}
			case topo.prefix == "1p/" && r.PID != benchPID:
				t.Errorf("run %s received in pid %d, not in loadgen bench's own process %d", r.ID, r.PID, benchPID)
			case topo.prefix == "2p/" && (r.PID == benchPID || r.PID <= 0):
				t.Errorf("run %s received in pid %d, but loadgen bench is %d: it did not run in a second process", r.ID, r.PID, benchPID)
			}
		}
		for _, want := range issue14 {
			id := topo.prefix + want.run
			var row *bench.Row
			for i, r := range sc.Rows {
				base := ""
				if r.Baseline != nil {
					base = r.Baseline.Run
				}
				if r.Figure.Run == id && r.Figure.Metric == want.metric && base == prefixed(topo.prefix, want.baseRun) {
					row = &sc.Rows[i]
					break
				}
			}
			if row == nil {
				t.Errorf("no row for %s %s against %q", id, want.metric, want.baseRun)
				continue
			}
			if row.Topology != topo.name {
				t.Errorf("row %q is labelled %q, want %q", row.What, row.Topology, topo.name)
			}
			if !strings.Contains(string(md), row.What) || !strings.Contains(text, row.What) {
				t.Errorf("row %q is missing from bench.md or the table", row.What)
			}
			v := figure(id, want.metric)
			if row.Value != v {
				t.Errorf("row %q shows %v, run %s holds %v", row.What, row.Value, id, v)
			}
			ratio := 0.0
			if want.baseRun != "" {
				bv := figure(topo.prefix+want.baseRun, want.metric)
				ratio = v / bv
				if row.BaselineValue != bv || row.Ratio != ratio {
					t.Errorf("row %q: baseline %v ratio %v; the runs give %v and %v / %v = %v",
						row.What, row.BaselineValue, row.Ratio, bv, v, bv, ratio)
				}
			}
			switch {
			case want.goal == nil && row.Goal != nil:
				t.Errorf("row %q has goal %+v, issue 14 sets none", row.What, *row.Goal)
			case want.goal != nil && (row.Goal == nil || *row.Goal != *want.goal || row.Met == nil):
				t.Errorf("row %q has goal %v (met %v), want %+v", row.What, row.Goal, row.Met, *want.goal)
			case want.goal != nil:
				x := v
				if want.goal.On == "ratio" {
					x = ratio
				}
				should := x <= want.goal.Limit
				if want.goal.Op == ">=" {
					should = x >= want.goal.Limit
				}
				if *row.Met != should {
					t.Errorf("row %q: %v against %s %v says met=%v", row.What, x, want.goal.Op, want.goal.Limit, *row.Met)
				}
				verdict := "met"
				if !should {
					verdict = "NOT met"
				}
				if !tableRowSays(text, row.What, row.GoalText, verdict) {
					t.Errorf("the table's row %q does not say %q and %q", row.What, row.GoalText, verdict)
				}
				goals++
				if should {
					met++
				}
			}
		}
	}
	// Across two processes, and there only, the runs case again with the
	// sending process at one P: a diagnostic beside the same ceiling, with
	// no goal, that did run at one P, exactly once, in another process.
	if _, ok := runs["1p/"+oneP]; ok {
		t.Errorf("one process measured %s, in which the receiving node would share the sender's one P", oneP)
	}
	diag := 0
	for _, r := range sc.Rows {
		if r.Figure.Run != "2p/"+oneP && r.Figure.Run != "2p/tcp-flow/gomaxprocs1" {
			continue
		}
		diag++
		v, bv := figure(r.Figure.Run, "msgs_per_s"), figure("2p/tcp-ceiling", "msgs_per_s")
		if r.Figure.Metric != "msgs_per_s" || r.Baseline == nil || r.Baseline.Run != "2p/tcp-ceiling" || r.Goal != nil ||
			r.Value != v || r.BaselineValue != bv || r.Ratio != v/bv {
			t.Errorf("the diagnostic row %+v: want %v msgs/s against the ceiling's %v, no goal", r, v, bv)
		}
	}
	if diag != 2 {
		t.Errorf("%d rows of the sending process at one P, want 2", diag)
	}
	if p := figure("2p/"+oneP, "sender_gomaxprocs"); p != 1 {
		t.Errorf("the run at one P ran at GOMAXPROCS=%v", p)
	}
	// loadgen bench runs with this test's environment, so at its
	// GOMAXPROCS (1 on a machine of one CPU: the two runs then differ in
	// nothing).
	if p, q := figure("2p/tcp-flow/gomaxprocs1", "sender_gomaxprocs"), figure("2p/tcp-flow", "sender_gomaxprocs"); p != 1 || q != float64(runtime.GOMAXPROCS(0)) {
		t.Errorf("plain TCP with flow control ran at GOMAXPROCS=%v (want %d), and at one P at %v", q, runtime.GOMAXPROCS(0), p)
	}
	if _, ok := runs["1p/tcp-flow/gomaxprocs1"]; ok {
		t.Error("one process measured plain TCP with flow control at one P")
	}
	if r := runs["2p/"+oneP]; r.ExactlyOnce == nil || !*r.ExactlyOnce || r.Sent == 0 {
		t.Errorf("2p/%s: %d sent, exactly once %v", oneP, r.Sent, r.ExactlyOnce)
	}
	if len(sc.Rows) != 2*len(issue14)+2 {
		t.Errorf("%d rows, want %d", len(sc.Rows), 2*len(issue14)+2)
	}
	for _, topo := range []string{"1p/", "2p/"} {
		if !probesStalls {
			break
		}
		longest, host, share := figure(topo+"fixed/stalls", "longest_us"), figure(topo+"fixed/stalls", "host_longest_us"), figure(topo+"fixed/stalls", "lost_share")
		if host > longest || !(share >= 0 && share <= 1) {
			t.Errorf("%sfixed/stalls: longest %v µs, the host's %v µs, %v of the time lost", topo, longest, host, share)
		}
	}
	for _, topo := range []string{"1p/", "2p/"} {
		if !readsCPU {
			break
		}
		for _, id := range cpuCases {
			if c := figure(topo+id, "cpu_cores"); !(c > 0) {
				t.Errorf("run %s%s used %v cores", topo, id, c)
			}
			// Across two processes each one's share is there, and
			// they add up to the whole.
			if topo == "2p/" {
				tx, rx, all := figure(topo+id, "tx_cpu_ns_per_msg"), figure(topo+id, "rx_cpu_ns_per_msg"), figure(topo+id, "cpu_ns_per_msg")
				if !(tx > 0 && rx > 0) || math.Abs(tx+rx-all) > 1e-6*all {
					t.Errorf("run %s%s: %v + %v ns of CPU per message in the sending and receiving processes, %v in all", topo, id, tx, rx, all)
				}
			}
		}
	}
	// The ceiling the transport is held against is the faster of its
	// two measurements, one before and one after the transport's cases.
	for _, topo := range []string{"1p/", "2p/"} {
		fast, slow := figure(topo+"tcp-ceiling", "msgs_per_s"), figure(topo+"tcp-ceiling/slower", "msgs_per_s")
		if fast < slow {
			t.Errorf("%s: the ceiling reads %v msgs/s, its other measurement %v", topo, fast, slow)
		}
		whens := []string{runs[topo+"tcp-ceiling"].Case, runs[topo+"tcp-ceiling/slower"].Case}
		if !slices.ContainsFunc(whens, func(c string) bool { return strings.HasSuffix(c, "before the transport's cases") }) ||
			!slices.ContainsFunc(whens, func(c string) bool { return strings.HasSuffix(c, "after the transport's cases") }) {
			t.Errorf("%s: the ceiling's two measurements are %q", topo, whens)
		}
	}
	if sc.Goals != goals || sc.GoalsMet != met {
		t.Errorf("the scorecard counts %d of %d goals met; its rows say %d of %d", sc.GoalsMet, sc.Goals, met, goals)
	}
}

// runBench runs the loadgen binary bin as 'bench args... --json' and
// returns the scorecard on the last line of its output, the rest of the
// output (the table), and the finished command.
func runBench(t *testing.T, bin string, args ...string) (bench.Scorecard, string, *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"bench"}, args...), "--json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("loadgen bench: %v\n%s", err, tail(stderr.Bytes(), 3000))
	}
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	var sc bench.Scorecard
	if err := json.Unmarshal(lines[len(lines)-1], &sc); err != nil {
		t.Fatalf("the last line of loadgen bench's output is not the scorecard: %v", err)
	}
	return sc, string(bytes.Join(lines[:len(lines)-1], []byte("\n"))), cmd
}

func prefixed(prefix, id string) string {
	if id == "" {
		return ""
	}
	return prefix + id
}

// tableRowSays reports whether a line of the printed table holds what, the
// goal and the verdict as its last column.
func tableRowSays(text, what, goal, verdict string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, what) && strings.Contains(l, goal) && strings.HasSuffix(strings.TrimSpace(l), verdict) {
			if verdict == "met" && strings.HasSuffix(strings.TrimSpace(l), "NOT met") {
				continue
			}
			return true
		}
	}
	return false
}

func TestBenchRefusesBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--size", "8"}, "--size 8"},
		{[]string{"--size", "70000"}, "--size 70000"},
		{[]string{"--duration", "0s"}, "--duration must be positive"},
		{[]string{"--rate", "0"}, "--rate must be a positive"},
		{[]string{"--topology", "three"}, "--topology must be one, two or both"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--cases", "fixed,speed"}, `--cases: unknown group "speed"`},
		{[]string{"--cases", ""}, `--cases: unknown group ""`},
		{[]string{"--repeat", "0"}, "--repeat must be at least 1, got 0"},
		{[]string{"--peers", "0"}, "--peers must be 1 to 256, got 0"},
		{[]string{"--peers", "257"}, "--peers must be 1 to 256, got 257"},
	} {
		err := run(context.Background(), append([]string{"bench"}, c.args...), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("loadgen bench %v: error %v, want one saying %q", c.args, err, c.want)
		}
	}
}

// The second process answers every line, a bad one with an error and its
// pid, and keeps serving after it.
// A request line longer than any spec ends benchpeer with an error that
// says what it was reading and the limit, not a bare "token too long".
func TestBenchPeerRefusesAnOverlongRequestClearly(t *testing.T) {
	in := `{"op":"finish","kind":"` + strings.Repeat("x", maxSpecLine) + "\"}\n"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := benchPeerCmd(ctx, nil, strings.NewReader(in), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "benchpeer: reading a request") || !strings.Contains(err.Error(), "at most 65536 bytes") {
		t.Fatalf("error %v, want one that says a request line is at most 65536 bytes", err)
	}
}

func TestBenchPeerAnswersBadRequests(t *testing.T) {
	in := strings.Join([]string{
		`not json`,
		`{"op":"start","kind":"no-such-side","size":100}`,
		`{"op":"start","kind":"tcp-packed","size":8}`,
		`{"op":"start","kind":"node-sink","backend":"carrier-pigeon","size":100}`,
		`{"op":"finish"}`,
		`{"op":"dance"}`,
		`{"op":"start","kind":"tcp-echo","size":100}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	// The last side is left running and closed when stdin ends; its
	// listener never sees a connection, so it is finished by closing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := benchPeerCmd(ctx, nil, strings.NewReader(in), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	wantErr := []string{"invalid character", "unknown side", "message size 8", "unknown backend", "finish without a side", "unknown op", ""}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(wantErr) {
		t.Fatalf("%d answers to %d requests:\n%s", len(lines), len(wantErr), out.String())
	}
	for i, l := range lines {
		var r sideReply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("answer %d is not JSON: %v", i, err)
		}
		if r.PID != os.Getpid() {
			t.Errorf("answer %d: pid %d, want %d", i, r.PID, os.Getpid())
		}
		switch {
		case wantErr[i] == "" && (r.Err != "" || r.Addr == ""):
			t.Errorf("answer %d: %+v, want an address", i, r)
		case wantErr[i] != "" && !strings.Contains(r.Err, wantErr[i]):
			t.Errorf("answer %d: error %q, want one saying %q", i, r.Err, wantErr[i])
		}
	}
}

// TestBenchCountsCPU runs only the throughput cases, so that they are most
// of what loadgen bench does, and holds the CPU time they report against
// what the system says loadgen bench and its second process used in all
// (waiting for a process counts its waited-for children too): counting a
// process twice, or in the wrong unit, would exceed it, and missing one
// would fall well below it.
func TestBenchCountsCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs 16 cases of 400 ms")
	}
	if !readsCPU {
		t.Skip("process CPU time is read from Linux's /proc")
	}
	sc, _, cmd := runBench(t, buildLoadgen(t), "--cases", "throughput", "--duration", "400ms", "--out", t.TempDir())
	var counted time.Duration
	n := 0
	for _, r := range sc.Runs {
		v, ok := r.Figures["cpu_ns_per_msg"]
		if !ok {
			continue
		}
		n++
		counted += time.Duration(v * float64(r.Delivery.Delivered))
	}
	// Each topology's cases that have a CPU row, and the ceiling's
	// slower measurement and plain TCP with flow control, which have
	// none; across two processes, also the runs case and plain TCP with
	// flow control at one P, which have none either.
	if want := 2*(len(cpuCases)+2) + 2; n != want {
		t.Fatalf("%d runs report their CPU, want %d", n, want)
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	// Each case reads one or two processes at its start and end, in steps
	// of 10 ms.
	slack := time.Duration(2*2*n) * 10 * time.Millisecond
	if counted > used+slack || counted < used*17/20 {
		t.Errorf("the throughput cases counted %v of CPU; loadgen bench and its second process used %v in all", counted, used)
	}
	t.Logf("the cases counted %v of the %v used", counted, used)
}

// In one process every side runs in the test's own process, so the race
// detector sees both halves of every case.
func TestBenchInOneProcess(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"bench", "--topology", "one", "--duration", "50ms", "--out", out}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	sc, err := bench.ReadScorecard(filepath.Join(out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	runs := 16
	if probesStalls {
		runs++
	}
	if len(sc.Runs) != runs || len(sc.Rows) != len(issue14) || !sc.ExactlyOnce {
		t.Errorf("%d runs, %d rows, exactly once %v; want %d, %d, true", len(sc.Runs), len(sc.Rows), sc.ExactlyOnce, runs, len(issue14))
	}
	for _, r := range sc.Runs {
		if r.PID != os.Getpid() || r.Topology != topoOne || !strings.HasPrefix(r.ID, "1p/") {
			t.Errorf("run %s: %s, pid %d; want one process, pid %d", r.ID, r.Topology, r.PID, os.Getpid())
		}
	}
	if strings.Contains(stdout.String(), "\n"+topoTwo) {
		t.Error("--topology one measured two processes")
	}
}

// When the second process dies mid-run, loadgen bench stops and says so,
// naming the process, rather than waiting out the case.
func TestBenchReportsADeadSecondProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen")
	}
	bin := buildLoadgen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--topology", "two", "--duration", "2s", "--out", t.TempDir())
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first case's line names the second process; kill it then.
	var seen bytes.Buffer
	var child int
	sc := bufio.NewScanner(stderr)
	for child == 0 && sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		if _, after, ok := strings.Cut(sc.Text(), "(receiver pid "); ok {
			child, _ = strconv.Atoi(strings.TrimSuffix(strings.Fields(after)[0], "):"))
		}
	}
	if child == 0 || child == cmd.Process.Pid {
		t.Fatalf("no second process named (pid %d, bench %d):\n%s", child, cmd.Process.Pid, seen.String())
	}
	p, err := os.FindProcess(child)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("killing the second process %d: %v", child, err)
	}
	rest, _ := io.ReadAll(stderr)
	seen.Write(rest)
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("loadgen bench ended with %v, want exit status 2", err)
	}
	if want := fmt.Sprintf("the second process (pid %d) exited: signal: killed", child); !strings.Contains(seen.String(), want) {
		t.Errorf("loadgen bench does not say %q:\n%s", want, seen.String())
	}
}

// --cases measures the groups it names, each with its own baselines, and
// no others.
func TestBenchCasesSelectGroups(t *testing.T) {
	out := t.TempDir()
	if err := run(context.Background(), []string{"bench", "--topology", "one", "--cases", "pingpong", "--duration", "50ms", "--out", out}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	sc, err := bench.ReadScorecard(filepath.Join(out, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, r := range sc.Runs {
		runs = append(runs, r.ID)
	}
	if want := []string{"1p/pingpong/tcp", "1p/pingpong/tcp/hand-off", "1p/pingpong/default", "1p/pingpong/default/hand-off", "1p/pingpong/net"}; !slices.Equal(runs, want) {
		t.Errorf("runs %v, want %v", runs, want)
	}
	rows := 0
	for _, w := range issue14 {
		if strings.HasPrefix(w.run, "pingpong/") {
			rows++
		}
	}
	if len(sc.Rows) != rows || sc.Goals != 2 {
		t.Errorf("%d rows, %d goals; want %d rows, 2 goals", len(sc.Rows), sc.Goals, rows)
	}
}

// The peers group sends from one node to --peers nodes, with each backend,
// at full speed and at the fixed rate, beside plain TCP to as many
// connections: in both topologies every message reaches its peer exactly
// once, every peer gets some, the receiving side runs in the second process
// across two, and the rows compare the default backend with the net
// backend and plain TCP. It is not among the default groups.
func TestBenchPeersReachesEveryPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs 10 cases of 100 ms")
	}
	const peers = 5
	sc, _, cmd := runBench(t, buildLoadgen(t), "--cases", "peers", "--peers", strconv.Itoa(peers), "--duration", "100ms", "--rate", "5000", "--out", t.TempDir())
	var ids []string
	for _, r := range sc.Runs {
		ids = append(ids, r.ID)
		if r.Sent == 0 || r.ExactlyOnce == nil || !*r.ExactlyOnce || r.Delivery == nil || r.Delivery.Delivered != r.Sent {
			t.Errorf("%s: %d sent, delivery %+v, exactly once %v", r.ID, r.Sent, r.Delivery, r.ExactlyOnce)
		}
		if got := r.Figures["peers_reached"]; got != peers && r.Subject != "plain TCP" {
			t.Errorf("%s: messages went to %v peers, want %d", r.ID, got, peers)
		}
		if strings.Contains(r.ID, "/fixed/") && (r.Figures["p99_us"] <= 0 || r.Figures["p50_us"] > r.Figures["p99_us"]) {
			t.Errorf("%s: latency figures %v", r.ID, r.Figures)
		}
		if two := strings.HasPrefix(r.ID, "2p/"); two == (r.PID == cmd.Process.Pid) {
			t.Errorf("%s received in pid %d (loadgen bench's is %d)", r.ID, r.PID, cmd.Process.Pid)
		}
	}
	var want []string
	for _, topo := range []string{"1p/", "2p/"} {
		for _, id := range []string{"peers/default", "peers/net", "peers/fixed/tcp", "peers/fixed/default", "peers/fixed/net"} {
			want = append(want, topo+id)
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("runs %v, want %v", ids, want)
	}
	rows := map[string]int{}
	for _, r := range sc.Rows {
		rows[r.What]++
	}
	for _, want := range []string{
		"throughput to 5 peers: runs, default vs net backend",
		"fixed 5000 msgs/s to 5 peers: p99, default vs net backend",
		"fixed 5000 msgs/s to 5 peers: p99, default backend",
		"fixed 5000 msgs/s to 5 peers: p99, plain TCP, 5 connections",
	} {
		if rows[want] != 2 {
			t.Errorf("row %q printed %d times, want once a topology", want, rows[want])
		}
	}
	if sc.Goals != 0 {
		t.Errorf("%d goals, want none: issue 14 sets none for many peers", sc.Goals)
	}
}

// --repeat measures everything that many times, writes each run's
// scorecard apart, and a summary whose figures are those scorecards' own.
func TestBenchRepeatSummarizes(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	args := []string{"bench", "--topology", "one", "--cases", "pingpong", "--duration", "50ms", "--repeat", "2", "--out", out, "--json"}
	if err := run(context.Background(), args, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	var cards []*bench.Scorecard
	for _, k := range []string{"1", "2"} {
		sc, err := bench.ReadScorecard(filepath.Join(out, k, "bench.json"))
		if err != nil {
			t.Fatal(err)
		}
		cards = append(cards, sc)
	}
	if !cards[1].StartedAt.After(cards[0].StartedAt) {
		t.Errorf("run 2 started at %v, run 1 at %v: not two runs", cards[1].StartedAt, cards[0].StartedAt)
	}
	if _, err := os.Stat(filepath.Join(out, "summary.md")); err != nil {
		t.Error(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var sum struct {
		Goals int `json:"goals"`
		Rows  []struct {
			What string     `json:"what"`
			On   string     `json:"on"`
			Each []*float64 `json:"each"`
			Met  int        `json:"met"`
		} `json:"rows"`
		ExactlyOnce bool `json:"exactly_once"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("the last line is not the summary: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(compactJSON(t, b)), bytes.TrimSpace([]byte(lines[len(lines)-1]))) {
		t.Error("the summary printed is not the one written")
	}
	if len(sum.Rows) != len(cards[0].Rows) || sum.Goals != 2 || !sum.ExactlyOnce {
		t.Fatalf("summary of %d rows, %d goals, exactly once %v; the runs have %d rows", len(sum.Rows), sum.Goals, sum.ExactlyOnce, len(cards[0].Rows))
	}
	for i, r := range sum.Rows {
		met := 0
		for k, sc := range cards {
			row := sc.Rows[i]
			want := row.Value
			if r.On == "ratio" {
				want = row.Ratio
			}
			if r.What != row.What || r.Each[k] == nil || *r.Each[k] != want {
				t.Errorf("row %q, run %d: %v in the summary, %v in the scorecard", r.What, k+1, r.Each[k], want)
			}
			if row.Met != nil && *row.Met {
				met++
			}
		}
		if r.Met != met {
			t.Errorf("row %q: met in %d runs by the summary, %d by the scorecards", r.What, r.Met, met)
		}
	}
}

func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// An --out that cannot take bench.json is refused with the other flags,
// before any case runs: it was found only when the scorecard was written,
// after every case (minutes of measurement), with 'mkdir X: not a
// directory'. The context is cancelled and the run as small as bench
// allows, so that code which does not check --out first measures nearly
// nothing before the test sees it.
func TestBenchRefusesAnOutThatCannotBeWrittenBeforeMeasuring(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"bench", "--topology", "one", "--cases", "pingpong", "--duration", "1ms", "--out", file}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "--out "+file) {
		t.Errorf("loadgen bench --out %s: error %v, want one naming --out", file, err)
	}
	if strings.Contains(stderr.String(), "cases of") || stdout.Len() > 0 {
		t.Errorf("loadgen bench --out %s began measuring before refusing it:\n%s%s", file, stderr.String(), stdout.String())
	}
}
