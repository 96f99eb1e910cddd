package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary puts the rows of several scorecards of the same command side by
// side. On a machine whose speed moves from one minute to the next (a small
// VM), one run's verdict on a goal near its limit says little; the median
// of several, their spread and how many met the goal say more.
//
// Each row holds, for every scorecard, the figure its goal is judged on:
// the ratio to its baseline where the goal is on the ratio or the row has
// a baseline and no goal, else the value.
type Summary struct {
	Title   string  `json:"title"`
	Machine Machine `json:"machine"` // the first scorecard's
	// Machines lists every scorecard's machine that differs from the
	// first's (by CPU model, CRC method, kernel, Go or commit), each once:
	// figures from different machines are not one measurement's spread.
	Machines  []Machine    `json:"other_machines,omitempty"`
	StartedAt []time.Time  `json:"started_at"`
	Rows      []SummaryRow `json:"rows"`
	// Goals counts the rows with a goal; MetEvery those met in every
	// scorecard, MetMost those met in more than half of them.
	Goals    int `json:"goals"`
	MetEvery int `json:"goals_met_every_time"`
	MetMost  int `json:"goals_met_most_times"`
	// ExactlyOnce is whether every scorecard's checked runs were.
	ExactlyOnce bool `json:"exactly_once"`
}

// SummaryRow is one row of the scorecards of a Summary.
type SummaryRow struct {
	Topology string `json:"topology"`
	What     string `json:"what"`
	// On is "ratio" or "value": which figure Each holds.
	On     string `json:"on"`
	Metric string `json:"metric"`
	// Each is the figure of each scorecard, in their order; a ratio to a
	// zero baseline is +Inf (null in JSON).
	Each []float64 `json:"-"`
	// Median, Min and Max are over Each.
	Median, Min, Max float64 `json:"-"`
	Goal             *Goal   `json:"goal,omitempty"`
	GoalText         string  `json:"goal_text,omitempty"`
	// Met is how many scorecards met the goal, judged here from each one's
	// figures.
	Met int `json:"met"`
}

