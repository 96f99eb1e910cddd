package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

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
