package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestServeWorkerEndsOnARequestThatIsNotOne: a worker process serves
// requests until a line that is not a request, then ends with an error
// naming it, after answering what came before and saying hello first.
func TestServeWorkerEndsOnARequestThatIsNotOne(t *testing.T) {
	job := &engine.Job{Procs: []engine.Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (engine.Source, error) { return idleSource{}, nil }}}}
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	addr := w.Addr()
	var out bytes.Buffer
	in := strings.NewReader(`{"id":7,"op":"clock","gen":1}` + "\n" + `{"id":8,"op":` + "\n" + `{"id":9,"op":"clock","gen":1}` + "\n")
	err = engine.ServeWorker(context.Background(), w, in, &out)
	if err == nil || !strings.Contains(err.Error(), "control line") {
		t.Fatalf("ServeWorker returned %v, want an error about the control line", err)
	}
	var lines []engine.Response
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r engine.Response
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		lines = append(lines, r)
	}
	if len(lines) != 2 || lines[0].Addr != addr || lines[1].ID != 7 {
		t.Fatalf("output %+v: want the hello with %s, then the answer to request 7 only", lines, addr)
	}
}

// TestServeWorkerAnswersABadStartWithAnError: a start request whose
// placement names a node beyond its addresses gets an error answer, and the
// worker goes on to answer the next request. (It used to panic the worker
// process.)
func TestServeWorkerAnswersABadStartWithAnError(t *testing.T) {
	job := srcSinkJob(make(chan string, 1))
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	in := strings.NewReader(`{"id":1,"op":"start","start":{"gen":1,"node":0,"addrs":["127.0.0.1:1"],"placement":[0,5]}}` + "\n" +
		`{"id":2,"op":"clock","gen":1}` + "\n")
	if err := engine.ServeWorker(context.Background(), w, in, &out); err != nil {
		t.Fatal(err)
	}
	answers := map[uint64]engine.Response{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n")[1:] { // after the hello
		var r engine.Response
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		answers[r.ID] = r
	}
	if r, ok := answers[1]; !ok || !strings.Contains(r.Err, "puts task 1.0 on node 5") {
		t.Fatalf("the start was answered %+v (answered: %v), want an error naming node 5", r, ok)
	}
	if _, ok := answers[2]; !ok {
		t.Fatalf("the request after the bad start was not answered: %s", out.String())
	}
}

// TestServeWorkerEndsWhenItsContextDoesWhileNoRequestComes: a worker
// process told to stop (loadgen node's context ends on SIGTERM) while its
// coordinator sends nothing returns ctx's error and closes its worker,
// whose directory a new worker can then take. It used to look at ctx only
// after a request, and waited for one forever.
func TestServeWorkerEndsWhenItsContextDoesWhileNoRequestComes(t *testing.T) {
	job := &engine.Job{Procs: []engine.Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (engine.Source, error) { return idleSource{}, nil }}}}
	dir := t.TempDir()
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	in, silent := io.Pipe() // a coordinator that never sends
	defer silent.Close()    // ends ServeWorker's reader
	hello, out := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- engine.ServeWorker(ctx, w, in, out); out.Close() }()
	line, err := bufio.NewReader(hello).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the hello line: %v", err)
	}
	if !strings.Contains(line, w.Addr()) {
		t.Fatalf("hello line %q does not name the worker's address %s", line, w.Addr())
	}
	go io.Copy(io.Discard, hello) // whatever else it writes
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ServeWorker returned %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a hang guard, far beyond any wait
		t.Fatal("ServeWorker still waits for a request after its context ended")
	}
	again, err := engine.NewWorker(job, engine.WorkerConfig{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatalf("a new worker on the directory: %v (ServeWorker did not close its worker)", err)
	}
	again.Close()
}
