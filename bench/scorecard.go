package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Scorecard holds the figures of several runs measured together, and the
// comparisons drawn between them: each a figure, the baseline figure it is
// held against (from the same scorecard, so from the same run of the
// command), their ratio, and the goal it must meet. Nothing in it is typed
// in: [Scorecard.Compare] takes both values from the runs, so a scorecard
// read back from JSON can be checked row by row.
//
// A Scorecard is plain data; it is not safe for concurrent mutation.
type Scorecard struct {
	Title     string         `json:"title"`
	StartedAt time.Time      `json:"started_at"`
	DurationS float64        `json:"duration_s"`
	Machine   Machine        `json:"machine"`
	Config    map[string]any `json:"config"`
	Runs      []Run          `json:"runs"`
	Rows      []Row          `json:"rows"`
	// Goals counts the rows with a goal, GoalsMet those that met it.
	Goals    int `json:"goals"`
	GoalsMet int `json:"goals_met"`
	// ExactlyOnce is whether every run that checked delivery found every
	// message delivered exactly once.
	ExactlyOnce bool     `json:"exactly_once"`
	Notes       []string `json:"notes,omitempty"`
}

// Run is one measured case of a scorecard.
type Run struct {
	// ID names the run in Refs; unique within the scorecard.
	ID string `json:"id"`
	// Topology says where the two ends ran, e.g. "one process".
	Topology string `json:"topology"`
	// Case says what was measured, Subject what carried the messages.
	Case    string `json:"case"`
	Subject string `json:"subject"`
	// PID is the process that received the messages (or echoed them).
	PID int `json:"pid"`
	// Figures are the run's measurements by metric name; a name ending in
	// "_us" is microseconds, "_share" a fraction (printed in percent),
	// "_count" a count, "msgs_per_s" messages per second,
	// a name ending in "cpu_ns_per_msg" nanoseconds of CPU time per message.
	Figures map[string]float64 `json:"figures"`
	// Sent and Delivery are set by runs that check delivery; ExactlyOnce
	// is then whether Delivery holds every message sent, once.
	Sent        int64     `json:"sent,omitempty"`
	Delivery    *Delivery `json:"delivery,omitempty"`
	ExactlyOnce *bool     `json:"exactly_once,omitempty"`
	DurationS   float64   `json:"duration_s"`
}

// Ref names one figure: a run's metric.
type Ref struct {
	Run    string `json:"run"`
	Metric string `json:"metric"`
}

func (r Ref) String() string { return r.Run + ":" + r.Metric }

// Goal is what a row must meet: its ratio (On "ratio") or its value (On
// "value") compared with Limit by Op ("<=" or ">=").
type Goal struct {
	On    string  `json:"on"`
	Op    string  `json:"op"`
	Limit float64 `json:"limit"`
}

// ErrBadGoal is returned by [Scorecard.Compare] for a goal it cannot judge,
// and by [ReadScorecard] for a scorecard holding one.
var ErrBadGoal = errors.New("bench: a goal needs on ratio or value, op <= or >=, and a finite limit")

// fault says what is wrong with g on a row with or without a baseline, or
// "" if nothing is: a goal on the ratio needs a baseline to divide by.
func (g Goal) fault(baseline bool) string {
	switch {
	case g.On != "ratio" && g.On != "value":
		return fmt.Sprintf("on %q", g.On)
	case g.Op != "<=" && g.Op != ">=":
		return fmt.Sprintf("op %q", g.Op)
	case math.IsNaN(g.Limit) || math.IsInf(g.Limit, 0):
		return fmt.Sprintf("limit %v", g.Limit)
	case g.On == "ratio" && !baseline:
		return `on "ratio" without a baseline`
	}
	return ""
}

// Met reports whether a row of value and ratio meets g. A NaN or infinite
// operand (a ratio against a zero baseline) never meets it, and neither
// does anything meet a goal whose On is not "ratio" or "value" or whose Op
// is not "<=" or ">=".
func (g Goal) Met(value, ratio float64) bool {
	var x float64
	switch g.On {
	case "value":
		x = value
	case "ratio":
		x = ratio
	default:
		return false
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return false
	}
	switch g.Op {
	case "<=":
		return x <= g.Limit
	case ">=":
		return x >= g.Limit
	}
	return false
}

