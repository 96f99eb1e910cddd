package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGoalMet(t *testing.T) {
	for _, c := range []struct {
		goal         Goal
		value, ratio float64
		met          bool
	}{
		{Goal{"ratio", ">=", 0.8}, 5, 0.8, true},
		{Goal{"ratio", ">=", 0.8}, 5, 0.79, false},
		{Goal{"ratio", "<=", 2}, 1, 2, true},
		{Goal{"ratio", "<=", 2}, 1, 2.01, false},
		{Goal{"value", "<=", 1000}, 1000, 99, true},
		{Goal{"value", "<=", 1000}, 1000.5, 0.1, false},
		{Goal{"value", ">=", 10}, 9, 100, false},
		{Goal{"ratio", "<=", 2}, 1, math.Inf(1), false}, // a zero baseline never meets a goal
		{Goal{"ratio", ">=", 0.8}, 1, math.Inf(1), false},
		{Goal{"ratio", ">=", 0.8}, 1, math.NaN(), false},
		{Goal{"value", "<", 10}, 20, 20, false}, // an op it does not know is never met, not read as >=
		{Goal{"value", "", 10}, 20, 20, false},
		{Goal{"speed", "<=", 10}, 5, 5, false}, // nor is a goal on something it does not know
		{Goal{"", ">=", 10}, 20, 20, false},
	} {
		if got := c.goal.Met(c.value, c.ratio); got != c.met {
			t.Errorf("%+v with value %v ratio %v: met %v, want %v", c.goal, c.value, c.ratio, got, c.met)
		}
	}
}

func testScorecard(t testing.TB) *Scorecard {
	t.Helper()
	s := NewScorecard("test", map[string]any{"size": 100})
	yes, no := true, false
	for _, r := range []Run{
		{ID: "tcp", Topology: "one process", Case: "ceiling", Subject: "plain TCP", Figures: map[string]float64{"msgs_per_s": 10e6, "p99_us": 50}},
		{ID: "a", Topology: "one process", Case: "max", Subject: "default backend", Figures: map[string]float64{"msgs_per_s": 9e6, "p99_us": 1500},
			Sent: 10, Delivery: &Delivery{Delivered: 10}, ExactlyOnce: &yes},
		{ID: "zero", Topology: "one process", Figures: map[string]float64{"msgs_per_s": 0}},
	} {
		if err := s.AddRun(r); err != nil {
			t.Fatal(err)
		}
	}
	if !s.ExactlyOnce {
		t.Fatal("a scorecard of exactly-once runs is not exactly once")
	}
	if err := s.AddRun(Run{ID: "lost", Sent: 2, Delivery: &Delivery{Delivered: 1, Missing: 1}, ExactlyOnce: &no}); err != nil {
		t.Fatal(err)
	}
	if s.ExactlyOnce {
		t.Error("a run that lost a message left the scorecard exactly once")
	}
	return s
}

