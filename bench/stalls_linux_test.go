package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseSwitches(t *testing.T) {
	status := "Name:\tprobe\nState:\tR (running)\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t30\n"
	if n, err := parseSwitches([]byte(status)); err != nil || n != 42 {
		t.Errorf("parseSwitches = %d, %v; want 42", n, err)
	}
	for name, bad := range map[string]string{
		"one line missing": "voluntary_ctxt_switches:\t12\n",
		"no lines":         "Name:\tprobe\n",
		"not a number":     "voluntary_ctxt_switches:\tmany\nnonvoluntary_ctxt_switches:\t30\n",
	} {
		if _, err := parseSwitches([]byte(bad)); err == nil || !strings.Contains(err.Error(), "stall probe") {
			t.Errorf("%s: err = %v, want the stall probe's error", name, err)
		}
	}
}

func TestMeasureStallsProbesEveryCPU(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	const d = 30 * time.Millisecond
	s, err := MeasureStalls(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != allowed.Count() {
		t.Errorf("probed %d CPUs, the process may run on %d", s.CPUs, allowed.Count())
	}
	if s.Duration < d {
		t.Errorf("spun %v, want at least %v", s.Duration, d)
	}
	if s.HostLongest > s.Longest || s.HostOver1ms > s.Over1ms || s.Lost < s.Longest {
		t.Errorf("inconsistent: %+v", s)
	}
}
