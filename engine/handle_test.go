package engine

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestAnInProcessWorkersEventsDoNotOutliveItsHandle: the goroutine that
// hands an in-process worker's events to the coordinator must end when
// the handle is closed, even while it waits to hand one over to a queue
// nobody reads any more (the run ended at its first failure while
// hundreds of tasks reported theirs). It used to wait for ever: one
// goroutine, and the closed worker it holds, leaked per run.
func TestAnInProcessWorkersEventsDoNotOutliveItsHandle(t *testing.T) {
	job := srcSinkJob(func(int) (Source, error) { return quietSource{}, nil })
	const forwarder = "engine.(*localHandle).restart.func"
	running := func() (int, string) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		return strings.Count(stacks, forwarder), stacks
	}
	before, _ := running()     // other tests' handles, if any
	events := make(chan Event) // the coordinator no longer reads
	h, err := newLocalHandle(job, WorkerConfig{Dir: t.TempDir(), NoSync: true}, 0, events)
	if err != nil {
		t.Fatal(err)
	}
	w := h.w.Load()
	// One more event than the worker queues: once the last is queued, the
	// forwarder has taken one and waits to hand it over.
	for range cap(w.events) + 1 {
		w.events <- Event{Gen: 1, Task: "1.0", Err: "bad record"}
	}
	h.close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // a hang guard
		n, stacks := running()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the handle is closed, but its event forwarder still runs:\n%s", stacks)
		}
	}
}

// A failure a worker reports as text (a control call's Response, a
// task's Event) matches the sentinel the worker marked it with, and says
// what the worker said once, not the sentinel's text twice.
func TestAWorkersMarkedFailureMatchesItsSentinelAndReadsOnce(t *testing.T) {
	lost := fmt.Errorf("%w: source \"src\" task 0.0: syncing failed", ErrSourceLogLost)
	invalid := fmt.Errorf("%w: processor \"sink\": NewTask(0) returned a nil task and no error", ErrInvalidJob)
	for _, c := range []struct {
		name string
		got  error
		is   error
		want string
	}{
		{"a Response of a lost log", (&Response{Err: lost.Error(), LogLost: true}).err(), ErrSourceLogLost, lost.Error()},
		{"a Response of an invalid job", (&Response{Err: invalid.Error(), InvalidJob: true}).err(), ErrInvalidJob, invalid.Error()},
		{"an Event of a lost log", Event{Task: "0.0", Err: lost.Error(), LogLost: true}.err(), ErrSourceLogLost, "task 0.0 failed: " + lost.Error()},
	} {
		if !errors.Is(c.got, c.is) {
			t.Errorf("%s: %v does not match %v", c.name, c.got, c.is)
		}
		if c.got.Error() != c.want {
			t.Errorf("%s reads %q, want %q", c.name, c.got, c.want)
		}
	}
}
