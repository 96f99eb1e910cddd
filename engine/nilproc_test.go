package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAProcessorWhoseConstructorReturnsNilEndsTheRunSayingSo: a NewSource
// or NewTask that returns neither a source or task nor an error is a
// defect of the job, which no restart mends. The run must end at once
// with an error wrapping ErrInvalidJob that names the processor and says
// it returned nil, without a recovery, also across a worker process's
// control line. It used to be caught only as a recovered nil-pointer
// panic in the task, and recovered from until the restart policy ran out.
func TestAProcessorWhoseConstructorReturnsNilEndsTheRunSayingSo(t *testing.T) {
	for _, c := range []struct {
		name string
		job  *Job
		want string
	}{
		{"a nil source", &Job{
			Procs: []Proc{
				{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return nil, nil }},
				{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return dropTask{}, nil }},
			},
			Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
		}, `processor "src": NewSource(0) returned a nil source`},
		{"a nil task", &Job{
			Procs: []Proc{
				{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return &countSource{n: 10}, nil }},
				{Name: "sink", Parallelism: 2, NewTask: func(i int) (Task, error) {
					if i == 1 {
						return nil, nil
					}
					return dropTask{}, nil
				}},
			},
			Edges: []Edge{{From: "src", To: "sink", Partitioner: RoundRobin}},
		}, `processor "sink": NewTask(1) returned a nil task`},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := runCountingRecoveries(t, c.job, Config{Restart: RestartPolicy{MaxRestarts: 3, MinBackoff: time.Millisecond}})
			if !errors.Is(err, ErrInvalidJob) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("run ended with %v; want ErrInvalidJob saying %s", err, c.want)
			}
			if n != 0 {
				t.Errorf("%d recoveries, want none", n)
			}

			// A worker process's answer carries it across the pipe.
			w, err := NewWorker(c.job, WorkerConfig{Dir: t.TempDir(), NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			r := w.Do(Request{ID: 1, Op: "start", Start: &StartCmd{Gen: 1, Node: 0, Addrs: []string{w.Addr()}, Placement: make([]int, len(c.job.tasks()))}})
			if !r.InvalidJob || !errors.Is(r.err(), ErrInvalidJob) || !strings.Contains(r.Err, c.want) {
				t.Fatalf("the answer to start is %+v; want an error saying %s, marked invalid_job", r, c.want)
			}
		})
	}
}
