package engine_test

import (
	"errors"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

func TestValidateRefusesEveryMalformedJob(t *testing.T) {
	src := func(int) (engine.Source, error) { return idleSource{}, nil }
	task := func(int) (engine.Task, error) { return keepTask{}, nil }
	good := func() *engine.Job {
		return &engine.Job{
			Procs: []engine.Proc{{Name: "a", Parallelism: 1, NewSource: src}, {Name: "b", Parallelism: 2, NewTask: task}},
			Edges: []engine.Edge{{From: "a", To: "b", Partitioner: engine.Hash}},
		}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("a good job: %v", err)
	}
	for name, spoil := range map[string]func(j *engine.Job){
		"no processors":          func(j *engine.Job) { j.Procs, j.Edges = nil, nil },
		"a name twice":           func(j *engine.Job) { j.Procs[1].Name = "a" },
		"parallelism 0":          func(j *engine.Job) { j.Procs[1].Parallelism = 0 },
		"parallelism over max":   func(j *engine.Job) { j.Procs[1].Parallelism = engine.MaxParallelism + 1 },
		"no constructor":         func(j *engine.Job) { j.Procs[1].NewTask = nil },
		"two constructors":       func(j *engine.Job) { j.Procs[1].NewSource = src },
		"an unknown processor":   func(j *engine.Job) { j.Edges[0].To = "c" },
		"an unknown partitioner": func(j *engine.Job) { j.Edges[0].Partitioner = engine.Broadcast + 1 },
		"an edge into a source":  func(j *engine.Job) { j.Edges = append(j.Edges, engine.Edge{From: "b", To: "a"}) },
		"a task without input":   func(j *engine.Job) { j.Edges = nil },
		"a cycle": func(j *engine.Job) {
			j.Procs = append(j.Procs, engine.Proc{Name: "c", Parallelism: 1, NewTask: task})
			j.Edges = append(j.Edges, engine.Edge{From: "b", To: "c"}, engine.Edge{From: "c", To: "b"})
		},
	} {
		j := good()
		spoil(j)
		if err := j.Validate(); !errors.Is(err, engine.ErrInvalidJob) {
			t.Errorf("%s: Validate = %v, want ErrInvalidJob", name, err)
		}
	}
	j := good()
	j.Procs[1].Parallelism = engine.MaxParallelism
	if err := j.Validate(); err != nil {
		t.Errorf("parallelism at the max: %v", err)
	}
}

// A nil job is refused as invalid by Validate, NewCoordinator and
// NewWorker, and Placement over no nodes places every task on node 0, as a
// Config of Nodes 0 runs one node: neither panics.
func TestANilJobAndNoNodesAreRefusedOrDefaultedWithoutPanicking(t *testing.T) {
	var job *engine.Job
	if err := job.Validate(); !errors.Is(err, engine.ErrInvalidJob) {
		t.Errorf("nil job: Validate = %v, want ErrInvalidJob", err)
	}
	if _, err := engine.NewCoordinator(nil, engine.Config{Dir: t.TempDir()}); !errors.Is(err, engine.ErrInvalidJob) {
		t.Errorf("nil job: NewCoordinator = %v, want ErrInvalidJob", err)
	}
	if _, err := engine.NewWorker(nil, engine.WorkerConfig{Dir: t.TempDir()}); !errors.Is(err, engine.ErrInvalidJob) {
		t.Errorf("nil job: NewWorker = %v, want ErrInvalidJob", err)
	}
	task := func(int) (engine.Task, error) { return keepTask{}, nil }
	j := &engine.Job{Procs: []engine.Proc{{Name: "a", Parallelism: 3, NewTask: task}}}
	for _, nodes := range []int{0, -1} {
		p := j.Placement(nodes)
		if len(p) != 3 {
			t.Errorf("Placement(%d) places %d tasks, want 3", nodes, len(p))
		}
		for id, n := range p {
			if n != 0 {
				t.Errorf("Placement(%d) puts %v on node %d, want 0", nodes, id, n)
			}
		}
	}
}