// Text formats g for a table: "ratio >= 0.8 x" or "<= 1000 µs".
func (g Goal) Text(metric string) string {
	if g.On == "ratio" {
		return fmt.Sprintf("%s %s x", g.Op, sig3(g.Limit))
	}
	return fmt.Sprintf("%s %s", g.Op, formatFigure(metric, g.Limit))
}

// Row is one comparison: a figure, the baseline figure it is held against
// (if any), Ratio = Value / BaselineValue, and the goal.
type Row struct {
	Topology string  `json:"topology"`
	What     string  `json:"what"`
	Figure   Ref     `json:"figure"`
	Value    float64 `json:"value"`
	Baseline *Ref    `json:"baseline,omitempty"`
	// BaselineName says what the baseline is, for people.
	BaselineName  string  `json:"baseline_name,omitempty"`
	BaselineValue float64 `json:"baseline_value,omitempty"`
	// Ratio is Value / BaselineValue, 0 without a baseline, NaN-free: a
	// zero baseline gives +Inf in memory and is written as null.
	Ratio    float64 `json:"-"`
	GoalText string  `json:"goal_text,omitempty"`
	Goal     *Goal   `json:"goal,omitempty"`
	// Met is nil without a goal.
	Met *bool `json:"met,omitempty"`
}

