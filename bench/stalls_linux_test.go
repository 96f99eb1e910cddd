package bench

import (
	"context"
	"strconv"
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
		"negative":         "voluntary_ctxt_switches:\t-1\nnonvoluntary_ctxt_switches:\t30\n",
		"three lines":      "voluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t2\nvoluntary_ctxt_switches:\t3\n",
		"sum overflows":    "voluntary_ctxt_switches:\t9223372036854775807\nnonvoluntary_ctxt_switches:\t1\n",
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

func FuzzParseSwitches(f *testing.F) {
	f.Add([]byte("Name:\tprobe\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t30\n"))
	f.Add([]byte("voluntary_ctxt_switches:\t9223372036854775807\nnonvoluntary_ctxt_switches:\t1\n"))
	f.Add([]byte("ctxt_switches:"))
	f.Fuzz(func(t *testing.T, status []byte) {
		n, err := parseSwitches(status)
		if err != nil {
			return
		}
		// Accepted: exactly two counts, each at or above 0, and n their sum.
		var counts []int64
		for _, line := range strings.Split(string(status), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || !strings.HasSuffix(k, "ctxt_switches") {
				continue
			}
			x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || x < 0 {
				t.Fatalf("parseSwitches(%q) = %d, but line %q holds no count", status, n, line)
			}
			counts = append(counts, x)
		}
		if len(counts) != 2 || n != counts[0]+counts[1] {
			t.Fatalf("parseSwitches(%q) = %d; the counts are %v", status, n, counts)
		}
	})
}
