package bench

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// summaryCard is a scorecard of one run of a command that compares a
// transport's throughput and p99 with plain TCP's: tput and p99 are the
// transport's, against 10 M msgs/s and 50 µs.
func summaryCard(t *testing.T, tput, p99 float64, exactlyOnce bool) *Scorecard {
	t.Helper()
	s := NewScorecard("test", nil)
	for _, r := range []Run{
		{ID: "tcp", Topology: "one process", Figures: map[string]float64{"msgs_per_s": 10e6, "p99_us": 50}},
		{ID: "a", Topology: "one process", Figures: map[string]float64{"msgs_per_s": tput, "p99_us": p99},
			Sent: 10, Delivery: &Delivery{Delivered: 10}, ExactlyOnce: &exactlyOnce},
	} {
		if err := s.AddRun(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what string
		fig  Ref
		base *Ref
		goal *Goal
	}{
		{"ceiling", Ref{"tcp", "msgs_per_s"}, nil, nil},
		{"a vs ceiling", Ref{"a", "msgs_per_s"}, &Ref{"tcp", "msgs_per_s"}, &Goal{"ratio", ">=", 0.8}},
		{"a p99", Ref{"a", "p99_us"}, &Ref{"tcp", "p99_us"}, &Goal{"value", "<=", 1000}},
		{"a p99 vs TCP", Ref{"a", "p99_us"}, &Ref{"tcp", "p99_us"}, nil},
	} {
		if err := s.Compare(c.what, c.fig, c.base, "TCP", c.goal); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// A summary's medians, ranges and counts of goals met are those of the
// figures put in, worked out here by hand.
func TestSummarize(t *testing.T) {
	cards := []*Scorecard{
		summaryCard(t, 9e6, 1200, true), // 0.90 x, 1.2 ms
		summaryCard(t, 7e6, 400, true),  // 0.70 x, 400 µs
		summaryCard(t, 8e6, 900, true),  // 0.80 x, 900 µs
	}
	s, err := Summarize(cards)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		on                  string
		median, lo, hi      float64
		met                 int
		each0, each1, each2 float64
	}{
		{"value", 10e6, 10e6, 10e6, 0, 10e6, 10e6, 10e6},
		{"ratio", 0.8, 0.7, 0.9, 2, 0.9, 0.7, 0.8},
		{"value", 900, 400, 1200, 2, 1200, 400, 900},
		{"ratio", 18, 8, 24, 0, 24, 8, 18},
	}
	if len(s.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(s.Rows), len(want))
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for i, w := range want {
		r := s.Rows[i]
		if r.On != w.on || !near(r.Median, w.median) || !near(r.Min, w.lo) || !near(r.Max, w.hi) || r.Met != w.met ||
			len(r.Each) != 3 || !near(r.Each[0], w.each0) || !near(r.Each[1], w.each1) || !near(r.Each[2], w.each2) {
			t.Errorf("row %d %q: %+v, want %+v", i, r.What, r, w)
		}
	}
	if s.Goals != 2 || s.MetEvery != 0 || s.MetMost != 2 || !s.ExactlyOnce || len(s.Machines) != 0 || len(s.StartedAt) != 3 {
		t.Errorf("goals %d, met every time %d, most times %d, exactly once %v, other machines %d, %d starts",
			s.Goals, s.MetEvery, s.MetMost, s.ExactlyOnce, len(s.Machines), len(s.StartedAt))
	}

	// Two scorecards: the median is the mean of both; one that lost a
	// message makes the summary say so; another machine is named.
	other := summaryCard(t, 6e6, 100, false)
	other.Machine.CPU = "another CPU"
	s, err = Summarize([]*Scorecard{cards[0], other})
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Rows[1]; !near(r.Median, 0.75) || r.Met != 1 {
		t.Errorf("median of 0.9 and 0.6 read %v, met %d", r.Median, r.Met)
	}
	if s.ExactlyOnce || len(s.Machines) != 1 || s.Machines[0].CPU != "another CPU" || s.MetEvery != 0 || s.MetMost != 0 {
		t.Errorf("exactly once %v, other machines %v, met every time %d, most times %d", s.ExactlyOnce, s.Machines, s.MetEvery, s.MetMost)
	}

	// Three more runs on that other machine name it once.
	s, err = Summarize([]*Scorecard{cards[0], other, other, other})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Machines) != 1 || s.Machines[0].CPU != "another CPU" {
		t.Errorf("three runs on one other machine list other machines %v, want it once", s.Machines)
	}
}

// Scorecards of different commands are refused, naming the row.
func TestSummarizeRefusesDifferentRows(t *testing.T) {
	a := summaryCard(t, 9e6, 100, true)
	if _, err := Summarize(nil); err == nil {
		t.Error("an empty summary was made")
	}
	short := summaryCard(t, 9e6, 100, true)
	short.Rows = short.Rows[:3]
	renamed := summaryCard(t, 9e6, 100, true)
	renamed.Rows[2].What = "a p99.9"
	regoaled := summaryCard(t, 9e6, 100, true)
	g := *regoaled.Rows[1].Goal
	g.Limit = 0.9
	regoaled.Rows[1].Goal = &g
	for name, b := range map[string]*Scorecard{"fewer rows": short, "another row": renamed, "another goal": regoaled} {
		if _, err := Summarize([]*Scorecard{a, b}); err == nil {
			t.Errorf("%s: summarized", name)
		} else if name == "another row" && !strings.Contains(err.Error(), "a p99.9") {
			t.Errorf("%s: the error does not name the row: %v", name, err)
		}
	}
}

// What WriteSummary writes is valid JSON with a ratio against a zero
// baseline as null, and the text and Markdown give every figure and count.
func TestSummaryWrite(t *testing.T) {
	zero := summaryCard(t, 9e6, 100, true)
	zero.Rows[1].Ratio = math.Inf(1) // as against a zero baseline
	s, err := Summarize([]*Scorecard{summaryCard(t, 9e6, 1200, true), summaryCard(t, 7e6, 400, true), zero})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteSummary(dir, "summary", s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Goals int `json:"goals"`
		Rows  []struct {
			What   string     `json:"what"`
			Each   []*float64 `json:"each"`
			Median *float64   `json:"median"`
			Max    *float64   `json:"max"`
			Met    int        `json:"met"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("summary.json: %v\n%s", err, b)
	}
	r := got.Rows[1]
	if got.Goals != 2 || r.What != "a vs ceiling" || len(r.Each) != 3 || r.Each[2] != nil || r.Max != nil ||
		r.Median == nil || math.Abs(*r.Median-0.9) > 1e-9 || r.Met != 1 {
		t.Errorf("summary.json row 2 reads %+v", r)
	}
	text, md := textAndMarkdown(t, s)
	says(t, "text", text, "0.90 x", "0.70 x", "n/a", "0.70 x - n/a", "1.20 ms", "1 of 3", "met in every one: 0, in more than half: 1")
	says(t, "Markdown", md, "| one process | a vs ceiling | 0.90 x | 0.70 x | n/a | 0.90 x | 0.70 x - n/a | >= 0.80 x | **1 of 3** |",
		"| one process | a p99 | 1.20 ms | 400 µs | 100 µs | 400 µs | 100 µs - 1.20 ms | <= 1.00 ms | 2 of 3 |")
}
