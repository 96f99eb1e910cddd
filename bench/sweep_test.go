package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func sampleSweep() *SweepReport {
	s := &SweepReport{Name: "size-sweep", Machine: Machine{CPU: "Test CPU", Cores: 2, Go: "go1.26"}}
	for _, ch := range []int{4, 1} {
		for _, size := range []int64{1024, 16, 256} {
			s.Reports = append(s.Reports, &Report{
				Scenario:           "throughput",
				ThroughputMsgsPerS: float64(ch) * 1e8 / float64(size),
				LatencyUS:          Latency{P50: 10, P99: 50, P999: 80, Max: 120},
				Config:             map[string]any{ConfigMsgSize: size, ConfigChannels: ch},
			})
		}
	}
	return s
}

func TestSweepMarkdownHasOneRowPerReportOrderedByChannelsThenSize(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSweepMarkdown(&buf, sampleSweep()); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| channels") {
			f := strings.Split(l, "|")
			rows = append(rows, strings.TrimSpace(f[1])+"/"+strings.TrimSpace(f[2]))
		}
	}
	want := []string{"1/16 B", "1/256 B", "1/1 KiB", "4/16 B", "4/256 B", "4/1 KiB"}
	if !slices.Equal(rows, want) {
		t.Errorf("rows %q, want %q\n%s", rows, want, buf.String())
	}
	if !strings.Contains(buf.String(), "Test CPU, 2 cores") {
		t.Errorf("machine missing:\n%s", buf.String())
	}
}

func TestSweepSVGHasOneLinePerChannelCountAndATickPerSize(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteSweepSVG(&buf, sampleSweep()); err != nil {
		t.Fatal(err)
	}
	counts, texts := svgElements(t, buf.Bytes())
	if counts["polyline.series"] != 2 || counts["g.legend"] != 2 {
		t.Errorf("elements %v, want two series with legends", counts)
	}
	for _, want := range []string{"1 channel", "4 channels", "16 B", "256 B", "1 KiB", "message size (bytes)", "delivered (msgs/s)"} {
		if !slices.Contains(texts, want) {
			t.Errorf("text %q missing from %q", want, texts)
		}
	}
}

func TestSweepAcceptsConfigNumbersDecodedFromJSON(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSweepDir(dir, sampleSweep()); err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back SweepReport
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	// Config values are now float64.
	var buf bytes.Buffer
	if err := WriteSweepSVG(&buf, &back); err != nil {
		t.Errorf("a decoded sweep does not chart: %v", err)
	}
	for _, name := range []string{"sweep.md", "sweep.svg"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestSweepRejectsReportsWithoutSizeOrChannels(t *testing.T) {
	tests := []struct {
		name string
		cfg  map[string]any
	}{
		{"no config", nil},
		{"no channels", map[string]any{ConfigMsgSize: 16}},
		{"a fractional size", map[string]any{ConfigMsgSize: 16.5, ConfigChannels: 1}},
		{"a word for a size", map[string]any{ConfigMsgSize: "big", ConfigChannels: 1}},
	}
	for _, tt := range tests {
		t.Run("a report with "+tt.name+" is rejected", func(t *testing.T) {
			s := &SweepReport{Reports: []*Report{{Config: tt.cfg}}}
			if err := WriteSweepSVG(&bytes.Buffer{}, s); !errors.Is(err, ErrSweepConfig) {
				t.Errorf("got %v, want ErrSweepConfig", err)
			}
		})
	}
}
