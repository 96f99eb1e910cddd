package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestDifferentJobsHaveDifferentShapes: the journal keeps the job's shape
// and a coordinator resumes a journal whose shape (config, node count and
// placement) equals its own job's, so two different jobs must never have
// one shape. Processor names went into it unquoted: a source named
// "a:source*1 b" beside "c" read like "a" beside "b:source*1 c", two jobs
// with two tasks each, one placement, and either resumed the other's
// journal.
func TestDifferentJobsHaveDifferentShapes(t *testing.T) {
	src := func(name string, par int) Proc {
		return Proc{Name: name, Parallelism: par, NewSource: func(int) (Source, error) { return quietSource{}, nil }}
	}
	task := func(name string, par int) Proc {
		return Proc{Name: name, Parallelism: par, NewTask: func(int) (Task, error) { return dropTask{}, nil }}
	}
	for _, c := range []struct {
		name string
		a, b *Job
	}{
		{"a name holding ':' and ' '",
			&Job{Procs: []Proc{src("a:source*1 b", 1), src("c", 1)}},
			&Job{Procs: []Proc{src("a", 1), src("b:source*1 c", 1)}}},
	} {
		for _, j := range []*Job{c.a, c.b} {
			if err := j.Validate(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if c.a.shape() == c.b.shape() {
			t.Errorf("%s: two jobs have the shape %q", c.name, c.a.shape())
		}
	}

	// Every job's shape reads back as that job (parseShape), so no two
	// jobs share one: names from an alphabet of the characters the shape
	// uses itself.
	rng := rand.New(rand.NewPCG(1, 2))
	name := func() string {
		const alphabet = `ab :*->"\1`
		b := make([]byte, rng.IntN(6))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	for range 20000 {
		var want parsedShape
		seen := map[string]bool{}
		for range 1 + rng.IntN(4) {
			n := name()
			if seen[n] {
				continue
			}
			seen[n] = true
			want.procs = append(want.procs, shapeProc{n, []string{"source", "task"}[rng.IntN(2)], 1 + rng.IntN(12)})
		}
		for range rng.IntN(4) {
			from, to := want.procs[rng.IntN(len(want.procs))], want.procs[rng.IntN(len(want.procs))]
			want.edges = append(want.edges, shapeEdge{from.name, to.name, Partitioner(rng.IntN(3)).String()})
		}
		j := &Job{}
		for _, p := range want.procs {
			if p.kind == "source" {
				j.Procs = append(j.Procs, src(p.name, p.par))
			} else {
				j.Procs = append(j.Procs, task(p.name, p.par))
			}
		}
		for _, e := range want.edges {
			part := map[string]Partitioner{"hash": Hash, "round-robin": RoundRobin, "broadcast": Broadcast}[e.part]
			j.Edges = append(j.Edges, Edge{From: e.from, To: e.to, Partitioner: part})
		}
		got, err := parseShape(j.shape())
		if err != nil || !slices.Equal(got.procs, want.procs) || !slices.Equal(got.edges, want.edges) {
			t.Fatalf("the shape %q reads back as %+v (%v), want %+v", j.shape(), got, err, want)
		}
	}
}

// TestTheShapeOfAJobWithPlainNamesIsAsJournaledBefore: a journal written
// before names were quoted must still resume its job when no name needed
// quoting: the shape is the same string.
func TestTheShapeOfAJobWithPlainNamesIsAsJournaledBefore(t *testing.T) {
	job := &Job{
		Procs: []Proc{
			{Name: "lines", Parallelism: 2, NewSource: func(int) (Source, error) { return quietSource{}, nil }},
			{Name: "split-words", Parallelism: 3, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
			{Name: "count", Parallelism: 1, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
		},
		Edges: []Edge{
			{From: "lines", To: "split-words", Partitioner: RoundRobin},
			{From: "split-words", To: "count", Partitioner: Hash},
		},
	}
	const before = "lines:source*2 split-words:task*3 count:task*1 lines->split-words:round-robin split-words->count:hash"
	if got := job.shape(); got != before {
		t.Fatalf("shape %q, want %q as before", got, before)
	}
}

type shapeProc struct {
	name, kind string
	par        int
}

type shapeEdge struct{ from, to, part string }

type parsedShape struct {
	procs []shapeProc
	edges []shapeEdge
}

// parseShape reads a job's shape back: that it can is what makes the
// shape tell jobs apart.
func parseShape(s string) (parsedShape, error) {
	var out parsedShape
	name := func() (string, error) {
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return "", err
			}
			s = s[len(q):]
			return strconv.Unquote(q)
		}
		end := len(s)
		if i := strings.Index(s, ":"); i >= 0 {
			end = i
		}
		if i := strings.Index(s, "->"); i >= 0 && i < end {
			end = i
		}
		n := s[:end]
		s = s[end:]
		return n, nil
	}
	word := func(stop string) string {
		end := strings.IndexAny(s, stop)
		if end < 0 {
			end = len(s)
		}
		w := s[:end]
		s = s[end:]
		return w
	}
	for s != "" {
		n, err := name()
		if err != nil {
			return out, err
		}
		switch {
		case strings.HasPrefix(s, ":") && len(out.edges) == 0:
			s = s[1:]
			kind := word("*")
			if !strings.HasPrefix(s, "*") {
				return out, fmt.Errorf("no '*' after the kind at %q", s)
			}
			s = s[1:]
			par, err := strconv.Atoi(word(" "))
			if err != nil {
				return out, err
			}
			out.procs = append(out.procs, shapeProc{n, kind, par})
		case strings.HasPrefix(s, "->"):
			s = s[2:]
			to, err := name()
			if err != nil {
				return out, err
			}
			if !strings.HasPrefix(s, ":") {
				return out, fmt.Errorf("no ':' after an edge's target at %q", s)
			}
			s = s[1:]
			out.edges = append(out.edges, shapeEdge{n, to, word(" ")})
		default:
			return out, fmt.Errorf("a name not followed by a processor or an edge at %q", s)
		}
		if s != "" {
			if !strings.HasPrefix(s, " ") {
				return out, fmt.Errorf("no ' ' at %q", s)
			}
			s = s[1:]
		}
	}
	return out, nil
}