// MarshalJSON writes Ratio as null when the baseline was zero.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	out := struct {
		plain
		Ratio *float64 `json:"ratio"`
	}{plain: plain(r)}
	if r.Baseline != nil && !math.IsInf(r.Ratio, 0) && !math.IsNaN(r.Ratio) {
		out.Ratio = &r.Ratio
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote; a null ratio with a baseline
// reads as +Inf.
func (r *Row) UnmarshalJSON(b []byte) error {
	type plain Row
	var in struct {
		plain
		Ratio *float64 `json:"ratio"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*r = Row(in.plain)
	switch {
	case in.Ratio != nil:
		r.Ratio = *in.Ratio
	case r.Baseline != nil:
		r.Ratio = math.Inf(1)
	}
	return nil
}

// NewScorecard starts a Scorecard at the current time on this machine.
func NewScorecard(title string, config map[string]any) *Scorecard {
	cfg := make(map[string]any, len(config))
	for k, v := range config {
		cfg[k] = v
	}
	return &Scorecard{Title: title, StartedAt: time.Now().UTC(), Machine: DetectMachine(), Config: cfg, ExactlyOnce: true}
}

// AddRun adds a run; its ID must be new. A run with ExactlyOnce false
// clears the scorecard's ExactlyOnce.
func (s *Scorecard) AddRun(r Run) error {
	if _, ok := s.run(r.ID); ok {
		return fmt.Errorf("bench: run %q added twice", r.ID)
	}
	if r.ExactlyOnce != nil && !*r.ExactlyOnce {
		s.ExactlyOnce = false
	}
	s.Runs = append(s.Runs, r)
	return nil
}

func (s *Scorecard) run(id string) (*Run, bool) {
	for i := range s.Runs {
		if s.Runs[i].ID == id {
			return &s.Runs[i], true
		}
	}
	return nil, false
}

// Figure returns the value ref names.
func (s *Scorecard) Figure(ref Ref) (float64, error) {
	r, ok := s.run(ref.Run)
	if !ok {
		return 0, fmt.Errorf("bench: no run %q", ref.Run)
	}
	v, ok := r.Figures[ref.Metric]
	if !ok {
		return 0, fmt.Errorf("bench: run %q has no figure %q", ref.Run, ref.Metric)
	}
	return v, nil
}

// HasFigures reports whether the scorecard holds every figure refs name.
func (s *Scorecard) HasFigures(refs ...Ref) bool {
	for _, r := range refs {
		if _, err := s.Figure(r); err != nil {
			return false
		}
	}
	return true
}

// Compare adds a row holding fig against base (nil: no baseline) with goal
// (nil: none). Both values are read from the runs; the ratio and whether the
// goal was met follow from them.
func (s *Scorecard) Compare(what string, fig Ref, base *Ref, baseName string, goal *Goal) error {
	v, err := s.Figure(fig)
	if err != nil {
		return err
	}
	r, _ := s.run(fig.Run)
	row := Row{Topology: r.Topology, What: what, Figure: fig, Value: v}
	if base != nil {
		bv, err := s.Figure(*base)
		if err != nil {
			return err
		}
		b := *base
		row.Baseline, row.BaselineName, row.BaselineValue = &b, baseName, bv
		row.Ratio = v / bv
		if bv == 0 {
			row.Ratio = math.Inf(1)
		}
	}
	if goal != nil {
		if f := goal.fault(base != nil); f != "" {
			return fmt.Errorf("%w: row %q has a goal with %s", ErrBadGoal, what, f)
		}
		g := *goal
		met := g.Met(row.Value, row.Ratio)
		row.Goal, row.GoalText, row.Met = &g, g.Text(fig.Metric), &met
		s.Goals++
		if met {
			s.GoalsMet++
		}
	}
	s.Rows = append(s.Rows, row)
	return nil
}

// formatFigure formats a value of metric with its unit.
func formatFigure(metric string, v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return "n/a"
	case strings.HasSuffix(metric, "_us"):
		return duration(v)
	case metric == "msgs_per_s":
		return siUnit(v, "msgs/s")
	case strings.HasSuffix(metric, "cpu_ns_per_msg"):
		return sig3(v) + " ns CPU"
	case strings.HasSuffix(metric, "_share"):
		return sig3(100*v) + " %"
	case strings.HasSuffix(metric, "_count"):
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return sig3(v)
}

// formatRatio formats a ratio to a baseline: "0.95 x", or "n/a" against a
// zero baseline.
func formatRatio(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f x", v)
}

// formatJudged formats v, a ratio (on "ratio") or a value of metric, that a
// goal of limit judges, so that it reads as the limit only if it is the
// limit: 1000.4 µs against a goal of 1 ms is "1000.4 µs", not "1.00 ms",
// a ratio of 0.7996 against 0.8 is "0.7996 x", and one of 0.79996 is
// "0.79996 x".
func formatJudged(on, metric string, v, limit float64) string {
	f := func(x float64) string { return formatFigure(metric, x) }
	if on == "ratio" {
		f = formatRatio
	}
	// Three significant figures, or a ratio's two decimals, round away
	// differences of up to half a percent or 0.005 (and exactly that much
	// where the rounding goes toward the limit).
	near := math.Abs(v-limit) < 0.005*math.Abs(limit)
	if on == "ratio" {
		near = math.Abs(v-limit) < 0.005
	}
	if v == limit || math.IsInf(v, 0) || math.IsNaN(v) || !near && f(v) != f(limit) {
		return f(v)
	}
	format, prec, unit := byte('g'), 6, ""
	switch {
	case on == "ratio":
		format, prec, unit = 'f', 4, " x"
	case strings.HasSuffix(metric, "_us"):
		format, prec, unit = 'f', 1, " µs"
	}
	// More digits until v and the limit differ in them.
	for ; prec <= 17; prec++ {
		if s := strconv.FormatFloat(v, format, prec, 64); s != strconv.FormatFloat(limit, format, prec, 64) {
			return s + unit
		}
	}
	return strconv.FormatFloat(v, 'g', -1, 64) + unit
}

func (r Row) cells() []string {
	value, base, ratio, goal, met := formatFigure(r.Figure.Metric, r.Value), "", "", "", ""
	if r.Baseline != nil {
		base = r.BaselineName + " " + formatFigure(r.Figure.Metric, r.BaselineValue)
		ratio = formatRatio(r.Ratio)
	}
	if r.Met != nil {
		goal, met = r.GoalText, "met"
		if !*r.Met {
			met = "NOT met"
		}
	}
	switch {
	case r.Goal == nil: // a row read back from JSON may carry a verdict without its goal
	case r.Goal.On == "ratio":
		ratio = formatJudged("ratio", r.Figure.Metric, r.Ratio, r.Goal.Limit)
	default:
		value = formatJudged("value", r.Figure.Metric, r.Value, r.Goal.Limit)
	}
	return []string{r.Topology, r.What, value, base, ratio, goal, met}
}

// deliveryLine says what a run's delivery check found, or "" if it made none.
func (r Run) deliveryLine() string {
	if r.Delivery == nil || r.ExactlyOnce == nil {
		return ""
	}
	verdict := "exactly once"
	if !*r.ExactlyOnce {
		verdict = "NOT exactly once"
	}
	return fmt.Sprintf("%s, %s, %s: %d sent, %d delivered, %d duplicates, %d missing: %s",
		r.Topology, r.Case, r.Subject, r.Sent, r.Delivery.Delivered, r.Delivery.Duplicates, r.Delivery.Missing, verdict)
}

// WriteText writes the scorecard as an aligned table for a terminal.
func (s *Scorecard) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%s\nmachine: %s\n\n", s.Title, s.Machine)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "topology\twhat\tmeasured\tbaseline\tratio\tgoal\t")
	for _, r := range s.Rows {
		fmt.Fprintln(tw, strings.Join(r.cells(), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, r := range s.Runs {
		if l := r.deliveryLine(); l != "" {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintf(w, "\ngoals met: %d of %d; every checked run exactly once: %v\n", s.GoalsMet, s.Goals, s.ExactlyOnce)
	for _, n := range s.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// WriteMarkdown writes the scorecard as a Markdown document.
func (s *Scorecard) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# %s\n\n", mdEscape(s.Title))
	fmt.Fprintf(w, "- machine: %s\n- started: %s, %.0f s\n", mdEscape(s.Machine.String()), s.StartedAt.Format(time.RFC3339), s.DurationS)
	for _, k := range sortedKeys(s.Config) {
		fmt.Fprintf(w, "- %s: %v\n", mdEscape(k), s.Config[k])
	}
	fmt.Fprintf(w, "- goals met: **%d of %d**; every checked run exactly once: **%v**\n\n", s.GoalsMet, s.Goals, s.ExactlyOnce)
	fmt.Fprintln(w, "| topology | what | measured | baseline | ratio | goal | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range s.Rows {
		c := r.cells()
		for i := range c {
			c[i] = mdEscape(c[i])
		}
		if r.Met != nil && !*r.Met {
			c[6] = "**NOT met**"
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	fmt.Fprintln(w, "\n## Delivery")
	for _, r := range s.Runs {
		if l := r.deliveryLine(); l != "" {
			fmt.Fprintf(w, "- %s\n", mdEscape(l))
		}
	}
	fmt.Fprintln(w, "\n## Runs")
	fmt.Fprintln(w, "| run | topology | case | subject | receiving pid | figures |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range s.Runs {
		var figs []string
		for _, k := range sortedKeys(r.Figures) {
			figs = append(figs, k+" "+formatFigure(k, r.Figures[k]))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s |\n", mdEscape(r.ID), mdEscape(r.Topology), mdEscape(r.Case),
			mdEscape(r.Subject), r.PID, mdEscape(strings.Join(figs, ", ")))
	}
	if len(s.Notes) > 0 {
		fmt.Fprintln(w, "\n## Notes")
		for _, n := range s.Notes {
			fmt.Fprintf(w, "- %s\n", mdEscape(n))
		}
	}
	return nil
}

// WriteScorecard writes s to dir as name.json and name.md, creating dir.
func WriteScorecard(dir, name string, s *Scorecard) error {
	return writeJSONAndMarkdown(dir, name, s, s.WriteMarkdown)
}

// writeJSONAndMarkdown writes v to dir as name.json (indented) and, with
// md, as name.md, creating dir.
func writeJSONAndMarkdown(dir, name string, v any, md func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return writeFiles(dir, []outFile{
		{name + ".json", func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(v)
		}},
		{name + ".md", md},
	})
}

// ReadScorecard reads a scorecard that WriteScorecard wrote. It refuses,
// with an error wrapping [ErrBadGoal] that names the file, the row and the
// goal's bad field, a row whose goal [Scorecard.Compare] would not have
// accepted, so that nothing judges a row by a goal it does not understand.
func ReadScorecard(path string) (*Scorecard, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return decodeScorecard(path, b)
}

// decodeScorecard decodes b, the JSON of a scorecard read from path, and
// checks its goals.
func decodeScorecard(path string, b []byte) (*Scorecard, error) {
	var s Scorecard
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("bench: reading scorecard %s: %w", path, err)
	}
	for k, r := range s.Rows {
		if r.Goal == nil {
			continue
		}
		if f := r.Goal.fault(r.Baseline != nil); f != "" {
			return nil, fmt.Errorf("%w: scorecard %s, row %d (%q) has a goal with %s", ErrBadGoal, path, k+1, r.What, f)
		}
	}
	return &s, nil
}