func TestScorecardCompare(t *testing.T) {
	s := testScorecard(t)
	tput := &Goal{"ratio", ">=", 0.8}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Compare("ceiling", Ref{"tcp", "msgs_per_s"}, nil, "", nil))
	must(s.Compare("a vs ceiling", Ref{"a", "msgs_per_s"}, &Ref{"tcp", "msgs_per_s"}, "TCP", tput))
	must(s.Compare("a p99", Ref{"a", "p99_us"}, &Ref{"tcp", "p99_us"}, "TCP", &Goal{"value", "<=", 1000}))
	must(s.Compare("a vs zero", Ref{"a", "msgs_per_s"}, &Ref{"zero", "msgs_per_s"}, "nothing", tput))
	want := []struct {
		value, base, ratio float64
		met                *bool
	}{
		{10e6, 0, 0, nil},
		{9e6, 10e6, 0.9, ptr(true)},
		{1500, 50, 30, ptr(false)},
		{9e6, 0, math.Inf(1), ptr(false)},
	}
	for i, w := range want {
		r := s.Rows[i]
		if r.Value != w.value || r.BaselineValue != w.base || r.Ratio != w.ratio || (r.Met == nil) != (w.met == nil) || (r.Met != nil && *r.Met != *w.met) {
			t.Errorf("row %d %q: value %v base %v ratio %v met %v; want %v %v %v %v", i, r.What, r.Value, r.BaselineValue, r.Ratio, r.Met, w.value, w.base, w.ratio, w.met)
		}
	}
	if s.Goals != 3 || s.GoalsMet != 1 {
		t.Errorf("%d of %d goals met, want 1 of 3", s.GoalsMet, s.Goals)
	}

	for _, bad := range []struct {
		name string
		fig  Ref
		base *Ref
		goal *Goal
	}{
		{"an unknown run", Ref{"nope", "msgs_per_s"}, nil, nil},
		{"an unknown metric", Ref{"a", "p12_us"}, nil, nil},
		{"an unknown baseline", Ref{"a", "p99_us"}, &Ref{"tcp", "p12_us"}, nil},
		{"a ratio goal without a baseline", Ref{"a", "p99_us"}, nil, &Goal{"ratio", "<=", 2}},
		{"a goal on nothing", Ref{"a", "p99_us"}, nil, &Goal{"speed", "<=", 2}},
		{"a goal without an operator", Ref{"a", "p99_us"}, nil, &Goal{"value", "<", 2}},
		{"an infinite limit", Ref{"a", "p99_us"}, nil, &Goal{"value", "<=", math.Inf(1)}},
	} {
		n := len(s.Rows)
		err := s.Compare(bad.name, bad.fig, bad.base, "", bad.goal)
		if err == nil || len(s.Rows) != n {
			t.Errorf("%s: error %v and %d rows added", bad.name, err, len(s.Rows)-n)
		}
		if bad.goal != nil && !errors.Is(err, ErrBadGoal) {
			t.Errorf("%s: error %v, want ErrBadGoal", bad.name, err)
		}
	}
	if err := s.AddRun(Run{ID: "a"}); err == nil {
		t.Error("a second run with the same ID was accepted")
	}
	if !s.HasFigures() || !s.HasFigures(Ref{"a", "p99_us"}, Ref{"tcp", "msgs_per_s"}) {
		t.Error("HasFigures misses figures the runs hold")
	}
	for _, missing := range []Ref{{"a", "cpu_ns_per_msg"}, {"nope", "msgs_per_s"}} {
		if s.HasFigures(Ref{"a", "p99_us"}, missing) {
			t.Errorf("HasFigures finds %v", missing)
		}
	}
}

