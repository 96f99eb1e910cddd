package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	yes := true
	r := &Report{
		Scenario:          "pipeline-kill",
		StartedAt:         time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		DurationS:         10,
		MessagesSent:      1_000_000,
		MessagesDelivered: 1_000_000,
		WireBytes:         12_000_000,
		Resent:            42,
		Faults:            map[string]int64{"kill": 1, "drop": 7},
		Recoveries:        1,
		Checkpoints:       9,
		ExactlyOnce:       &yes,
		Machine:           Machine{CPU: "Test CPU | 2 GHz", Cores: 2, Kernel: "6.1.0", Go: "go1.26", OS: "linux", Arch: "amd64", Commit: "abc123"},
		Config:            map[string]any{ConfigMsgSize: 100, ConfigChannels: 4, "rate": 100000.0},
		Events:            []Event{{T: 3.25, Kind: "kill", Detail: "task 1.0"}, {T: 5.5, Kind: "drop"}},
		Notes:             []string{"a note"},
	}
	for s := 1; s <= 10; s++ {
		smp := Sample{T: float64(s), MsgsPerS: 100_000 + float64(s%3)*1000, P99US: 40, Delivered: int64(s) * 100_000}
		if s == 4 {
			smp.Faults = []string{"kill"}
		}
		r.Timeline = append(r.Timeline, smp)
	}
	r.ThroughputBytesPerS = 100 * 100_000
	return r
}

func TestFinishDerivesThroughputLatencyAndBytesPerMessage(t *testing.T) {
	rec := NewRecorder()
	rec.RecordN(45_000, 100)
	r := sampleReport()
	r.Finish(rec)
	if r.ThroughputMsgsPerS != 100_000 || r.WireBytesPerMsg != 12 {
		t.Errorf("throughput %v msgs/s, %v wire B/msg; want 100000 and 12", r.ThroughputMsgsPerS, r.WireBytesPerMsg)
	}
	if math.Abs(r.LatencyUS.P99-45) > 0.05 {
		t.Errorf("p99 %v µs, want 45", r.LatencyUS.P99)
	}
	empty := &Report{}
	empty.Finish(nil)
	if empty.ThroughputMsgsPerS != 0 || empty.WireBytesPerMsg != 0 {
		t.Errorf("an empty report derived %+v", empty)
	}
}

func TestWriteJSONWritesOneLineWithEveryRequiredKey(t *testing.T) {
	r := sampleReport()
	r.Finish(nil)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("want exactly one line, got %q", out)
	}
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "started_at", "duration_s", "messages_sent", "messages_delivered",
		"duplicates", "lost", "throughput_msgs_per_s", "throughput_bytes_per_s", "latency_us", "wire_bytes",
		"wire_bytes_per_msg", "resent", "faults", "recoveries", "checkpoints", "exactly_once", "machine",
		"config", "timeline", "events", "notes"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	lat := raw["latency_us"].(map[string]any)
	for _, k := range []string{"p50", "p90", "p99", "p999", "p9999", "max"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("latency_us.%s missing", k)
		}
	}
	mach := raw["machine"].(map[string]any)
	for _, k := range []string{"cpu", "cores", "kernel", "go", "os", "arch", "commit"} {
		if _, ok := mach[k]; !ok {
			t.Errorf("machine.%s missing", k)
		}
	}

	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Scenario != r.Scenario || !back.StartedAt.Equal(r.StartedAt) || back.MessagesDelivered != r.MessagesDelivered ||
		back.Faults["drop"] != 7 || back.ExactlyOnce == nil || !*back.ExactlyOnce || back.Machine != r.Machine ||
		len(back.Timeline) != 10 || back.Timeline[3].Faults[0] != "kill" || back.Events[0] != r.Events[0] {
		t.Errorf("round trip changed the report:\n got %+v\nwant %+v", back, *r)
	}
}

func TestOptionalKeysAreLeftOutWhenEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteJSON(&buf, &Report{Scenario: "x"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"faults"`, `"exactly_once"`, `"timeline"`, `"events"`, `"notes"`, `"recovery"`} {
		if strings.Contains(buf.String(), k) {
			t.Errorf("empty report has %s: %s", k, buf.String())
		}
	}
}

func TestWriteJSONRefusesNaN(t *testing.T) {
	r := &Report{ThroughputMsgsPerS: math.NaN()}
	if err := WriteJSON(io.Discard, r); !errors.Is(err, ErrNotFinite) {
		t.Errorf("got %v, want ErrNotFinite", err)
	}
}

func TestMarkdownStatesExactlyOnceAndShowsMachineAndConfig(t *testing.T) {
	no := false
	tests := []struct {
		name string
		eo   *bool
		want string
	}{
		{"a checked clean run says it held", sampleReport().ExactlyOnce, "Exactly-once held: 1,000,000 messages sent, 1,000,000 delivered, 0 duplicates, 0 lost."},
		{"a violated run says so with the counts", &no, "Exactly-once was VIOLATED"},
		{"an unchecked run says it was not checked", nil, "not checked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sampleReport()
			r.ExactlyOnce = tt.eo
			var buf bytes.Buffer
			if err := WriteMarkdown(&buf, r); err != nil {
				t.Fatal(err)
			}
			md := buf.String()
			for _, want := range []string{tt.want, "# Sluice benchmark: pipeline-kill", `Test CPU \| 2 GHz`, "| cores | 2 |",
				"| kernel | 6.1.0 |", "| commit | abc123 |", "| msg_size | 100 |", "| rate | 100000 |", "| kill | 1 |", "| 3.250 | kill | task 1.0 |", "- a note"} {
				if !strings.Contains(md, want) {
					t.Errorf("markdown lacks %q:\n%s", want, md)
				}
			}
		})
	}
}

func TestNewRecoverySummarizesRecoveryAndLostTimes(t *testing.T) {
	if r := NewRecovery(nil, nil); r != nil {
		t.Errorf("no failures gave %+v, want nil", r)
	}
	ms := time.Millisecond
	r := NewRecovery([]time.Duration{300 * ms, 100 * ms, 200 * ms}, []time.Duration{500 * ms, 900 * ms, 400 * ms, 700 * ms})
	want := Recovery{Failures: 4, P50Ms: 200, MaxMs: 300, LostP50Ms: 500, LostMaxMs: 900, LostTotalMs: 2500}
	if *r != want {
		t.Errorf("got %+v, want %+v", *r, want)
	}
	rep := sampleReport()
	rep.Recovery = r
	var buf bytes.Buffer
	if err := WriteMarkdown(&buf, rep); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"| recovery time p50 / max | 200 / 300 ms |", "| time lost per failure p50 / max / total | 500 / 900 / 2500 ms |"} {
		if !strings.Contains(buf.String(), row) {
			t.Errorf("markdown lacks %q", row)
		}
	}
}

var hgrmRow = regexp.MustCompile(`^\s*\d+\.\d{3}\s+\d\.\d{6}\s+\d+\s+(\d+\.\d{2}|inf)$`)

func TestWriteHgrmUsesTheClassicPercentileFormatInMicroseconds(t *testing.T) {
	rec := NewRecorder()
	for v := int64(1); v <= 1000; v++ {
		rec.Record(v * 1000) // 1..1000 µs
	}
	var buf bytes.Buffer
	if err := WriteHgrm(&buf, rec); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "Value Percentile TotalCount 1/(1-Percentile)" || lines[1] != "" {
		t.Fatalf("header %q %q", lines[0], lines[1])
	}
	var rows int
	var footer []string
	for _, l := range lines[2:] {
		switch {
		case hgrmRow.MatchString(l):
			rows++
		case strings.HasPrefix(l, "#["):
			footer = append(footer, l)
		default:
			t.Errorf("unexpected line %q", l)
		}
	}
	if rows < 20 {
		t.Errorf("%d percentile rows, want a full spectrum", rows)
	}
	if len(footer) < 2 || !strings.Contains(footer[0], "Mean") || !strings.Contains(footer[0], "StdDeviation") ||
		!strings.Contains(footer[1], "Max") || !strings.Contains(footer[1], "Total count    =         1000") {
		t.Errorf("footer %q", footer)
	}
	// Values are in microseconds: the maximum is 1000 µs, not 1,000,000.
	if !strings.Contains(footer[1], "Max     =     1000.447") {
		t.Errorf("max not in microseconds: %q", footer[1])
	}
	last := strings.Fields(lines[len(lines)-len(footer)-1])
	if last[1] != "1.000000" || last[3] != "inf" {
		t.Errorf("last row %q, want the 100%% row", last)
	}
}

// svgElements parses an SVG document and counts its elements by name and by
// name.class, failing the test if it is not well-formed XML.
func svgElements(t *testing.T, data []byte) (map[string]int, []string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(data))
	counts := map[string]int{}
	var texts []string
	var inText bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, data)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			counts[tok.Name.Local]++
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					counts[tok.Name.Local+"."+a.Value]++
				}
			}
			if tok.Name.Space != "http://www.w3.org/2000/svg" {
				t.Errorf("element %s outside the SVG namespace", tok.Name.Local)
			}
			inText = tok.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			inText = false
		}
	}
	return counts, texts
}

func TestWriteDirWritesEveryFileAndTheChartsParse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	rec := NewRecorder()
	for v := int64(1); v <= 100_000; v++ {
		rec.Record(v * 10)
	}
	r := sampleReport()
	r.Scenario = "a <tricky> & scenario"
	r.Finish(rec)
	if err := WriteDir(dir, r, rec); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"report.json", "report.md", "latency.hgrm", "latency.svg", "timeline.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}

	js, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	var back Report
	if err := json.Unmarshal(js, &back); err != nil || back.LatencyUS != r.LatencyUS {
		t.Errorf("report.json: %v, latency %+v want %+v", err, back.LatencyUS, r.LatencyUS)
	}

	lat, _ := os.ReadFile(filepath.Join(dir, "latency.svg"))
	counts, texts := svgElements(t, lat)
	if counts["svg"] != 1 || counts["polyline.series"] != 1 || counts["rect.frame"] != 1 || counts["g.legend"] != 1 {
		t.Errorf("latency.svg elements %v", counts)
	}
	for _, want := range []string{"0%", "90%", "99%", "99.9%", "99.99%", "percentile", "latency (µs)", "Latency by percentile — a <tricky> & scenario"} {
		if !slices.Contains(texts, want) {
			t.Errorf("latency.svg lacks the text %q (has %q)", want, texts)
		}
	}

	tl, _ := os.ReadFile(filepath.Join(dir, "timeline.svg"))
	counts, texts = svgElements(t, tl)
	if counts["polyline.series"] != 1 || counts["g.marker"] != 2 || counts["g.x-axis"] != 1 || counts["g.y-axis"] != 1 {
		t.Errorf("timeline.svg elements %v", counts)
	}
	for _, want := range []string{"time (s)", "delivered (msgs/s)", "kill", "drop", "100 k", "50 k", "2", "10"} {
		if !slices.Contains(texts, want) {
			t.Errorf("timeline.svg lacks the text %q (has %q)", want, texts)
		}
	}
}

func TestWriteDirWithoutARecorderSkipsTheLatencyFiles(t *testing.T) {
	dir := t.TempDir()
	if err := WriteDir(dir, &Report{Scenario: "empty"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "latency.hgrm")); !os.IsNotExist(err) {
		t.Errorf("latency.hgrm written without a recorder: %v", err)
	}
	tl, _ := os.ReadFile(filepath.Join(dir, "timeline.svg"))
	if _, texts := svgElements(t, tl); !slices.Contains(texts, "no data") {
		t.Errorf("an empty timeline should say so: %q", texts)
	}
}

// A run whose messages never crossed a connection says why its wire bytes
// are 0, and one that delivered nothing says that, instead of a
// per-message figure of 0.
func TestMarkdownSaysWhyNoWireBytes(t *testing.T) {
	for _, c := range []struct {
		wire, delivered int64
		want            string
	}{
		{0, 1_000_000, "| wire bytes | 0: no message crossed a connection (every task on one node) |"},
		{102_100_000, 1_000_000, "| wire bytes | 102,100,000 (102 per message) |"},
		{4_096, 0, "| wire bytes | 4,096 (no message delivered) |"},
	} {
		r := sampleReport()
		r.MessagesDelivered = c.delivered
		r.WireBytes, r.WireBytesPerMsg = c.wire, 0
		if c.delivered > 0 {
			r.WireBytesPerMsg = float64(c.wire) / float64(c.delivered)
		}
		var buf bytes.Buffer
		if err := WriteMarkdown(&buf, r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), c.want) {
			t.Errorf("%d wire bytes: markdown lacks %q:\n%s", c.wire, c.want, buf.String())
		}
	}
}