// MarshalJSON writes the figures, which may be infinite, as numbers or
// null.
func (r SummaryRow) MarshalJSON() ([]byte, error) {
	type plain SummaryRow
	out := struct {
		plain
		Each   []*float64 `json:"each"`
		Median *float64   `json:"median"`
		Min    *float64   `json:"min"`
		Max    *float64   `json:"max"`
	}{plain: plain(r), Median: finite(r.Median), Min: finite(r.Min), Max: finite(r.Max)}
	for _, v := range r.Each {
		out.Each = append(out.Each, finite(v))
	}
	return json.Marshal(out)
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

// Summarize builds the Summary of cards, which must hold the same rows in
// the same order (scorecards of one command with the same flags); it fails
// naming the first row that differs.
func Summarize(cards []*Scorecard) (*Summary, error) {
	if len(cards) == 0 {
		return nil, fmt.Errorf("bench: no scorecards to summarize")
	}
	first := cards[0]
	s := &Summary{Title: first.Title, Machine: first.Machine, ExactlyOnce: true}
	for i, c := range cards {
		if len(c.Rows) != len(first.Rows) {
			return nil, fmt.Errorf("bench: scorecard %d has %d rows, scorecard 1 has %d: not the same command", i+1, len(c.Rows), len(first.Rows))
		}
		for k, r := range c.Rows {
			f := first.Rows[k]
			if r.Topology != f.Topology || r.What != f.What || r.Figure != f.Figure || (r.Goal == nil) != (f.Goal == nil) ||
				(r.Goal != nil && *r.Goal != *f.Goal) || (r.Baseline == nil) != (f.Baseline == nil) {
				return nil, fmt.Errorf("bench: row %d of scorecard %d (%s: %s) is not scorecard 1's (%s: %s)", k+1, i+1, r.Topology, r.What, f.Topology, f.What)
			}
		}
		if i > 0 && c.Machine != first.Machine && !slices.Contains(s.Machines, c.Machine) {
			s.Machines = append(s.Machines, c.Machine)
		}
		s.StartedAt = append(s.StartedAt, c.StartedAt)
		s.ExactlyOnce = s.ExactlyOnce && c.ExactlyOnce
	}
	for k, f := range first.Rows {
		row := SummaryRow{Topology: f.Topology, What: f.What, On: "value", Metric: f.Figure.Metric, Goal: f.Goal, GoalText: f.GoalText}
		if (f.Goal != nil && f.Goal.On == "ratio") || (f.Goal == nil && f.Baseline != nil) {
			row.On = "ratio"
		}
		for _, c := range cards {
			r := c.Rows[k]
			v := r.Value
			if row.On == "ratio" {
				v = r.Ratio
			}
			row.Each = append(row.Each, v)
			if row.Goal != nil && row.Goal.Met(r.Value, r.Ratio) {
				row.Met++
			}
		}
		row.Median, row.Min, row.Max = spread(row.Each)
		if row.Goal != nil {
			s.Goals++
			if row.Met == len(cards) {
				s.MetEvery++
			}
			if 2*row.Met > len(cards) {
				s.MetMost++
			}
		}
		s.Rows = append(s.Rows, row)
	}
	return s, nil
}

// spread returns the median, least and greatest of vs (NaN counts as
// +Inf: a ratio without a usable baseline).
func spread(vs []float64) (median, lo, hi float64) {
	sorted := make([]float64, len(vs))
	for i, v := range vs {
		if math.IsNaN(v) {
			v = math.Inf(1)
		}
		sorted[i] = v
	}
	slices.Sort(sorted)
	n := len(sorted)
	median = sorted[n/2]
	if n%2 == 0 {
		median = (sorted[n/2-1] + sorted[n/2]) / 2
	}
	return median, sorted[0], sorted[n-1]
}

// figure formats one of the row's figures; against a goal, one that is not
// the goal's limit never reads as it (formatJudged).
func (r SummaryRow) figure(v float64) string {
	if r.Goal != nil {
		return formatJudged(r.On, r.Metric, v, r.Goal.Limit)
	}
	if r.On == "ratio" {
		return formatRatio(v)
	}
	return formatFigure(r.Metric, v)
}

// cells returns the row's cells: topology, what, each figure, the median,
// the range, the goal and how many met it.
func (r SummaryRow) cells() []string {
	c := []string{r.Topology, r.What}
	for _, v := range r.Each {
		c = append(c, r.figure(v))
	}
	c = append(c, r.figure(r.Median), r.figure(r.Min)+" - "+r.figure(r.Max), r.GoalText, "")
	if r.Goal != nil {
		c[len(c)-1] = fmt.Sprintf("%d of %d", r.Met, len(r.Each))
	}
	return c
}

// summaryHeader returns the column names for n scorecards.
func summaryHeader(n int) []string {
	h := []string{"topology", "what"}
	for i := range n {
		h = append(h, strconv.Itoa(i+1))
	}
	return append(h, "median", "range", "goal", "met in")
}

func (s *Summary) verdict() string {
	return fmt.Sprintf("%d runs; of %d goals, met in every one: %d, in more than half: %d; every checked run exactly once: %v",
		len(s.StartedAt), s.Goals, s.MetEvery, s.MetMost, s.ExactlyOnce)
}

// WriteText writes the summary as an aligned table for a terminal.
func (s *Summary) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%s: %d runs\nmachine: %s\n", s.Title, len(s.StartedAt), s.Machine)
	for _, m := range s.Machines {
		fmt.Fprintf(w, "also on: %s\n", m)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(summaryHeader(len(s.StartedAt)), "\t")+"\t")
	for _, r := range s.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", s.verdict())
	return err
}

// WriteMarkdown writes the summary as a Markdown document.
func (s *Summary) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# %s: %d runs\n\n", mdEscape(s.Title), len(s.StartedAt))
	fmt.Fprintf(w, "- machine: %s\n", mdEscape(s.Machine.String()))
	for _, m := range s.Machines {
		fmt.Fprintf(w, "- also on: %s\n", mdEscape(m.String()))
	}
	var starts []string
	for _, t := range s.StartedAt {
		starts = append(starts, t.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "- started: %s\n", strings.Join(starts, ", "))
	fmt.Fprintf(w, "- %s\n\n", mdEscape(s.verdict()))
	h := summaryHeader(len(s.StartedAt))
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range s.Rows {
		c := r.cells()
		for i := range c {
			c[i] = mdEscape(c[i])
		}
		if r.Goal != nil && 2*r.Met <= len(r.Each) {
			c[len(c)-1] = "**" + c[len(c)-1] + "**"
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	fmt.Fprintln(w, "\nEach numbered column is one run's figure: the ratio to the row's baseline where it has one, else the value.\n"+
		"A goal's count is in bold where it was met in half the runs or fewer.")
	return nil
}

// WriteSummary writes s to dir as name.json and name.md, creating dir.
func WriteSummary(dir, name string, s *Summary) error {
	return writeJSONAndMarkdown(dir, name, s, s.WriteMarkdown)
}