func TestFormatFigure(t *testing.T) {
	for _, tc := range []struct {
		metric string
		v      float64
		want   string
	}{
		{"msgs_per_s", 12.5e6, "12.5 Mmsgs/s"},
		{"p99_us", 250, "250 µs"},
		{"cpu_ns_per_msg", 168.4, "168 ns CPU"},
		{"cpu_ns_per_msg", math.Inf(1), "n/a"},
		{"lost_share", 0.0123, "1.23 %"},
		{"over_1ms_count", 8, "8"},
		{"cpu_cores", 1.234, "1.23"},
	} {
		if got := formatFigure(tc.metric, tc.v); got != tc.want {
			t.Errorf("formatFigure(%q, %v) = %q, want %q", tc.metric, tc.v, got, tc.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// What WriteScorecard writes reads back to the same rows, a ratio against
// a zero baseline included, and the text and Markdown say every verdict.
func TestScorecardRoundTrip(t *testing.T) {
	s := testScorecard(t)
	_ = s.Compare("a vs ceiling", Ref{"a", "msgs_per_s"}, &Ref{"tcp", "msgs_per_s"}, "TCP", &Goal{"ratio", ">=", 0.8})
	_ = s.Compare("a p99", Ref{"a", "p99_us"}, &Ref{"tcp", "p99_us"}, "TCP", &Goal{"value", "<=", 1000})
	_ = s.Compare("a vs zero", Ref{"a", "msgs_per_s"}, &Ref{"zero", "msgs_per_s"}, "nothing", nil)
	dir := t.TempDir()
	if err := WriteScorecard(dir, "bench", s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadScorecard(filepath.Join(dir, "bench.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != len(s.Rows) {
		t.Fatalf("%d rows read back, %d written", len(got.Rows), len(s.Rows))
	}
	for i := range s.Rows {
		a, b := s.Rows[i], got.Rows[i]
		if a.Value != b.Value || a.BaselineValue != b.BaselineValue || a.Ratio != b.Ratio || (a.Met == nil) != (b.Met == nil) || a.GoalText != b.GoalText {
			t.Errorf("row %d: wrote %+v, read %+v", i, a, b)
		}
	}
	if got.ExactlyOnce || got.Goals != 2 || got.GoalsMet != 1 {
		t.Errorf("read back exactly once %v, %d of %d goals", got.ExactlyOnce, got.GoalsMet, got.Goals)
	}
	text, md := textAndMarkdown(t, s)
	says(t, "text", text, "0.90 x", ">= 0.80 x", "<= 1.00 ms", "NOT met", "n/a", "NOT exactly once", "goals met: 1 of 2")
	says(t, "Markdown", md, "| one process | a vs ceiling | 9.00 Mmsgs/s | TCP 10.0 Mmsgs/s | 0.90 x | >= 0.80 x | met |", "**NOT met**", "**1 of 2**")
	if _, err := ReadScorecard(filepath.Join(dir, "bench.md")); err == nil {
		t.Error("Markdown read as a scorecard")
	}
	var r Row
	if err := json.Unmarshal([]byte(`{"value":1,"ratio":"fast"}`), &r); err == nil {
		t.Error("a row with a string ratio was read")
	}
}

// A scorecard read back from a file whose goals Compare would not have
// accepted is refused, naming the file, the row and the bad field, rather
// than being judged by a guess at what the goal meant.
func TestReadScorecardBadGoal(t *testing.T) {
	const rows = `{"title":"t","rows":[
		{"what":"fine","figure":{"run":"a","metric":"p99_us"},"value":5,"goal":{"on":"value","op":"<=","limit":10}},
		{"what":"bad","figure":{"run":"a","metric":"p99_us"},"value":5,%s}]}`
	for _, c := range []struct {
		name, row, says string
	}{
		{"an op it does not know", `"goal":{"on":"value","op":"<","limit":10}`, `op "<"`},
		{"no op", `"goal":{"on":"value","limit":10}`, `op ""`},
		{"a goal on something it does not know", `"goal":{"on":"speed","op":"<=","limit":10}`, `on "speed"`},
		{"a goal on the ratio without a baseline", `"ratio":0.5,"goal":{"on":"ratio","op":"<=","limit":10}`, `on "ratio" without a baseline`},
	} {
		path := filepath.Join(t.TempDir(), "bench.json")
		if err := os.WriteFile(path, []byte(strings.Replace(rows, "%s", c.row, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, err := ReadScorecard(path)
		if err == nil {
			t.Errorf("%s: read %+v", c.name, sc.Rows[1].Goal)
			continue
		}
		if !errors.Is(err, ErrBadGoal) {
			t.Errorf("%s: error %v, want ErrBadGoal", c.name, err)
		}
		for _, want := range []string{path, `row 2 ("bad")`, c.says} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", c.name, err, want)
			}
		}
	}
}

// FuzzReadScorecard feeds arbitrary bytes to the scorecard decoder behind
// ReadScorecard. Nothing panics, neither reading nor writing what was read
// as text and Markdown; every goal read is one Compare would accept; and
// what it accepts encodes as WriteScorecard writes it to JSON that reads
// back and encodes the same (compared by encoding, since JSON's spelling of
// a value is not unique).
func FuzzReadScorecard(f *testing.F) {
	s := testScorecard(f)
	_ = s.Compare("a vs ceiling", Ref{"a", "msgs_per_s"}, &Ref{"tcp", "msgs_per_s"}, "TCP", &Goal{"ratio", ">=", 0.8})
	_ = s.Compare("a p99", Ref{"a", "p99_us"}, &Ref{"tcp", "p99_us"}, "TCP", &Goal{"value", "<=", 1000})
	_ = s.Compare("a vs zero", Ref{"a", "msgs_per_s"}, &Ref{"zero", "msgs_per_s"}, "nothing", nil)
	s.Notes = []string{"a note"}
	b, err := json.Marshal(s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	for _, in := range []string{"", "{}", "null", "[]", `{"rows":[{}]}`, `{"rows":[null]}`, `{"rows":[{"ratio":null,"baseline":{}}]}`,
		`{"rows":[{"goal":{"on":"value","op":"<","limit":1}}]}`, `{"rows":[{"goal":{"on":"ratio","op":">=","limit":1}}]}`,
		`{"rows":[{"baseline":{},"ratio":"fast"}]}`, `{"runs":[{"id":"a","figures":{"p99_us":1e308}}],"notes":[]}`} {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeScorecard("fuzz.json", data)
		if err != nil {
			return
		}
		for k, r := range s.Rows {
			if r.Goal != nil && r.Goal.fault(r.Baseline != nil) != "" {
				t.Fatalf("row %d read with a goal Compare refuses: %+v", k+1, *r.Goal)
			}
		}
		if err := errors.Join(s.WriteText(io.Discard), s.WriteMarkdown(io.Discard)); err != nil {
			t.Fatalf("writing what was read as text and Markdown: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("encoding what was read (%q): %v", data, err)
		}
		s2, err := decodeScorecard("fuzz.json", b)
		if err != nil {
			t.Fatalf("%q reads back, but what it encodes as (%q) does not: %v", data, b, err)
		}
		b2, err := json.Marshal(s2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("%q reads as a scorecard that encodes as %q, then as %q", data, b, b2)
		}
	})
}

// A figure a goal judges never reads as the goal's limit unless it is the
// limit, so that a table cannot show "1.00 ms" beside "NOT met".
func TestFormatJudged(t *testing.T) {
	for _, c := range []struct {
		on, metric string
		v, limit   float64
		want       string
	}{
		{"value", "p99_us", 1000.4, 1000, "1000.4 µs"},
		{"value", "p99_us", 999.6, 1000, "999.6 µs"},
		{"value", "p99_us", 1000, 1000, "1.00 ms"},
		{"value", "p99_us", 1012, 1000, "1.01 ms"},
		{"value", "p99_us", 446.2, 1000, "446 µs"},
		{"ratio", "msgs_per_s", 0.7996, 0.8, "0.7996 x"},
		{"ratio", "msgs_per_s", 0.8, 0.8, "0.80 x"},
		{"ratio", "msgs_per_s", 0.806, 0.8, "0.81 x"},
		{"ratio", "p99_us", 4.001, 4, "4.0010 x"},
		{"ratio", "msgs_per_s", math.Inf(1), 0.8, "n/a"},
		{"value", "lost_share", 0.02001, 0.02, "0.02001"},
		// Closer to the limit than the precise format's last digit, or
		// exactly half a unit of the plain format's last digit away.
		{"ratio", "msgs_per_s", 0.79996, 0.8, "0.79996 x"},
		{"ratio", "msgs_per_s", 0.795, 0.8, "0.7950 x"},
		{"value", "p99_us", 1000.04, 1000, "1000.04 µs"},
		{"value", "p99_us", 1005, 1000, "1005.0 µs"},
	} {
		if got := formatJudged(c.on, c.metric, c.v, c.limit); got != c.want {
			t.Errorf("formatJudged(%q, %q, %v, %v) = %q, want %q", c.on, c.metric, c.v, c.limit, got, c.want)
		}
	}
	s := testScorecard(t)
	s.Runs[1].Figures["p99_us"] = 1000.4
	if err := s.Compare("a p99", Ref{"a", "p99_us"}, nil, "", &Goal{"value", "<=", 1000}); err != nil {
		t.Fatal(err)
	}
	if c := s.Rows[0].cells(); c[2] != "1000.4 µs" || c[6] != "NOT met" {
		t.Errorf("a p99 of 1000.4 µs against 1 ms reads %q, %q", c[2], c[6])
	}
	s.Runs[1].Figures["msgs_per_s"] = 7.95e6 // 0.795 of plain TCP's 10 M
	if err := s.Compare("a vs TCP", Ref{"a", "msgs_per_s"}, &Ref{"tcp", "msgs_per_s"}, "TCP", &Goal{"ratio", ">=", 0.8}); err != nil {
		t.Fatal(err)
	}
	if c := s.Rows[1].cells(); c[4] != "0.7950 x" || c[6] != "NOT met" {
		t.Errorf("a ratio of 0.795 against >= 0.8 reads %q, %q", c[4], c[6])
	}
}

// textAndMarkdown is what s writes as text and as Markdown.
func textAndMarkdown(t *testing.T, s interface {
	WriteText(io.Writer) error
	WriteMarkdown(io.Writer) error
}) (text, md string) {
	t.Helper()
	var tb, mb bytes.Buffer
	if err := s.WriteText(&tb); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteMarkdown(&mb); err != nil {
		t.Fatal(err)
	}
	return tb.String(), mb.String()
}

// says reports each of wants that out (the text or the Markdown, what)
// does not contain.
func says(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("the %s does not say %q:\n%s", what, want, out)
		}
	}
}
