package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// netnsHosts is network namespaces joined by a bridge: hosts, as far as
// TCP can tell, with their own loopbacks, addresses and ports.
type netnsHosts struct {
	ns   []string // namespace names
	addr []string // their addresses on the bridged link
}

var netnsSeq atomic.Int32

// newNetnsHosts builds n hosts out of network namespaces, joined by a
// bridge in a namespace of its own, and removes them when the test ends,
// whether it passed or not. It skips the test, saying why, when this
// process is not root, `ip` is missing, or the kernel refuses to create
// namespaces, veth pairs or bridges (a container without CAP_SYS_ADMIN).
func newNetnsHosts(t *testing.T, n int) *netnsHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: building hosts out of network namespaces needs root (ip netns); run the tests as root to cover loadgen across hosts")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("skipping: the ip command (iproute2) is needed for network namespaces: %v", err)
	}
	seq := netnsSeq.Add(1)
	id := fmt.Sprintf("%d-%d", os.Getpid(), seq)
	h := &netnsHosts{}
	ipCmd := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	addNS := func(ns string) {
		if err := ipCmd("netns", "add", ns); err != nil {
			t.Skipf("skipping: cannot create a network namespace here: %v", err)
		}
		t.Cleanup(func() {
			if err := ipCmd("netns", "del", ns); err != nil {
				t.Errorf("removing namespace %s: %v", ns, err)
			}
		})
	}
	sw := "sluice-sw-" + id
	addNS(sw)
	for _, s := range [][]string{{"-n", sw, "link", "add", "br0", "type", "bridge"}, {"-n", sw, "link", "set", "br0", "up"}} {
		if err := ipCmd(s...); err != nil {
			t.Skipf("skipping: cannot create a bridge here: %v", err)
		}
	}
	for i := range n {
		ns := fmt.Sprintf("sluice-%c-%s", 'a'+i, id)
		addNS(ns)
		h.ns = append(h.ns, ns)
		h.addr = append(h.addr, fmt.Sprintf("10.77.0.%d", i+1))
		// veth names are at most 15 bytes.
		host, port := fmt.Sprintf("sl%x%dh%d", os.Getpid()&0xffffff, seq%100, i), fmt.Sprintf("sl%x%ds%d", os.Getpid()&0xffffff, seq%100, i)
		if err := ipCmd("link", "add", host, "type", "veth", "peer", "name", port); err != nil {
			t.Skipf("skipping: cannot create a veth pair here: %v", err)
		}
		// Moved into the namespaces, the pair goes away with them; this
		// only matters if a step below fails before the move.
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
		steps := [][]string{
			{"link", "set", port, "netns", sw},
			{"-n", sw, "link", "set", port, "master", "br0"},
			{"-n", sw, "link", "set", port, "up"},
			{"link", "set", host, "netns", ns},
			{"-n", ns, "addr", "add", h.addr[i] + "/24", "dev", host},
			{"-n", ns, "link", "set", host, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
		}
		for _, s := range steps {
			if err := ipCmd(s...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return h
}

// proc is a loadgen process running in a namespace.
type proc struct {
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// start runs the loadgen binary with args in namespace ns; the process is
// killed when the test ends.
func (h *netnsHosts) start(t *testing.T, ns, bin string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	p := &proc{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("loadgen %s in %s wrote:\n%s%s", strings.Join(args, " "), ns, p.stdout, p.stderr)
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("loadgen %s still running after %v:\n%s", strings.Join(p.cmd.Args[3:], " "), timeout, p.stderr)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

// lastJSON decodes the last line of the process's stdout.
func (p *proc) lastJSON(t *testing.T) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(p.stdout.String()), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("the last stdout line is not a JSON report: %v\n%s", err, p.stdout)
	}
	return m
}

func checkExactlyOnce(t *testing.T, what string, r map[string]any, want float64) {
	t.Helper()
	if r["messages_sent"] != want || r["messages_delivered"] != want || r["duplicates"] != 0.0 || r["lost"] != 0.0 || r["exactly_once"] != true {
		t.Errorf("%s: sent %v, delivered %v, duplicates %v, lost %v, exactly once %v; want %v sent and delivered, none repeated or lost",
			what, r["messages_sent"], r["messages_delivered"], r["duplicates"], r["lost"], r["exactly_once"], want)
	}
}

// skipUnderRace skips a test whose work runs in loadgen processes built
// by buildLoadgen: the race detector does not instrument them, so it would
// check nothing there.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("skipping under the race detector: it does not instrument the loadgen processes")
	}
}

func buildLoadgen(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "loadgen")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestAcrossNetworkNamespaces runs loadgen between two hosts made of
// network namespaces: serve and send, then agents and coordinate, then
// coordinate against a stopped agent and an agent killed mid-run.
func TestAcrossNetworkNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds loadgen and runs it in network namespaces (about 10 s)")
	}
	h := newNetnsHosts(t, 2)
	bin := buildLoadgen(t)
	a, b := h.ns[0], h.ns[1]
	out := t.TempDir()

	t.Run("send in one host delivers exactly once to serve in the other", func(t *testing.T) {
		serve := h.start(t, a, bin, "serve", "--listen", h.addr[0]+":7400")
		serve.stderr.waitFor(t, "listening on")
		send := h.start(t, b, bin, "send", "--to", h.addr[0]+":7400", "--messages", "20000", "--channels", "4",
			"--json", "--out", filepath.Join(out, "send"), "--timeout", "20s")
		if code := send.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("send exited with %d:\n%s", code, send.stderr)
		}
		checkExactlyOnce(t, "send", send.lastJSON(t), 20000)
	})

	// Host A's clock is 3 s ahead of B's. send corrects its stamps by the
	// offset its node estimates from PING round trips: the latency serve
	// measures is right to within the error bound the report states. Told
	// to trust the clocks, it reports the 3 s.
	t.Run("send corrects for a host whose clock is 3 s ahead", func(t *testing.T) {
		const ahead = 3e9 // ns
		serve := h.start(t, a, bin, "serve", "--listen", h.addr[0]+":7401", "--clock-offset", "3s")
		serve.stderr.waitFor(t, "listening on")
		for _, correct := range []bool{true, false} {
			send := h.start(t, b, bin, "send", "--to", h.addr[0]+":7401", "--messages", "5000", "--rate", "10000",
				"--json", "--out", "", "--timeout", "20s", fmt.Sprintf("--clock-correction=%v", correct))
			if code := send.wait(t, 30*time.Second); code != 0 {
				t.Fatalf("send exited with %d:\n%s", code, send.stderr)
			}
			r := send.lastJSON(t)
			checkExactlyOnce(t, "send", r, 5000)
			p50 := r["latency_us"].(map[string]any)["p50"].(float64) * 1e3 // ns
			c, _ := r["clock_correction"].(map[string]any)
			if !correct {
				t.Logf("uncorrected: latency p50 %v ns", p50)
				if c["method"] != "none" || p50 < ahead*0.99 {
					t.Errorf("uncorrected: latency p50 %v ns with correction %v; want the clocks' 3 s in it", p50, c)
				}
				continue
			}
			if c == nil || c["method"] != "ping" {
				t.Fatalf("clock_correction %v, want the PING estimate", c)
			}
			lo, hi, bound := c["min_offset_ns"].(float64), c["max_offset_ns"].(float64), c["error_ns"].(float64)
			t.Logf("serve's clock estimated %v to %v ns ahead ± %v; latency p50 %v ns", lo, hi, bound, p50)
			if lo < ahead-bound || hi > ahead+bound || bound > 0.1*ahead {
				t.Errorf("offsets applied %v to %v ns ± %v; serve's clock is %v ns ahead", lo, hi, bound, ahead)
			}
			// A message takes between nothing and well under a second
			// here; the uncorrected clocks would add 3 s.
			if p50 < 0 || p50 > ahead/3 {
				t.Errorf("corrected latency p50 %v ns: the 3 s offset was not removed", p50)
			}
		}
	})

	// Agent A's clock is 2 s behind: in the ring each sender corrects for
	// its receiver, in opposite directions.
	agentA := h.start(t, a, bin, "agent", "--listen", h.addr[0]+":7500", "--clock-offset", "-2s")
	agentB := h.start(t, b, bin, "agent", "--listen", h.addr[1]+":7500")
	agentA.stderr.waitFor(t, "listening for coordinators")
	agentB.stderr.waitFor(t, "listening for coordinators")
	agents := h.addr[0] + ":7500," + h.addr[1] + ":7500"

	t.Run("coordinate runs agents in both hosts and merges their report", func(t *testing.T) {
		co := h.start(t, a, bin, "coordinate", "--agents", agents, "--topology", "ring", "--messages", "20000",
			"--channels", "4", "--json", "--out", filepath.Join(out, "coordinate"))
		if code := co.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("coordinate exited with %d:\n%s", code, co.stderr)
		}
		r := co.lastJSON(t)
		checkExactlyOnce(t, "coordinate", r, 40000)
		c, _ := r["clock_correction"].(map[string]any)
		if c == nil || c["method"] != "ping" {
			t.Fatalf("clock_correction %v, want the PING estimates", c)
		}
		lo, hi, bound := c["min_offset_ns"].(float64), c["max_offset_ns"].(float64), c["error_ns"].(float64)
		if lo < -2e9-bound || lo > -2e9+bound || hi < 2e9-bound || hi > 2e9+bound {
			t.Errorf("offsets applied %v to %v ns ± %v; want A's receiver 2 s behind B and B's 2 s ahead of A", lo, hi, bound)
		}
		if p99 := r["latency_us"].(map[string]any)["p99"].(float64); p99 > 1e6 {
			t.Errorf("latency p99 %v µs: the clocks' 2 s were not removed", p99)
		}
		if r["scenario"] != "transport-distributed" {
			t.Errorf("scenario %v", r["scenario"])
		}
		for _, f := range []string{"report.json", "report.md", "latency.hgrm", "latency.svg"} {
			if _, err := os.Stat(filepath.Join(out, "coordinate", f)); err != nil {
				t.Errorf("report file: %v", err)
			}
		}
	})

	// ended counts the sessions agent B has ended, however they ended.
	ended := func() int {
		s := agentB.stderr.String()
		return strings.Count(s, "run from") + strings.Count(s, "refused coordinator")
	}

	t.Run("coordinate names an agent that is stopped", func(t *testing.T) {
		before := ended()
		if err := agentB.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		co := h.start(t, a, bin, "coordinate", "--agents", agents, "--messages", "1000", "--heartbeat-timeout", "1s", "--out", "")
		code := co.wait(t, 20*time.Second)
		if err := agentB.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		want := "agent " + h.addr[1] + ":7500 (sender 1), while preparing: loadgen: agent stopped reporting"
		if code != 2 || !strings.Contains(co.stderr.String(), want) {
			t.Fatalf("coordinate exited with %d, want 2 and %q:\n%s", code, want, co.stderr)
		}
		agentA.stderr.waitFor(t, "aborted: the coordinator went away")
		// Resumed, B serves the connection that coordinator left in its
		// backlog; until it sees that it is gone it is busy, and refuses
		// the next subtest's coordinator.
		deadline := time.Now().Add(10 * time.Second)
		for ended() == before {
			if time.Now().After(deadline) {
				t.Fatalf("agent B never ended the stopped coordinator's session:\n%s", agentB.stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("coordinate names an agent killed mid-run", func(t *testing.T) {
		before := strings.Count(agentB.stderr.String(), "sending to")
		co := h.start(t, a, bin, "coordinate", "--agents", agents, "--duration", "1m", "--rate", "2000", "--out", "")
		deadline := time.Now().Add(15 * time.Second)
		for strings.Count(agentB.stderr.String(), "sending to") == before {
			if time.Now().After(deadline) {
				t.Fatalf("agent B never started sending:\n%s", agentB.stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := agentB.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		code := co.wait(t, 20*time.Second)
		want := "agent " + h.addr[1] + ":7500 (sender 1), while running: loadgen: agent's control connection broke"
		if code != 2 || !strings.Contains(co.stderr.String(), want) {
			t.Fatalf("coordinate exited with %d, want 2 and %q:\n%s", code, want, co.stderr)
		}
	})
}
