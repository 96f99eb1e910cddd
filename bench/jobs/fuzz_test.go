package jobs

import (
	"encoding/binary"
	"encoding/json"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

// FuzzBuildJSON builds the job a spec from the network describes (an agent
// builds what a coordinator sends it). Whatever the bytes: no panic; a job
// built is one the engine accepts, whose every task and source can be
// made, and whose pipeline tasks process a message of the spec's size;
// and the spec, encoded again, builds a job of the same shape.
func FuzzBuildJSON(f *testing.F) {
	for _, s := range []Spec{
		{Kind: "wordcount", Input: "in.txt", Middle: 3, Last: 2},
		{Kind: "pipeline", Size: 24},
		{Kind: "pipeline", Size: 100, Keys: 7, Limit: 10, DeadlineNs: 5, Middle: 1, Last: 4},
		{Kind: "pipeline", Size: MaxPipelineSize, Keys: MaxKeys},
	} {
		b, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"kind":"pipeline","size":24,"keys":-1}`))
	f.Add([]byte(`{"kind":"pipeline","size":24,"middle":100000}`))
	f.Add([]byte(`{"kind":"other"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		job, err := BuildJSON(b, func(ns, n int64) {})
		if err != nil {
			return
		}
		if err := job.Validate(); err != nil {
			t.Fatalf("built a job the engine refuses: %v", err)
		}
		var spec Spec
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatalf("BuildJSON accepted a spec that does not decode: %v", err)
		}
		for _, p := range job.Procs {
			for i := range p.Parallelism {
				if p.NewSource != nil {
					if _, err := p.NewSource(i); err != nil {
						t.Fatalf("%s %d: %v", p.Name, i, err)
					}
					continue
				}
				task, err := p.NewTask(i)
				if err != nil {
					t.Fatalf("%s %d: %v", p.Name, i, err)
				}
				if spec.Kind == "pipeline" && i == 0 {
					payload := make([]byte, spec.Size)
					binary.LittleEndian.PutUint64(payload[8:], 5)
					key := binary.LittleEndian.AppendUint64(nil, 5%uint64(max(spec.Keys, 1)))
					if spec.Keys == 0 {
						key = binary.LittleEndian.AppendUint64(nil, 5%64)
					}
					if err := task.Process([]engine.Message{{Ts: 5, Key: key, Payload: payload}}, &engine.Emitter{}); err != nil {
						t.Fatalf("%s processes a message of the spec: %v", p.Name, err)
					}
				}
			}
		}
		again, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		job2, err := BuildJSON(again, nil)
		if err != nil {
			t.Fatalf("the spec encoded again is refused: %v", err)
		}
		if len(job2.Procs) != len(job.Procs) {
			t.Fatalf("the spec encoded again builds %d processors, not %d", len(job2.Procs), len(job.Procs))
		}
		for i := range job.Procs {
			if job.Procs[i].Name != job2.Procs[i].Name || job.Procs[i].Parallelism != job2.Procs[i].Parallelism {
				t.Fatalf("processor %d: %+v, encoded again %+v", i, job.Procs[i], job2.Procs[i])
			}
		}
	})
}
