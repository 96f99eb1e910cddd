package engine

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/taskid"
)

// Source reads a pipeline's input. Its records carry strictly increasing
// timestamps (their position in the input is the usual choice), so that the
// engine can ask for them again from any timestamp. A source is used by one
// goroutine at a time.
type Source interface {
	// Start positions the source at its first record with timestamp >=
	// next. The engine calls it once, before the first Read: with 0 on a
	// fresh start, and after a recovery with the timestamp after the last
	// record in the source's message store.
	Start(next int64) error
	// Read appends the next records to dst, all with timestamps < limit
	// (a record at or beyond it fails the source: a recovery would repeat
	// it), and returns low, a bound below which no later record's timestamp
	// falls. When it has nothing below limit it appends nothing (it may
	// wait briefly first). It returns io.EOF once the input has ended,
	// possibly with final records. The engine keeps no reference to the
	// appended records' payloads after the next Read.
	Read(dst []Record, limit int64) (out []Record, low int64, err error)
}

// Task processes the messages of one processor task. Process is given runs
// of messages (their Key and Payload valid only during the call) and emits
// its output through out. An error or a panic fails the task, which makes
// the engine recover from the last checkpoint. Calls are never concurrent.
type Task interface {
	Process(in []Message, out *Emitter) error
}

// Stateful is a Task whose state is checkpointed. The engine keeps a
// second instance of the task, made by the same factory, as the checkpoint
// copy; Snapshot and Restore move state between them and to and from disk.
// Sources are never snapshotted, even if they implement Stateful: a
// source's position is its state, set again by [Source.Start].
type Stateful interface {
	// Snapshot appends the encoded state to dst.
	Snapshot(dst []byte) ([]byte, error)
	// Restore replaces the state with one encoded by Snapshot.
	Restore(state []byte) error
}

// Finisher is implemented by tasks and sources that produce a result from
// their final state at the end of input: a sink writes its output there,
// so replay never writes anything twice. The results are returned by
// [Coordinator.Run], by task.
type Finisher interface {
	Finish() ([]byte, error)
}

// Proc is one processor of a job: a source or a task, with its
// parallelism. Exactly one of NewSource and NewTask is set; each is called
// once per task index, and again whenever the task restarts. It returns a
// source or task, or an error, which fails the task; one that returns
// neither ends the run with an error wrapping [ErrInvalidJob].
type Proc struct {
	Name        string
	Parallelism int
	NewSource   func(index int) (Source, error)
	NewTask     func(index int) (Task, error)
}

// Edge connects two processors by name.
type Edge struct {
	From, To    string
	Partitioner Partitioner
}

// Job is a DAG of processors. Task ids are (processor's position in Procs,
// index).
type Job struct {
	Procs []Proc
	Edges []Edge
}

// ErrInvalidJob is wrapped by the errors about a job's shape, and by the
// error of a run whose processor's constructor returned neither a source
// or task nor an error.
var ErrInvalidJob = errors.New("engine: invalid job")

// MaxParallelism is the most tasks a processor may have. A job comes from
// the program, or, through a job description, from the network (loadgen's
// agents build the job a coordinator describes); each task costs state in
// every worker, so a parallelism is bounded before anything is made for
// it.
const MaxParallelism = 1 << 16

// Validate checks the job: unique names, parallelism in [1,
// MaxParallelism], one
// constructor per processor, edges between known processors, sources
// without inputs and tasks with some, no cycles.
func (j *Job) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidJob, fmt.Sprintf(format, a...))
	}
	if j == nil {
		return bad("no job (nil)")
	}
	if len(j.Procs) == 0 {
		return bad("no processors")
	}
	names := map[string]int{}
	for i, p := range j.Procs {
		if _, dup := names[p.Name]; dup {
			return bad("processor %q appears twice", p.Name)
		}
		names[p.Name] = i
		if p.Parallelism < 1 || p.Parallelism > MaxParallelism {
			return bad("processor %q has parallelism %d, not in [1, %d]", p.Name, p.Parallelism, MaxParallelism)
		}
		if (p.NewSource == nil) == (p.NewTask == nil) {
			return bad("processor %q needs exactly one of NewSource and NewTask", p.Name)
		}
	}
	in := make([]int, len(j.Procs))
	for _, e := range j.Edges {
		f, ok1 := names[e.From]
		t, ok2 := names[e.To]
		if !ok1 || !ok2 {
			return bad("edge %s -> %s names an unknown processor", e.From, e.To)
		}
		if e.Partitioner < Hash || e.Partitioner > Broadcast {
			return bad("edge %s -> %s has an unknown partitioner", e.From, e.To)
		}
		if j.Procs[t].NewSource != nil {
			return bad("edge %s -> %s goes into a source", e.From, e.To)
		}
		_ = f
		in[t]++
	}
	for i, p := range j.Procs {
		if p.NewTask != nil && in[i] == 0 {
			return bad("task %q has no input", p.Name)
		}
	}
	if _, err := j.depth(); err != nil {
		return err
	}
	return nil
}

// depth is the number of edges on the longest path.
func (j *Job) depth() (int, error) {
	idx := map[string]int{}
	for i, p := range j.Procs {
		idx[p.Name] = i
	}
	longest := make([]int, len(j.Procs))
	state := make([]int, len(j.Procs)) // 0 new, 1 visiting, 2 done
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("%w: the edges form a cycle through %q", ErrInvalidJob, j.Procs[i].Name)
		case 2:
			return nil
		}
		state[i] = 1
		for _, e := range j.Edges {
			if idx[e.From] != i {
				continue
			}
			t := idx[e.To]
			if err := visit(t); err != nil {
				return err
			}
			longest[i] = max(longest[i], longest[t]+1)
		}
		state[i] = 2
		return nil
	}
	d := 0
	for i := range j.Procs {
		if err := visit(i); err != nil {
			return 0, err
		}
		d = max(d, longest[i])
	}
	return d, nil
}

// tasks lists every task id of the job in order.
func (j *Job) tasks() []taskid.ID {
	var ids []taskid.ID
	for p, pr := range j.Procs {
		for i := range pr.Parallelism {
			ids = append(ids, taskid.ID{Processor: uint32(p), Index: uint32(i)})
		}
	}
	return ids
}

// outEdges lists, for processor p, its outgoing edges as (target processor,
// partitioner).
func (j *Job) outEdges(p int) []outEdge {
	var out []outEdge
	for _, e := range j.Edges {
		if e.From != j.Procs[p].Name {
			continue
		}
		for t, pr := range j.Procs {
			if pr.Name == e.To {
				out = append(out, outEdge{proc: t, part: e.Partitioner, n: pr.Parallelism})
			}
		}
	}
	return out
}

type outEdge struct {
	proc int
	part Partitioner
	n    int
}

// Placement maps each task to the node (0..nodes-1) that runs it: tasks in
// order, round robin over the nodes. Fewer than one node counts as one, as
// Config.Nodes does.
func (j *Job) Placement(nodes int) map[taskid.ID]int {
	nodes = max(nodes, 1)
	m := map[taskid.ID]int{}
	for i, id := range j.tasks() {
		m[id] = i % nodes
	}
	return m
}

// ckptName is the name of a task in the checkpoint store.
func ckptName(id taskid.ID) string { return "task-" + id.String() }
